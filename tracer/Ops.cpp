// The public ops: argument checks, dims normalization, type promotion, then applyOp (which
// records an autograd node when grad mode is on and an input requires grad).
#include <algorithm>
#include <string>

#include <rcjit/Ops.h>

#include "support/Profiler.h"
#include "tracer/Autocast.h"
#include "tracer/AutogradHook.h"
#include "tracer/CheckedSize.h"
#include "tracer/DeviceBackend.h"
#include "tracer/EagerHook.h"
#include "tracer/OpsInternal.h"
#include "tracer/ShapeInference.h"
#include "tracer/TensorImpl.h"
#include "tracer/Tracer.h"

namespace rcjit {

namespace detail {

namespace {
void checkDefined(OpKind op, const std::vector<Tensor> &in) {
  for (size_t i = 0; i < in.size(); ++i) {
    if (!in[i].defined()) {
      throw Error(std::string(opName(op)) + ": input " + std::to_string(i) +
                  " is an undefined Tensor");
    }
    if (in[i].device() != in[0].device()) {
      throw Error(std::string(opName(op)) + ": inputs are on different devices (" +
                  in[0].device().str() + " and " + in[i].device().str() + ")");
    }
  }
}

// The result of `op` in a meta trace: views as the eager target makes them (they touch no
// data), everything else fresh: a meta tensor (no memory) unless a segmented run will write
// values into it.
Tensor metaResult(const Tracer &tr, OpKind op, const std::vector<Tensor> &in, const Attrs &a,
                  const TensorMeta &meta) {
  auto fresh = [&](Device d) { // a segmented run fills it: memory; else shape and dtype only
    return tr.metaStorage() ? makeTensor(meta.shape, meta.dtype, d)
                            : makeMetaTensor(meta.shape, meta.dtype, d);
  };
  if (opInfo(op).category != OpCategory::View) {
    return fresh(in.empty() ? Device::cpu() : in[0].device());
  }
  if (op == OpKind::reshape) { // a view where the strides allow one, else a copy
    Shape strides;
    if (computeViewStrides(in[0].shape(), in[0].strides(), meta.shape, strides)) {
      return makeView(in[0], meta.shape, strides, in[0].offset());
    }
    return fresh(in[0].device());
  }
  return detail::runEager(op, in, a, meta);
}

Tensor applyWithMeta(OpKind op, const std::vector<Tensor> &in, const Attrs &a,
                     const TensorMeta &meta) {
  Tracer *tr = Tracer::current();
  Tensor r;
  try {
    if (tr && tr->meta()) {
      r = metaResult(*tr, op, in, a, meta);
    } else {
      profiler::Scope scope("eager op", [op] { return std::string(opName(op)); });
      r = detail::runEager(op, in, a, meta);
    }
  } catch (const AllocationError &e) {
    throw AllocationError(std::string(opName(op)) + ": " + e.what());
  }
  if (tr) {
    tr->record(op, in, a, r);
    // an autograd trace (a compiled function) also keeps a tape, for backward() inside it
    if (tr->recordsAutograd() && autograd::gradEnabled() && autograd::anyRequiresGrad(in))
      autograd::recordOnTape(op, in, a, r);
  } else if (autograd::gradEnabled() && autograd::anyRequiresGrad(in)) {
    autograd::recordOnTape(op, in, a, r);
  }
  return r;
}
} // namespace

Tensor applyOp(OpKind op, const std::vector<Tensor> &in, const Attrs &a) {
  checkDefined(op, in);
  if (autocastCode() >= 0) { // an Autocast scope: the op may run on cast inputs
    std::vector<Tensor> cast = in;
    if (autocastInputs(op, cast)) return applyOp(op, cast, a); // now nothing to cast
  }
  std::vector<TensorMeta> metas;
  metas.reserve(in.size());
  for (const Tensor &t : in) metas.push_back({t.dtype(), t.shape()});
  return applyWithMeta(op, in, a, inferMeta(op, metas, a));
}

Tensor applySource(OpKind op, const Shape &shape, DType dtype, const Attrs &a, Device device,
                   const char *name) {
  const std::string what = name ? name : std::string(opName(op));
  checkedBytes(shape, dtype, what);
  Tensor r;
  try {
    r = device.is_cpu() ? detail::runEager(op, {}, a, TensorMeta{dtype, shape})
                        : deviceBackend(device).runSource(op, shape, dtype, a, device);
  } catch (const AllocationError &e) {
    throw AllocationError(what + ": " + e.what());
  }
  if (Tracer *tr = Tracer::current()) tr->recordSource(op, a, r);
  return r;
}

Tensor castTo(const Tensor &x, DType dtype) {
  checkDefined(OpKind::cast, {x});
  if (x.dtype() == dtype) return x;
  return applyWithMeta(OpKind::cast, {x}, Attrs{}, TensorMeta{dtype, x.shape()});
}

Tensor linearCePick(const Tensor &x, const Tensor &w, const Tensor &target) {
  return applyOp(OpKind::linear_ce_pick, {x, w, target}, Attrs{});
}

Tensor linearCePickBackward(const Tensor &x, const Tensor &w, const Tensor &target,
                            const Tensor &g) {
  return applyOp(OpKind::linear_ce_pick_backward, {x, w, target, g}, Attrs{});
}

} // namespace detail

using detail::applyOp;
using detail::castTo;

namespace {

// A Scalar operand as a 0-dim tensor on the device of the tensor it meets.
Tensor scalarTensor(Scalar s, DType dtype, Device device) {
  Attrs a;
  a.value = s.toDouble();
  return detail::applySource(OpKind::full, {}, dtype, a, device);
}

DType scalarDtype(Scalar s) { return s.isFloating() ? DType::f64 : DType::i64; }

bool needsFloat(OpKind op) { return op == OpKind::div || op == OpKind::pow; }

Tensor binary(OpKind op, const Tensor &a, const Tensor &b) {
  if (!a.defined() || !b.defined()) return applyOp(op, {a, b}, {}); // reports the undefined one
  DType t = promoteTypes(a.dtype(), a.dim() == 0, false, b.dtype(), b.dim() == 0, false);
  if (needsFloat(op) && !isFloating(t)) t = DType::f32;
  return applyOp(op, {castTo(a, t), castTo(b, t)}, {});
}

Tensor binary(OpKind op, const Tensor &a, Scalar s) {
  if (!a.defined()) return applyOp(op, {a}, {});
  DType t = promoteTypes(a.dtype(), a.dim() == 0, false, scalarDtype(s), true, true);
  if (needsFloat(op) && !isFloating(t)) t = DType::f32;
  return applyOp(op, {castTo(a, t), scalarTensor(s, t, a.device())}, {});
}

Tensor binary(OpKind op, Scalar s, const Tensor &b) {
  if (!b.defined()) return applyOp(op, {b}, {});
  DType t = promoteTypes(scalarDtype(s), true, true, b.dtype(), b.dim() == 0, false);
  if (needsFloat(op) && !isFloating(t)) t = DType::f32;
  return applyOp(op, {scalarTensor(s, t, b.device()), castTo(b, t)}, {});
}

Tensor unaryFloat(OpKind op, const Tensor &x) {
  if (x.defined() && !isFloating(x.dtype())) return applyOp(op, {castTo(x, DType::f32)}, {});
  return applyOp(op, {x}, {});
}

// Explicit, sorted, unique, non-negative dims; empty means all dims.
Dims reductionDims(const char *op, const Tensor &x, const Dims &dims) {
  int64_t rank = x.dim();
  Dims out;
  if (dims.empty()) {
    for (int64_t d = 0; d < rank; ++d) out.push_back(d);
    return out;
  }
  for (int64_t d : dims) out.push_back(detail::normalizeDim(d, rank, op));
  std::sort(out.begin(), out.end());
  if (std::adjacent_find(out.begin(), out.end()) != out.end()) {
    throw Error(std::string(op) + ": dim list " + shapeStr(dims) + " repeats a dim");
  }
  if (rank == 0) out.clear();
  return out;
}

Tensor reduce(OpKind op, const Tensor &x, const Dims &dims, bool keepdim) {
  if (!x.defined()) return applyOp(op, {x}, {});
  Attrs a;
  a.dims = reductionDims(std::string(opName(op)).c_str(), x, dims);
  a.keepdim = keepdim;
  return applyOp(op, {x}, a);
}

std::vector<Tensor> withOptional(std::vector<Tensor> in, const Tensor &opt) {
  if (opt.defined()) in.push_back(opt);
  return in;
}

Dims inferReshape(const char *op, const Tensor &x, Dims dims) {
  int64_t known = 1, infer = -1;
  for (size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] == -1 && infer < 0) {
      infer = static_cast<int64_t>(i);
    } else if (dims[i] < 0) {
      throw Error(std::string(op) + ": bad target shape " + shapeStr(dims) + " for " +
                  shapeStr(x.shape()) + " (one -1 at most, other sizes >= 0)");
    } else {
      known = detail::checkedMul(known, dims[i], op, "target shape " + shapeStr(dims) + ":");
    }
  }
  if (infer >= 0) {
    if (known == 0 || x.numel() % known != 0) {
      throw Error(std::string(op) + ": cannot reshape " + shapeStr(x.shape()) + " (" +
                  std::to_string(x.numel()) + " elements) to " + shapeStr(dims));
    }
    dims[infer] = x.numel() / known;
  }
  return dims;
}

} // namespace

