// The gradient rules of every op in Ops.def, written with the public ops (see GradRules.h).
#include "autograd/GradRules.h"

#include "tracer/Autocast.h"

#include <cassert>

#include <cmath>
#include <limits>
#include <string>

#include <rcjit/Ops.h>

#include "tracer/Autocast.h"
#include "tracer/OpCases.h"
#include "tracer/OpsInternal.h"

namespace rcjit::autograd {

namespace {

constexpr double kSqrt1_2 = 0.70710678118654752440;
constexpr double kInvSqrt2Pi = 0.39894228040143267794;
constexpr double kTwoOverSqrtPi = 1.12837916709551257390;

using Grads = std::vector<Tensor>;

// The gradient of a reduction's output spread back over the reduced dims of `shape`.
Tensor unreduce(const Tensor &g, const Shape &shape, const Dims &dims, bool keepdim) {
  Tensor r = g;
  if (!keepdim) {
    for (int64_t d : dims) r = unsqueeze(r, d); // dims are sorted ascending
  }
  return expand(r, Dims(shape.begin(), shape.end()));
}

double reducedCount(const Shape &shape, const Dims &dims) {
  double n = 1;
  for (int64_t d : dims) n *= static_cast<double>(shape[static_cast<size_t>(d)]);
  return n;
}

// The trailing `k` dims of a rank-`rank` tensor.
Dims trailingDims(int64_t rank, int64_t k) {
  Dims d;
  for (int64_t i = rank - k; i < rank; ++i) d.push_back(i);
  return d;
}

Tensor unaryGrad(OpKind op, const Tensor &x, const Tensor &y, const Tensor &g) {
  switch (op) {
  case OpKind::neg:
    return -g;
  case OpKind::abs: // sign(x), 0 at 0 (PyTorch)
    return where(gt(x, 0.0), g, where(lt(x, 0.0), -g, 0.0));
  case OpKind::exp:
    return g * y;
  case OpKind::log:
    return g / x;
  case OpKind::sqrt:
    return g * 0.5 / y;
  case OpKind::rsqrt: // d x^-1/2 = -1/2 x^-3/2 = -1/2 y^3
    return g * -0.5 * y * y * y;
  case OpKind::reciprocal:
    return -g * y * y;
  case OpKind::tanh:
    return g * (1.0 - y * y);
  case OpKind::sigmoid:
    return g * y * (1.0 - y);
  case OpKind::relu: // 0 at 0 (PyTorch)
    return where(gt(x, 0.0), g, 0.0);
  case OpKind::gelu: { // d/dx x Phi(x) = Phi(x) + x phi(x)
    Tensor cdf = 0.5 * (1.0 + erf(x * kSqrt1_2));
    Tensor pdf = exp(-0.5 * x * x) * kInvSqrt2Pi;
    return g * (cdf + x * pdf);
  }
  case OpKind::silu: {
    Tensor s = sigmoid(x);
    return g * s * (1.0 + x * (1.0 - s));
  }
  case OpKind::erf:
    return g * kTwoOverSqrtPi * exp(-(x * x));
  case OpKind::sin:
    return g * cos(x);
  case OpKind::cos:
    return -g * sin(x);
  case OpKind::cast: // cast back by the caller
    return g;
    RCJIT_OP_CASES(Source, Binary, Compare, Where, Reduce, Normalize, Matmul, Nn, View, Copy,
                   Collective)
    break;
  }
  assert(false && "unaryGrad: not a unary op");
  throw Error("internal: unaryGrad called for " + std::string(opName(op)));
}

Grads binaryGrad(OpKind op, const Tensor &a, const Tensor &b, const Tensor &y, const Tensor &g,
                 const std::vector<bool> &need) {
  Grads r(2);
  switch (op) {
  case OpKind::add:
    r = {g, g};
    break;
  case OpKind::sub:
    r = {g, need[1] ? -g : Tensor()};
    break;
  case OpKind::mul:
    r = {need[0] ? g * b : Tensor(), need[1] ? g * a : Tensor()};
    break;
  case OpKind::div:
    r = {need[0] ? g / b : Tensor(), need[1] ? -g * y / b : Tensor()};
    break;
  case OpKind::pow: // PyTorch: 0 where the exponent is 0; 0 where a == 0 and b >= 0 for b
    if (need[0]) r[0] = where(eq(b, 0.0), 0.0, g * b * pow(a, b - 1.0));
    if (need[1]) {
      Tensor gb = g * y * log(a);
      r[1] = where(eq(a, 0.0), where(ge(b, 0.0), 0.0, gb), gb);
    }
    break;
  case OpKind::maximum:
  case OpKind::minimum: { // ties split the gradient evenly (PyTorch)
    Tensor half = g * 0.5;
    Tensor aWins = op == OpKind::maximum ? gt(a, b) : lt(a, b);
    Tensor bWins = op == OpKind::maximum ? lt(a, b) : gt(a, b);
    Tensor tie = where(eq(a, b), half, 0.0);
    if (need[0]) r[0] = where(aWins, g, tie);
    if (need[1]) r[1] = where(bWins, g, tie);
    break;
  }
    RCJIT_OP_CASES(Source, Unary, Compare, Where, Reduce, Normalize, Matmul, Nn, View, Copy,
                   Collective)
    assert(false && "binaryGrad: not a binary op");
    throw Error("internal: binaryGrad called for " + std::string(opName(op)));
  }
  return r;
}

Grads matmulGrad(const Tensor &a, const Tensor &b, const Tensor &g, const std::vector<bool> &need) {
  // Promote 1-D operands as the forward did and put the removed dims back into g.
  Tensor a2 = a.dim() == 1 ? unsqueeze(a, 0) : a;
  Tensor b2 = b.dim() == 1 ? unsqueeze(b, 1) : b;
  Tensor g2 = g;
  if (b.dim() == 1) g2 = unsqueeze(g2, -1);
  if (a.dim() == 1) g2 = unsqueeze(g2, -2);
  Grads r(2);
  if (need[0]) {
    Tensor ga = matmul(g2, transpose(b2, -1, -2));
    r[0] = reshape(sumToShape(ga, a2.shape()), a.shape());
  }
  if (need[1]) {
    Tensor gb;
    if (b2.dim() == 2 && a2.dim() > 2) { // batch folded into the reduction: one GEMM
      const int64_t k = a2.size(-1), n = g2.size(-1);
      gb = matmul(transpose(reshape(a2, {-1, k}), 0, 1), reshape(g2, {-1, n}));
    } else {
      gb = sumToShape(matmul(transpose(a2, -1, -2), g2), b2.shape());
    }
    r[1] = reshape(gb, b.shape());
  }
  return r;
}

Grads linearGrad(const std::vector<Tensor> &in, const Tensor &g, const std::vector<bool> &need) {
  const Tensor &x = in[0], &w = in[1]; // w [out, in]
  Grads r(in.size());
  if (need[0]) r[0] = matmul(g, w);
  if (need[1]) {
    r[1] = matmul(transpose(reshape(g, {-1, w.size(0)}), 0, 1), reshape(x, {-1, w.size(1)}));
  }
  if (in.size() > 2 && need[2]) {
    // the rows of g summed: a GEMV with a row of ones, which walks g row by row, where a
    // reduction over leading dims would stride down its columns
    const int64_t out = w.size(0), rows = out ? g.numel() / out : 0;
    r[2] = g.dim() >= 2 && rows > 1 ? reshape(matmul(Tensor::ones({1, rows}, g.dtype(), g.device()),
                                                     reshape(g, {rows, out})),
                                              {out})
                                    : g; // summed to [out] by the caller
  }
  return r;
}

Grads layerNormGrad(const std::vector<Tensor> &in, const Attrs &a, const Tensor &g,
                    const std::vector<bool> &need) {
  const Tensor &x = in[0], &w = in[1];
  const Dims d = trailingDims(x.dim(), w.dim());
  Tensor xc = x - mean(x, d, true);
  Tensor rstd = rsqrt(mean(xc * xc, d, true) + a.eps);
  Tensor xhat = xc * rstd;
  Grads r(in.size());
  if (need[0]) {
    Tensor gxh = g * w;
    r[0] = rstd * (gxh - mean(gxh, d, true) - xhat * mean(gxh * xhat, d, true));
  }
  if (need[1]) r[1] = g * xhat;
  if (in.size() > 2 && need[2]) r[2] = g;
  return r;
}

Grads rmsNormGrad(const std::vector<Tensor> &in, const Attrs &a, const Tensor &g,
                  const std::vector<bool> &need) {
  const Tensor &x = in[0], &w = in[1];
  const Dims d = trailingDims(x.dim(), w.dim());
  Tensor rstd = rsqrt(mean(x * x, d, true) + a.eps);
  Tensor xhat = x * rstd;
  Grads r(2);
  if (need[0]) {
    Tensor gxh = g * w;
    r[0] = rstd * (gxh - xhat * mean(gxh * xhat, d, true));
  }
  if (need[1]) r[1] = g * xhat;
  return r;
}

Grads sdpaGrad(const std::vector<Tensor> &in, const Attrs &a, const Tensor &g,
               const std::vector<bool> &need) {
  const Tensor &q = in[0], &k = in[1], &v = in[2];
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
  Tensor s = matmul(q, transpose(k, -1, -2)) * scale;
  if (a.causal) { // key j is visible to query i when j <= i (top-left aligned, as the forward)
    const int64_t lq = q.size(-2), lk = k.size(-2);
    Tensor keys = unsqueeze(Tensor::arange(lk, DType::i64, q.device()), 0);
    Tensor queries = unsqueeze(Tensor::arange(lq, DType::i64, q.device()), 1);
    s = where(le(keys, queries), s, -std::numeric_limits<double>::infinity());
  }
  Tensor p = softmax(s, -1);
  Grads r(3);
  if (need[2]) r[2] = matmul(transpose(p, -1, -2), g);
  if (need[0] || need[1]) {
    Tensor gp = matmul(g, transpose(v, -1, -2));
    Tensor gs = p * (gp - sum(gp * p, {-1}, true)) * scale;
    if (need[0]) r[0] = matmul(gs, k);
    if (need[1]) r[1] = matmul(transpose(gs, -1, -2), q);
  }
  return r;
}

Grads linearCePickGrad(const std::vector<Tensor> &in, const Tensor &g,
                       const std::vector<bool> &need) {
  const Tensor &x = in[0], &w = in[1];
  Grads r(3);
  if (!need[0] && !need[1]) return r;
  Tensor packed = detail::linearCePickBackward(x, w, in[2], g);
  const int64_t ws = w.numel(); // [dw | dx | values]: dw at offset 0 (LinearCe.cpp says why)
  if (need[0]) r[0] = reshape(slice(packed, 0, ws, ws + x.numel()), x.shape());
  if (need[1]) r[1] = reshape(slice(packed, 0, 0, ws), w.shape());
  return r;
}

Grads conv2dGrad(const std::vector<Tensor> &in, const Attrs &a, const Tensor &g,
                 const std::vector<bool> &need) {
  const Tensor &x = in[0], &w = in[1];
  Grads r(in.size());
  if (need[0]) r[0] = conv2d_backward_input(g, w, x.shape(), a.stride, a.padding);
  if (need[1]) r[1] = conv2d_backward_weight(g, x, w.shape(), a.stride, a.padding);
  if (in.size() > 2 && need[2]) r[2] = sum(g, {0, 2, 3});
  return r;
}

Tensor sliceGrad(const Tensor &x, const Attrs &a, const Tensor &g) {
  std::vector<Tensor> parts;
  const size_t d = static_cast<size_t>(a.dim);
  const int64_t n = x.shape()[d];
  auto zeros = [&](int64_t len) {
    Shape s = g.shape();
    s[d] = len;
    return Tensor::zeros(s, g.dtype(), g.device());
  };
  if (a.start > 0) parts.push_back(zeros(a.start));
  parts.push_back(g);
  if (a.end < n) parts.push_back(zeros(n - a.end));
  return parts.size() == 1 ? g : cat(parts, a.dim);
}

Grads catGrad(const std::vector<Tensor> &in, const Attrs &a, const Tensor &g,
              const std::vector<bool> &need) {
  Grads r(in.size());
  int64_t off = 0;
  for (size_t i = 0; i < in.size(); ++i) {
    const int64_t len = in[i].shape()[static_cast<size_t>(a.dim)];
    if (need[i]) r[i] = slice(g, a.dim, off, off + len);
    off += len;
  }
  return r;
}

// A collective of `g` with `a` (a copy of the forward node's attrs: the same world size) as an
// op: recorded in a trace, run through rcjit::dist on eager tensors.
Tensor collectiveOf(OpKind op, const Tensor &g, Attrs a) { return detail::applyOp(op, {g}, a); }

// The gradients of the collectives, with the job's objective the sum of every rank's loss:
// each rank's input gradient sums what every rank's output gradient says about it.
Tensor collectiveGrad(OpKind op, const Attrs &a, const Tensor &x, const Tensor &y,
                      const Tensor &g) {
  switch (op) {
  case OpKind::all_reduce: {
    if (a.reduce != 2) return collectiveOf(OpKind::all_reduce, g, a); // sum -> sum, mean -> mean
    // max: the summed gradient, split evenly among the ranks (and elements) holding the max
    Attrs sumAttrs = a;
    sumAttrs.reduce = 0;
    Tensor mask = eq(x, y).to(g.dtype());
    Tensor count = collectiveOf(OpKind::all_reduce, mask, sumAttrs);
    return collectiveOf(OpKind::all_reduce, g, sumAttrs) * mask / maximum(count, 1.0);
  }
  case OpKind::all_gather: // every rank's gradient of this rank's block, summed
    return collectiveOf(OpKind::reduce_scatter, g, a);
  case OpKind::reduce_scatter: // each rank's slice's gradient, gathered in rank order
    return collectiveOf(OpKind::all_gather, g, a);
  case OpKind::broadcast: {
    // the root gets the sum of every rank's gradient, the others zero: a reduce_scatter of
    // [world, ...g] holding g at the root's index and zeros elsewhere gives rank r
    // onehot[r] * sum(g), with no rank number in the graph (one graph serves every rank)
    const int64_t w = a.world;
    Shape lead(static_cast<size_t>(g.dim()) + 1, 1);
    lead[0] = w;
    Tensor onehot = eq(Tensor::arange(w, DType::i64, g.device()), static_cast<double>(a.root))
                        .to(g.dtype())
                        .reshape(Dims(lead.begin(), lead.end()));
    Tensor stacked = onehot * unsqueeze(g, 0);
    Attrs rs = a;
    rs.dim = 0;
    return reshape(collectiveOf(OpKind::reduce_scatter, stacked, rs),
                   Dims(x.shape().begin(), x.shape().end()));
  }
    RCJIT_OP_CASES(Source, Unary, Binary, Compare, Where, Reduce, Normalize, Matmul, Nn, View, Copy)
    break;
  }
  throw Error("internal: collectiveGrad of " + std::string(opName(op)));
}

// The rule table: a switch without default, so an op added to Ops.def without a rule (or
// "no gradient") fails to compile (-Wswitch -Werror).
Grads rawRule(OpKind op, const Attrs &a, const std::vector<Tensor> &in, const Tensor &y,
              const Tensor &g, const std::vector<bool> &need) {
  switch (op) {
  case OpKind::input:
  case OpKind::full:
  case OpKind::arange:
  case OpKind::eq:
  case OpKind::ne:
  case OpKind::lt:
  case OpKind::le:
  case OpKind::gt:
  case OpKind::ge:
  case OpKind::argmax:
  case OpKind::check_target:
    return Grads(in.size());
    RCJIT_OP_CASES(Unary) // each op's rule in unaryGrad
    return {unaryGrad(op, in[0], y, g)};
  case OpKind::add:
  case OpKind::sub:
  case OpKind::mul:
  case OpKind::div:
  case OpKind::pow:
  case OpKind::maximum:
  case OpKind::minimum:
    return binaryGrad(op, in[0], in[1], y, g, need);
  case OpKind::where: // no gradient to the condition
    return {Tensor(), need[1] ? where(in[0], g, 0.0) : Tensor(),
            need[2] ? where(in[0], 0.0, g) : Tensor()};
  case OpKind::sum:
    return {unreduce(g, in[0].shape(), a.dims, a.keepdim)};
  case OpKind::mean:
    return {unreduce(g, in[0].shape(), a.dims, a.keepdim) / reducedCount(in[0].shape(), a.dims)};
  case OpKind::amax: { // split evenly among the maximal elements (PyTorch)
    const Tensor &x = in[0];
    Tensor yk = a.keepdim ? y : unreduce(y, x.shape(), a.dims, false);
    Tensor mask = eq(x, yk).to(g.dtype());
    Tensor count = sum(mask, a.dims, true);
    return {unreduce(g, x.shape(), a.dims, a.keepdim) * mask / count};
  }
  case OpKind::softmax:
    return {y * (g - sum(g * y, {a.dim}, true))};
  case OpKind::log_softmax:
    return {g - exp(y) * sum(g, {a.dim}, true)};
  case OpKind::matmul:
    return matmulGrad(in[0], in[1], g, need);
  case OpKind::linear:
    return linearGrad(in, g, need);
  case OpKind::conv2d:
    return conv2dGrad(in, a, g, need);
  case OpKind::conv2d_backward_input: // linear in (grad, w): the conv and its weight gradient
    return {need[0] ? conv2d(g, in[1], Tensor(), a.stride, a.padding) : Tensor(),
            need[1] ? conv2d_backward_weight(in[0], g, in[1].shape(), a.stride, a.padding)
                    : Tensor()};
  case OpKind::conv2d_backward_weight: // linear in (grad, x)
    return {need[0] ? conv2d(in[1], g, Tensor(), a.stride, a.padding) : Tensor(),
            need[1] ? conv2d_backward_input(in[0], g, in[1].shape(), a.stride, a.padding)
                    : Tensor()};
  case OpKind::layer_norm:
    return layerNormGrad(in, a, g, need);
  case OpKind::rms_norm:
    return rmsNormGrad(in, a, g, need);
  case OpKind::embedding: // a scatter-add of g's rows into the weight's rows
    return {embedding_backward(g, in[1], in[0].size(0)), Tensor()};
  case OpKind::embedding_backward: // linear in grad (gather the rows back) and in base
    return {need[0] ? embedding(g, in[1]) : Tensor(), Tensor(),
            in.size() > 2 && need[2] ? g : Tensor()};
  case OpKind::sdpa:
    return sdpaGrad(in, a, g, need);
  case OpKind::linear_ce_pick: // dw and dx in one packed tensor, sliced apart (views)
    return linearCePickGrad(in, g, need);
  case OpKind::linear_ce_pick_backward:
    throw Error("linear_ce_pick_backward: higher-order gradients are not implemented");
  case OpKind::reshape:
    return {reshape(g, in[0].shape())};
  case OpKind::permute: {
    Dims inverse(a.dims.size());
    for (size_t i = 0; i < a.dims.size(); ++i) inverse[static_cast<size_t>(a.dims[i])] = i;
    return {permute(g, inverse)};
  }
  case OpKind::expand: // summed back by the caller
    return {g};
  case OpKind::slice:
    return {sliceGrad(in[0], a, g)};
  case OpKind::cat:
    return catGrad(in, a, g, need);
  case OpKind::contiguous:
    return {g};
  case OpKind::all_reduce:
  case OpKind::all_gather:
  case OpKind::reduce_scatter:
  case OpKind::broadcast:
    return {collectiveGrad(op, a, in[0], y, g)};
  }
  throw Error("internal: unknown op in the gradient rules");
}

} // namespace

Tensor sumToShape(const Tensor &grad, const Shape &shape) {
  if (grad.shape() == shape) return grad;
  const int64_t lead = grad.dim() - static_cast<int64_t>(shape.size());
  if (lead < 0) return reshape(grad, Dims(shape.begin(), shape.end()));
  Dims dims;
  for (int64_t i = 0; i < lead; ++i) dims.push_back(i);
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == 1 && grad.shape()[static_cast<size_t>(lead) + i] != 1)
      dims.push_back(lead + static_cast<int64_t>(i));
  }
  Tensor r = dims.empty() ? grad : sum(grad, dims, true);
  return reshape(r, Dims(shape.begin(), shape.end()));
}

std::vector<Tensor> applyGradRule(OpKind op, const Attrs &attrs, const std::vector<Tensor> &inputs,
                                  const Tensor &output, const Tensor &gradOutput,
                                  const std::vector<bool> &needsGrad) {
  detail::NoAutocast noAutocast; // the backward computes in the dtypes the forward chose
  std::vector<Tensor> r = rawRule(op, attrs, inputs, output, gradOutput, needsGrad);
  r.resize(inputs.size());
  for (size_t i = 0; i < r.size(); ++i) {
    if (!needsGrad[i] || !r[i].defined()) {
      r[i] = Tensor();
      continue;
    }
    if (r[i].shape() != inputs[i].shape()) r[i] = sumToShape(r[i], inputs[i].shape());
    if (r[i].dtype() != inputs[i].dtype()) r[i] = r[i].to(inputs[i].dtype());
  }
  return r;
}

} // namespace rcjit::autograd