#define RCJIT_UNARY_FLOAT(name)                                                                    \
  Tensor name(const Tensor &x) { return unaryFloat(OpKind::name, x); }
RCJIT_UNARY_FLOAT(exp)
RCJIT_UNARY_FLOAT(log)
RCJIT_UNARY_FLOAT(sqrt)
RCJIT_UNARY_FLOAT(rsqrt)
RCJIT_UNARY_FLOAT(reciprocal)
RCJIT_UNARY_FLOAT(tanh)
RCJIT_UNARY_FLOAT(sigmoid)
RCJIT_UNARY_FLOAT(gelu)
RCJIT_UNARY_FLOAT(silu)
RCJIT_UNARY_FLOAT(erf)
RCJIT_UNARY_FLOAT(sin)
RCJIT_UNARY_FLOAT(cos)
#undef RCJIT_UNARY_FLOAT
Tensor neg(const Tensor &x) { return applyOp(OpKind::neg, {x}, {}); }
Tensor abs(const Tensor &x) { return applyOp(OpKind::abs, {x}, {}); }
Tensor relu(const Tensor &x) { return applyOp(OpKind::relu, {x}, {}); }

#define RCJIT_BINARY(name)                                                                         \
  Tensor name(const Tensor &a, const Tensor &b) { return binary(OpKind::name, a, b); }             \
  Tensor name(const Tensor &a, Scalar b) { return binary(OpKind::name, a, b); }                    \
  Tensor name(Scalar a, const Tensor &b) { return binary(OpKind::name, a, b); }
RCJIT_BINARY(add)
RCJIT_BINARY(sub)
RCJIT_BINARY(mul)
RCJIT_BINARY(div)
RCJIT_BINARY(pow)
RCJIT_BINARY(maximum)
RCJIT_BINARY(minimum)
RCJIT_BINARY(eq)
RCJIT_BINARY(ne)
RCJIT_BINARY(lt)
RCJIT_BINARY(le)
RCJIT_BINARY(gt)
RCJIT_BINARY(ge)
#undef RCJIT_BINARY

Tensor where(const Tensor &cond, const Tensor &a, const Tensor &b) {
  if (!cond.defined() || !a.defined() || !b.defined())
    return applyOp(OpKind::where, {cond, a, b}, {});
  DType t = promoteTypes(a.dtype(), a.dim() == 0, false, b.dtype(), b.dim() == 0, false);
  return applyOp(OpKind::where, {cond, castTo(a, t), castTo(b, t)}, {});
}
Tensor where(const Tensor &cond, const Tensor &a, Scalar b) {
  if (!a.defined()) return applyOp(OpKind::where, {cond, a}, {});
  DType t = promoteTypes(a.dtype(), a.dim() == 0, false, scalarDtype(b), true, true);
  return applyOp(OpKind::where, {cond, castTo(a, t), scalarTensor(b, t, a.device())}, {});
}
Tensor where(const Tensor &cond, Scalar a, const Tensor &b) {
  if (!b.defined()) return applyOp(OpKind::where, {cond, b}, {});
  DType t = promoteTypes(scalarDtype(a), true, true, b.dtype(), b.dim() == 0, false);
  return applyOp(OpKind::where, {cond, scalarTensor(a, t, b.device()), castTo(b, t)}, {});
}

Tensor operator+(const Tensor &a, const Tensor &b) { return add(a, b); }
Tensor operator+(const Tensor &a, Scalar b) { return add(a, b); }
Tensor operator+(Scalar a, const Tensor &b) { return add(a, b); }
Tensor operator-(const Tensor &a, const Tensor &b) { return sub(a, b); }
Tensor operator-(const Tensor &a, Scalar b) { return sub(a, b); }
Tensor operator-(Scalar a, const Tensor &b) { return sub(a, b); }
Tensor operator*(const Tensor &a, const Tensor &b) { return mul(a, b); }
Tensor operator*(const Tensor &a, Scalar b) { return mul(a, b); }
Tensor operator*(Scalar a, const Tensor &b) { return mul(a, b); }
Tensor operator/(const Tensor &a, const Tensor &b) { return div(a, b); }
Tensor operator/(const Tensor &a, Scalar b) { return div(a, b); }
Tensor operator/(Scalar a, const Tensor &b) { return div(a, b); }
Tensor operator-(const Tensor &x) { return neg(x); }

Tensor sum(const Tensor &x, Dims dims, bool keepdim) {
  return reduce(OpKind::sum, x, dims, keepdim);
}
Tensor mean(const Tensor &x, Dims dims, bool keepdim) {
  return reduce(OpKind::mean, x, dims, keepdim);
}
Tensor amax(const Tensor &x, Dims dims, bool keepdim) {
  return reduce(OpKind::amax, x, dims, keepdim);
}
Tensor argmax(const Tensor &x, int64_t dim, bool keepdim) {
  if (!x.defined()) return applyOp(OpKind::argmax, {x}, {});
  Attrs a;
  a.dim = detail::normalizeDim(dim, x.dim(), "argmax");
  a.keepdim = keepdim;
  return applyOp(OpKind::argmax, {x}, a);
}
Tensor softmax(const Tensor &x, int64_t dim) {
  if (!x.defined()) return applyOp(OpKind::softmax, {x}, {});
  Attrs a;
  a.dim = detail::normalizeDim(dim, x.dim(), "softmax");
  return applyOp(OpKind::softmax, {x}, a);
}
Tensor log_softmax(const Tensor &x, int64_t dim) {
  if (!x.defined()) return applyOp(OpKind::log_softmax, {x}, {});
  Attrs a;
  a.dim = detail::normalizeDim(dim, x.dim(), "log_softmax");
  return applyOp(OpKind::log_softmax, {x}, a);
}

Tensor matmul(const Tensor &a, const Tensor &b) { return applyOp(OpKind::matmul, {a, b}, {}); }
Tensor linear(const Tensor &x, const Tensor &w, const Tensor &b) {
  return applyOp(OpKind::linear, withOptional({x, w}, b), {});
}
Tensor layer_norm(const Tensor &x, const Tensor &w, const Tensor &b, double eps) {
  Attrs a;
  a.eps = eps;
  return applyOp(OpKind::layer_norm, withOptional({x, w}, b), a);
}
Tensor rms_norm(const Tensor &x, const Tensor &w, double eps) {
  Attrs a;
  a.eps = eps;
  return applyOp(OpKind::rms_norm, {x, w}, a);
}
Tensor embedding(const Tensor &weight, const Tensor &ids) {
  return applyOp(OpKind::embedding, {weight, ids}, {});
}
Tensor embedding_backward(const Tensor &grad, const Tensor &ids, int64_t num, const Tensor &base) {
  if (!grad.defined()) return applyOp(OpKind::embedding_backward, {grad, ids}, {});
  if (num < 0) throw Error("embedding_backward: num must be >= 0, got " + std::to_string(num));
  Attrs a;
  a.dims = {num, grad.dim() > 0 ? grad.size(-1) : 0};
  if (base.defined()) return applyOp(OpKind::embedding_backward, {grad, ids, base}, a);
  return applyOp(OpKind::embedding_backward, {grad, ids}, a);
}
Tensor scaled_dot_product_attention(const Tensor &q, const Tensor &k, const Tensor &v,
                                    bool causal) {
  Attrs a;
  a.causal = causal;
  return applyOp(OpKind::sdpa, {q, k, v}, a);
}
Tensor conv2d(const Tensor &x, const Tensor &w, const Tensor &b, int64_t stride, int64_t padding) {
  Attrs a;
  a.stride = stride;
  a.padding = padding;
  return applyOp(OpKind::conv2d, withOptional({x, w}, b), a);
}

Tensor conv2d_backward_input(const Tensor &grad, const Tensor &w, const Shape &x_shape,
                             int64_t stride, int64_t padding) {
  Attrs a;
  a.stride = stride;
  a.padding = padding;
  a.dims = x_shape;
  return applyOp(OpKind::conv2d_backward_input, {grad, w}, a);
}
Tensor conv2d_backward_weight(const Tensor &grad, const Tensor &x, const Shape &w_shape,
                              int64_t stride, int64_t padding) {
  Attrs a;
  a.stride = stride;
  a.padding = padding;
  a.dims = w_shape;
  return applyOp(OpKind::conv2d_backward_weight, {grad, x}, a);
}

Tensor reshape(const Tensor &x, Dims shape) {
  if (!x.defined()) return applyOp(OpKind::reshape, {x}, {});
  Attrs a;
  a.dims = inferReshape("reshape", x, std::move(shape));
  if (a.dims == x.shape()) return x;
  return applyOp(OpKind::reshape, {x}, a);
}
Tensor view(const Tensor &x, Dims shape) {
  if (!x.defined()) return applyOp(OpKind::reshape, {x}, {});
  Dims dims = inferReshape("view", x, std::move(shape));
  Shape strides;
  if (x.numel() == detail::checkedNumel(dims, "view") &&
      !detail::computeViewStrides(x.shape(), x.strides(), dims, strides)) {
    throw Error("view: cannot view " + shapeStr(x.shape()) + " with strides " +
                shapeStr(x.strides()) + " as " + shapeStr(dims) +
                " without copying; use reshape (or contiguous() first)");
  }
  return reshape(x, dims);
}
Tensor permute(const Tensor &x, Dims order) {
  if (!x.defined()) return applyOp(OpKind::permute, {x}, {});
  if (static_cast<int64_t>(order.size()) != x.dim()) {
    throw Error("permute: order " + shapeStr(order) + " does not name every dim of " +
                shapeStr(x.shape()));
  }
  Attrs a;
  for (int64_t d : order) a.dims.push_back(detail::normalizeDim(d, x.dim(), "permute"));
  return applyOp(OpKind::permute, {x}, a);
}
Tensor transpose(const Tensor &x, int64_t d0, int64_t d1) {
  if (!x.defined()) return applyOp(OpKind::permute, {x}, {});
  int64_t a = detail::normalizeDim(d0, x.dim(), "transpose");
  int64_t b = detail::normalizeDim(d1, x.dim(), "transpose");
  if (x.dim() < 2 || a == b) return x;
  Dims order;
  for (int64_t d = 0; d < x.dim(); ++d) order.push_back(d);
  std::swap(order[a], order[b]);
  return permute(x, order);
}
Tensor unsqueeze(const Tensor &x, int64_t dim) {
  if (!x.defined()) return applyOp(OpKind::reshape, {x}, {});
  int64_t d = detail::normalizeDim(dim, x.dim() + 1, "unsqueeze");
  Dims s = x.shape();
  s.insert(s.begin() + d, 1);
  return reshape(x, s);
}
Tensor squeeze(const Tensor &x, int64_t dim) {
  if (!x.defined()) return applyOp(OpKind::reshape, {x}, {});
  if (x.dim() == 0) return x;
  int64_t d = detail::normalizeDim(dim, x.dim(), "squeeze");
  if (x.shape()[d] != 1) return x;
  Dims s = x.shape();
  s.erase(s.begin() + d);
  return reshape(x, s);
}
Tensor expand(const Tensor &x, Dims shape) {
  if (!x.defined()) return applyOp(OpKind::expand, {x}, {});
  int64_t lead = static_cast<int64_t>(shape.size()) - x.dim();
  if (lead < 0) {
    throw Error("expand: target " + shapeStr(shape) + " has fewer dims than " +
                shapeStr(x.shape()));
  }
  for (int64_t i = 0; i < static_cast<int64_t>(shape.size()); ++i) {
    if (shape[i] == -1) {
      if (i < lead)
        throw Error("expand: -1 is not allowed in a new leading dim " + shapeStr(shape));
      shape[i] = x.shape()[i - lead];
    }
  }
  if (shape == x.shape()) return x;
  Attrs a;
  a.dims = std::move(shape);
  return applyOp(OpKind::expand, {x}, a);
}
Tensor slice(const Tensor &x, int64_t dim, int64_t start, int64_t end) {
  if (!x.defined()) return applyOp(OpKind::slice, {x}, {});
  Attrs a;
  a.dim = detail::normalizeDim(dim, x.dim(), "slice");
  if (x.dim() == 0) throw Error("slice: cannot slice a 0-dim tensor");
  int64_t n = x.shape()[a.dim];
  auto clampIndex = [n](int64_t i) { return std::clamp(i < 0 ? i + n : i, int64_t{0}, n); };
  a.start = clampIndex(start);
  a.end = std::max(a.start, clampIndex(end));
  if (a.start == 0 && a.end == n) return x;
  return applyOp(OpKind::slice, {x}, a);
}
Tensor cat(const std::vector<Tensor> &xs, int64_t dim) {
  if (xs.empty()) throw Error("cat: needs at least one tensor");
  for (const Tensor &t : xs) {
    if (!t.defined()) return applyOp(OpKind::cat, xs, {});
  }
  DType t = xs[0].dtype();
  for (const Tensor &x : xs) t = promoteTypes(t, false, false, x.dtype(), false, false);
  std::vector<Tensor> in;
  for (const Tensor &x : xs) in.push_back(castTo(x, t));
  Attrs a;
  a.dim = detail::normalizeDim(dim, xs[0].dim(), "cat");
  return applyOp(OpKind::cat, in, a);
}
Tensor contiguous(const Tensor &x) {
  if (x.defined() && x.is_contiguous()) return x;
  return applyOp(OpKind::contiguous, {x}, {});
}

} // namespace rcjit
