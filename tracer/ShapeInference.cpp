// Shape and dtype rules of every op, with the error messages users see for bad input.
#include "tracer/ShapeInference.h"

#include <algorithm>
#include <cassert>
#include <string>

#include <rcjit/Error.h>

#include "tracer/CheckedSize.h"
#include "tracer/OpCases.h"

namespace rcjit {

namespace {

[[noreturn]] void fail(OpKind op, const std::string &what) {
  throw Error(std::string(opName(op)) + ": " + what);
}

// The caller dispatched `op` to the rule of another category: a broken invariant.
[[noreturn]] void notHandledBy(OpKind op, const char *rule) {
  assert(false && "shape inference: op dispatched to the wrong rule");
  fail(op, std::string("has no case in ") + rule + " (internal error)");
}

std::string metaStr(const TensorMeta &m) {
  return std::string(dtypeName(m.dtype)) + shapeStr(m.shape);
}

std::string metasStr(const std::vector<TensorMeta> &in) {
  std::string s;
  for (size_t i = 0; i < in.size(); ++i) s += (i ? ", " : "") + metaStr(in[i]);
  return s;
}

void expectArity(OpKind op, const std::vector<TensorMeta> &in, size_t lo, size_t hi) {
  if (in.size() < lo || in.size() > hi) {
    fail(op,
         "expected " +
             (lo == hi ? std::to_string(lo) : std::to_string(lo) + " to " + std::to_string(hi)) +
             " tensor inputs, got " + std::to_string(in.size()));
  }
}

void expectSameDtype(OpKind op, const std::vector<TensorMeta> &in, size_t first, size_t last) {
  for (size_t i = first + 1; i < last && i < in.size(); ++i) {
    if (in[i].dtype != in[first].dtype) {
      fail(op, "expected operands of one dtype, got " + metasStr(in));
    }
  }
}

void expectFloating(OpKind op, const TensorMeta &m) {
  if (!isFloating(m.dtype)) {
    fail(op, "expected a floating-point tensor, got " + metaStr(m));
  }
}

void expectRank(OpKind op, const TensorMeta &m, const char *what, size_t lo, size_t hi) {
  if (m.shape.size() < lo || m.shape.size() > hi) {
    fail(op, std::string(what) + " must have " +
                 (lo == hi ? std::to_string(lo) : std::to_string(lo) + " or more") + " dims, got " +
                 metaStr(m));
  }
}

TensorMeta inferUnary(OpKind op, const std::vector<TensorMeta> &in) {
  expectArity(op, in, 1, 1);
  const TensorMeta &x = in[0];
  switch (op) {
  case OpKind::cast:
    return x;
  case OpKind::neg:
  case OpKind::abs:
  case OpKind::relu:
    if (x.dtype == DType::boolean) fail(op, "not supported for bool tensors, got " + metaStr(x));
    return x;
    RCJIT_OP_CASES_WITH(kFloatOnly) // Ops.def's props
    expectFloating(op, x);
    return x;
    RCJIT_OP_CASES(Source, Binary, Compare, Where, Reduce, Normalize, Matmul, Nn, View, Copy,
                   Collective)
    break;
  }
  notHandledBy(op, "inferUnary");
}

TensorMeta inferBinary(OpKind op, const std::vector<TensorMeta> &in) {
  expectArity(op, in, 2, 2);
  expectSameDtype(op, in, 0, 2);
  Shape s = broadcastShapes(in[0].shape, in[1].shape, std::string(opName(op)).c_str());
  DType t = in[0].dtype;
  switch (op) {
    RCJIT_OP_CASES(Compare)
    return {DType::boolean, s};
  case OpKind::sub:
    if (t == DType::boolean) {
      fail(op, "subtracting bool tensors is not supported, got " + metasStr(in));
    }
    return {t, s};
  case OpKind::div:
  case OpKind::pow:
    if (!isFloating(t)) fail(op, "expected floating-point operands, got " + metasStr(in));
    return {t, s};
  case OpKind::add:
  case OpKind::mul:
  case OpKind::maximum:
  case OpKind::minimum:
    return {t, s};
    RCJIT_OP_CASES(Source, Unary, Where, Reduce, Normalize, Matmul, Nn, View, Copy, Collective)
    break;
  }
  notHandledBy(op, "inferBinary");
}

TensorMeta inferWhere(OpKind op, const std::vector<TensorMeta> &in) {
  expectArity(op, in, 3, 3);
  if (in[0].dtype != DType::boolean) {
    fail(op, "condition must be a bool tensor, got " + metaStr(in[0]));
  }
  expectSameDtype(op, in, 1, 3);
  Shape s = broadcastShapes(in[0].shape, in[1].shape, "where");
  s = broadcastShapes(s, in[2].shape, "where");
  return {in[1].dtype, s};
}

TensorMeta inferArgmax(OpKind op, const TensorMeta &x, const Attrs &a) {
  int64_t rank = static_cast<int64_t>(x.shape.size());
  if (a.dim < 0 || a.dim >= std::max<int64_t>(rank, 1)) {
    fail(op, "dim " + std::to_string(a.dim) + " is out of range for " + metaStr(x));
  }
  if (rank > 0 && x.shape[a.dim] == 0) fail(op, "cannot reduce an empty dim of " + metaStr(x));
  if (x.dtype == DType::boolean) fail(op, "not supported for bool tensors, got " + metaStr(x));
  Shape s;
  for (int64_t d = 0; d < rank; ++d) {
    if (d != a.dim)
      s.push_back(x.shape[d]);
    else if (a.keepdim)
      s.push_back(1);
  }
  return {DType::i64, s};
}

// sum, mean, amax over the sorted dims `a.dims`.
TensorMeta inferReduceDims(OpKind op, const TensorMeta &x, const Attrs &a) {
  int64_t rank = static_cast<int64_t>(x.shape.size());
  for (size_t i = 0; i < a.dims.size(); ++i) {
    int64_t d = a.dims[i];
    if (d < 0 || d >= std::max<int64_t>(rank, 1) || (i && a.dims[i - 1] >= d)) {
      fail(op, "bad reduction dims " + shapeStr(a.dims) + " for " + metaStr(x));
    }
  }
  DType t = x.dtype;
  if (op == OpKind::sum && !isFloating(t)) t = DType::i64;
  if (op == OpKind::mean && !isFloating(t)) {
    fail(op, "needs a floating-point input (mean of integers is not defined), got " + metaStr(x) +
                 "; convert with .to(DType::f32) first");
  }
  if (op == OpKind::amax && t == DType::boolean) {
    fail(op, "not supported for bool tensors, got " + metaStr(x));
  }
  Shape s;
  for (int64_t d = 0; d < rank; ++d) {
    bool reduced = std::find(a.dims.begin(), a.dims.end(), d) != a.dims.end();
    if (reduced && op == OpKind::amax && x.shape[d] == 0) {
      fail(op, "cannot reduce an empty dim of " + metaStr(x));
    }
    if (!reduced)
      s.push_back(x.shape[d]);
    else if (a.keepdim)
      s.push_back(1);
  }
  return {t, s};
}

TensorMeta inferReduce(OpKind op, const std::vector<TensorMeta> &in, const Attrs &a) {
  expectArity(op, in, 1, 1);
  switch (op) {
  case OpKind::sum:
  case OpKind::mean:
  case OpKind::amax:
    return inferReduceDims(op, in[0], a);
  case OpKind::argmax:
    return inferArgmax(op, in[0], a);
    RCJIT_OP_CASES(Source, Unary, Binary, Compare, Where, Normalize, Matmul, Nn, View, Copy,
                   Collective)
    break;
  }
  notHandledBy(op, "inferReduce");
}

TensorMeta inferNormalize(OpKind op, const std::vector<TensorMeta> &in, const Attrs &a) {
  switch (op) {
  case OpKind::softmax:
  case OpKind::log_softmax:
    break;
    RCJIT_OP_CASES(Source, Unary, Binary, Compare, Where, Reduce, Matmul, Nn, View, Copy,
                   Collective)
    notHandledBy(op, "inferNormalize");
  }
  expectArity(op, in, 1, 1);
  expectFloating(op, in[0]);
  int64_t rank = static_cast<int64_t>(in[0].shape.size());
  if (a.dim < 0 || a.dim >= std::max<int64_t>(rank, 1)) {
    fail(op, "dim " + std::to_string(a.dim) + " is out of range for " + metaStr(in[0]));
  }
  return in[0];
}

TensorMeta inferMatmul(const std::vector<TensorMeta> &in) {
  const OpKind op = OpKind::matmul;
  expectArity(op, in, 2, 2);
  const TensorMeta &a = in[0], &b = in[1];
  if (a.shape.empty() || b.shape.empty()) {
    fail(op, "both operands need at least 1 dim, got " + metasStr(in));
  }
  expectSameDtype(op, in, 0, 2);
  if (a.dtype == DType::boolean) fail(op, "not supported for bool tensors, got " + metasStr(in));
  Shape as = a.shape, bs = b.shape;
  bool aVec = as.size() == 1, bVec = bs.size() == 1;
  if (aVec) as.insert(as.begin(), 1);
  if (bVec) bs.push_back(1);
  int64_t k1 = as.back(), k2 = bs[bs.size() - 2];
  if (k1 != k2) {
    fail(op, "inner dims do not match: " + metasStr(in) + " (" + std::to_string(k1) + " vs " +
                 std::to_string(k2) + ")");
  }
  Shape ab(as.begin(), as.end() - 2), bb(bs.begin(), bs.end() - 2);
  Shape s = broadcastShapes(ab, bb, "matmul (batch dims)");
  if (!aVec) s.push_back(as[as.size() - 2]);
  if (!bVec) s.push_back(bs.back());
  return {a.dtype, s};
}

TensorMeta inferLinear(const std::vector<TensorMeta> &in) {
  const OpKind op = OpKind::linear;
  expectArity(op, in, 2, 3);
  const TensorMeta &x = in[0], &w = in[1];
  expectSameDtype(op, in, 0, in.size());
  expectFloating(op, x);
  expectRank(op, x, "input", 1, 64);
  expectRank(op, w, "weight", 2, 2);
  if (x.shape.back() != w.shape[1]) {
    fail(op, "input " + metaStr(x) + " has " + std::to_string(x.shape.back()) +
                 " features but weight " + metaStr(w) + " expects " + std::to_string(w.shape[1]));
  }
  if (in.size() == 3 && in[2].shape != Shape{w.shape[0]}) {
    fail(op, "bias " + metaStr(in[2]) + " must have shape [" + std::to_string(w.shape[0]) + "]");
  }
  Shape s = x.shape;
  s.back() = w.shape[0];
  return {x.dtype, s};
}

TensorMeta inferConv2d(const std::vector<TensorMeta> &in, const Attrs &a) {
  const OpKind op = OpKind::conv2d;
  expectArity(op, in, 2, 3);
  const TensorMeta &x = in[0], &w = in[1];
  expectSameDtype(op, in, 0, in.size());
  expectFloating(op, x);
  expectRank(op, x, "input (NCHW)", 4, 4);
  expectRank(op, w, "weight [out, in, kh, kw]", 4, 4);
  if (x.shape[1] != w.shape[1]) {
    fail(op, "input " + metaStr(x) + " has " + std::to_string(x.shape[1]) +
                 " channels but weight " + metaStr(w) + " expects " + std::to_string(w.shape[1]));
  }
  if (in.size() == 3 && in[2].shape != Shape{w.shape[0]}) {
    fail(op, "bias " + metaStr(in[2]) + " must have shape [" + std::to_string(w.shape[0]) + "]");
  }
  if (a.stride < 1 || a.padding < 0) {
    fail(op, "stride must be >= 1 and padding >= 0, got stride " + std::to_string(a.stride) +
                 " padding " + std::to_string(a.padding));
  }
  if (a.padding > (int64_t{1} << 40))
    fail(op, "padding " + std::to_string(a.padding) + " is too large");
  int64_t h = (x.shape[2] + 2 * a.padding - w.shape[2]) / a.stride + 1;
  int64_t wd = (x.shape[3] + 2 * a.padding - w.shape[3]) / a.stride + 1;
  if (x.shape[2] + 2 * a.padding < w.shape[2] || x.shape[3] + 2 * a.padding < w.shape[3]) {
    fail(op, "kernel " + metaStr(w) + " is larger than the padded input " + metaStr(x));
  }
  return {x.dtype, {x.shape[0], w.shape[0], h, wd}};
}

// grad [N, O, OH, OW] with w [O, C, KH, KW] (backward_input; dims = x's shape) or with
// x [N, C, H, W] (backward_weight; dims = w's shape): the forward conv must give grad's shape.
TensorMeta inferConv2dBackward(OpKind op, const std::vector<TensorMeta> &in, const Attrs &a) {
  expectArity(op, in, 2, 2);
  expectSameDtype(op, in, 0, 2);
  expectFloating(op, in[0]);
  for (const TensorMeta &m : in) expectRank(op, m, "grad and operand", 4, 4);
  if (a.dims.size() != 4) fail(op, "dims must be a 4-D shape, got " + shapeStr(a.dims));
  const bool input = op == OpKind::conv2d_backward_input;
  TensorMeta x{in[0].dtype, input ? a.dims : in[1].shape};
  TensorMeta w{in[0].dtype, input ? in[1].shape : a.dims};
  const TensorMeta fwd = inferConv2d({x, w}, a);
  if (fwd.shape != in[0].shape) {
    fail(op, "grad " + metaStr(in[0]) + " is not the shape conv2d(" + metaStr(x) + ", " +
                 metaStr(w) + ") gives, " + shapeStr(fwd.shape));
  }
  return {in[0].dtype, a.dims};
}

TensorMeta inferNorm(OpKind op, const std::vector<TensorMeta> &in) {
  expectArity(op, in, 2, op == OpKind::layer_norm ? 3 : 2);
  const TensorMeta &x = in[0], &w = in[1];
  expectSameDtype(op, in, 0, in.size());
  expectFloating(op, x);
  size_t k = w.shape.size();
  if (k == 0 || k > x.shape.size() ||
      !std::equal(w.shape.begin(), w.shape.end(), x.shape.end() - static_cast<int64_t>(k))) {
    fail(op, "weight " + metaStr(w) + " must match the trailing dims of input " + metaStr(x));
  }
  if (in.size() == 3 && in[2].shape != w.shape) {
    fail(op, "bias " + metaStr(in[2]) + " must have the weight's shape " + shapeStr(w.shape));
  }
  return x;
}

TensorMeta inferMatmulCategory(OpKind op, const std::vector<TensorMeta> &in, const Attrs &a) {
  switch (op) {
  case OpKind::matmul:
    return inferMatmul(in);
  case OpKind::linear:
    return inferLinear(in);
  case OpKind::conv2d:
    return inferConv2d(in, a);
    RCJIT_OP_CASES(Source, Unary, Binary, Compare, Where, Reduce, Normalize, Nn, View, Copy,
                   Collective)
    break;
  }
  notHandledBy(op, "inferMatmulCategory");
}

// linear_ce_pick: x [..., K] and w [N, K] f32, target [...] i32/i64 (and the backward's
// g [...] f32) -> per-row values [...], or the backward's packed [N*K + R*K + R]: dw, dx
// and the forward's per-row values.
TensorMeta inferLinearCePick(OpKind op, const std::vector<TensorMeta> &in) {
  const size_t want = op == OpKind::linear_ce_pick ? 3 : 4;
  expectArity(op, in, want, want);
  const TensorMeta &x = in[0], &w = in[1], &t = in[2];
  bool ok = x.dtype == DType::f32 && w.dtype == DType::f32 && isIntegral(t.dtype) &&
            !x.shape.empty() && w.shape.size() == 2 && x.shape.back() == w.shape[1] &&
            Shape(x.shape.begin(), x.shape.end() - 1) == t.shape;
  if (want == 4) ok = ok && in[3].dtype == DType::f32 && in[3].shape == t.shape;
  if (!ok) {
    fail(op, "expected f32 x [..., K], f32 w [N, K], integer target [...]" +
                 std::string(want == 4 ? " and f32 g [...]" : "") + ", got " + metasStr(in));
  }
  if (op == OpKind::linear_ce_pick) return {DType::f32, t.shape};
  int64_t rows = 1;
  for (int64_t d : t.shape) rows *= d;
  return {DType::f32, {rows * w.shape[1] + w.shape[0] * w.shape[1] + rows}};
}

TensorMeta inferNn(OpKind op, const std::vector<TensorMeta> &in, const Attrs &a) {
  switch (op) {
  case OpKind::layer_norm:
  case OpKind::rms_norm:
    return inferNorm(op, in);
  case OpKind::embedding: {
    expectArity(op, in, 2, 2);
    expectRank(op, in[0], "weight [num, dim]", 2, 2);
    if (!isIntegral(in[1].dtype)) {
      fail(op, "ids must be i32 or i64, got " + metaStr(in[1]));
    }
    Shape s = in[1].shape;
    s.push_back(in[0].shape[1]);
    return {in[0].dtype, s};
  }
  case OpKind::embedding_backward: {
    expectArity(op, in, 2, 3);
    expectFloating(op, in[0]);
    if (!isIntegral(in[1].dtype)) fail(op, "ids must be i32 or i64, got " + metaStr(in[1]));
    Shape want = in[1].shape;
    if (a.dims.size() == 2) want.push_back(a.dims[1]);
    if (a.dims.size() != 2 || a.dims[0] < 0 || in[0].shape != want ||
        (in.size() == 3 && (in[2].shape != a.dims || in[2].dtype != in[0].dtype))) {
      fail(op, "expected grad [..., dim] over ids [...], dims [num, dim] and an optional base "
               "[num, dim] of grad's dtype, got " +
                   metasStr(in) + " with dims " + shapeStr(a.dims));
    }
    return {in[0].dtype, a.dims};
  }
  case OpKind::conv2d_backward_input:
  case OpKind::conv2d_backward_weight:
    return inferConv2dBackward(op, in, a);
  case OpKind::check_target:
    expectArity(op, in, 1, 1);
    if (!isIntegral(in[0].dtype)) fail(op, "target must be i32 or i64, got " + metaStr(in[0]));
    if (a.dims.size() != 2 || a.dims[0] < 0) {
      fail(op, "expected dims [classes, ignore_index], got " + shapeStr(a.dims));
    }
    return in[0];
  case OpKind::linear_ce_pick:
  case OpKind::linear_ce_pick_backward:
    return inferLinearCePick(op, in);
  case OpKind::sdpa: {
    expectArity(op, in, 3, 3);
    expectSameDtype(op, in, 0, 3);
    expectFloating(op, in[0]);
    const Shape &q = in[0].shape, &k = in[1].shape, &v = in[2].shape;
    for (const TensorMeta &m : in) expectRank(op, m, "q, k and v", 2, 64);
    bool ok = q.size() == k.size() && k.size() == v.size() && q.back() == k.back() &&
              k[k.size() - 2] == v[v.size() - 2] && std::equal(q.begin(), q.end() - 2, k.begin()) &&
              std::equal(k.begin(), k.end() - 2, v.begin());
    if (!ok) {
      fail(op, "expected q [..., Lq, D], k [..., Lk, D], v [..., Lk, Dv] with equal batch "
               "dims, got " +
                   metasStr(in));
    }
    Shape s = q;
    s.back() = v.back();
    return {in[0].dtype, s};
  }
    RCJIT_OP_CASES(Source, Unary, Binary, Compare, Where, Reduce, Normalize, Matmul, View, Copy,
                   Collective)
    break;
  }
  notHandledBy(op, "inferNn");
}

TensorMeta inferView(OpKind op, const std::vector<TensorMeta> &in, const Attrs &a) {
  expectArity(op, in, 1, 1);
  const TensorMeta &x = in[0];
  const Shape &s = x.shape;
  switch (op) {
  case OpKind::reshape:
    for (int64_t d : a.dims) {
      if (d < 0) fail(op, "bad target shape " + shapeStr(a.dims) + " for " + metaStr(x));
    }
    if (detail::checkedNumel(a.dims, opName(op)) != detail::checkedNumel(s, opName(op))) {
      fail(op, "cannot reshape " + metaStr(x) + " (" +
                   std::to_string(detail::checkedNumel(s, opName(op))) + " elements) to " +
                   shapeStr(a.dims));
    }
    return {x.dtype, a.dims};
  case OpKind::permute: {
    std::vector<bool> seen(s.size(), false);
    bool ok = a.dims.size() == s.size();
    for (int64_t d : a.dims) {
      ok = ok && d >= 0 && d < static_cast<int64_t>(s.size()) && !seen[d];
      if (ok) seen[d] = true;
    }
    if (!ok)
      fail(op, "order " + shapeStr(a.dims) + " is not a permutation of the dims of " + metaStr(x));
    Shape out;
    for (int64_t d : a.dims) out.push_back(s[d]);
    return {x.dtype, out};
  }
  case OpKind::expand: {
    bool ok = a.dims.size() >= s.size();
    size_t lead = ok ? a.dims.size() - s.size() : 0;
    for (size_t i = 0; ok && i < s.size(); ++i) {
      ok = s[i] == a.dims[lead + i] || s[i] == 1;
    }
    for (int64_t d : a.dims) ok = ok && d >= 0;
    if (!ok) fail(op, "cannot expand " + metaStr(x) + " to " + shapeStr(a.dims));
    return {x.dtype, a.dims};
  }
  case OpKind::slice: {
    int64_t rank = static_cast<int64_t>(s.size());
    if (a.dim < 0 || a.dim >= rank || a.start < 0 || a.start > a.end || a.end > s[a.dim]) {
      fail(op, "bad range dim " + std::to_string(a.dim) + " [" + std::to_string(a.start) + ", " +
                   std::to_string(a.end) + ") for " + metaStr(x));
    }
    Shape out = s;
    out[a.dim] = a.end - a.start;
    return {x.dtype, out};
  }
    RCJIT_OP_CASES(Source, Unary, Binary, Compare, Where, Reduce, Normalize, Matmul, Nn, Copy,
                   Collective)
    break;
  }
  notHandledBy(op, "inferView");
}

TensorMeta inferCat(OpKind op, const std::vector<TensorMeta> &in, const Attrs &a) {
  if (in.empty()) fail(op, "needs at least one tensor");
  expectSameDtype(op, in, 0, in.size());
  const Shape &s0 = in[0].shape;
  int64_t rank = static_cast<int64_t>(s0.size());
  if (a.dim < 0 || a.dim >= rank) {
    fail(op, "dim " + std::to_string(a.dim) + " is out of range for " + metasStr(in));
  }
  Shape out = s0;
  out[a.dim] = 0;
  for (const TensorMeta &m : in) {
    bool ok = static_cast<int64_t>(m.shape.size()) == rank;
    for (int64_t d = 0; ok && d < rank; ++d) ok = d == a.dim || m.shape[d] == s0[d];
    if (!ok) {
      fail(op, "all shapes must match except in dim " + std::to_string(a.dim) + ", got " +
                   metasStr(in));
    }
    out[a.dim] += m.shape[a.dim];
  }
  return {in[0].dtype, out};
}

TensorMeta inferCopy(OpKind op, const std::vector<TensorMeta> &in, const Attrs &a) {
  switch (op) {
  case OpKind::contiguous:
    expectArity(op, in, 1, 1);
    return in[0];
  case OpKind::cat:
    return inferCat(op, in, a);
    RCJIT_OP_CASES(Source, Unary, Binary, Compare, Where, Reduce, Normalize, Matmul, Nn, View,
                   Collective)
    break;
  }
  notHandledBy(op, "inferCopy");
}

// The dtypes the reducing collectives take (dist's rule: MPI reduces these natively).
void expectReducible(OpKind op, const TensorMeta &x, const Attrs &a) {
  const DType t = x.dtype;
  if (t != DType::f32 && t != DType::f64 && t != DType::i32 && t != DType::i64) {
    fail(op, metaStr(x) + " cannot be reduced (takes f32, f64, i32, i64: convert first)");
  }
  if (op == OpKind::all_reduce && a.reduce == 1 && !isFloating(t)) {
    fail(op, "the mean of " + metaStr(x) + " (mean takes f32 and f64; use sum)");
  }
}

void expectCollectiveDim(OpKind op, const TensorMeta &x, const Attrs &a) {
  if (a.dim < 0 || a.dim >= static_cast<int64_t>(x.shape.size())) {
    fail(op, "dim " + std::to_string(a.dim) + " is out of range for " + metaStr(x));
  }
}

TensorMeta inferCollective(OpKind op, const std::vector<TensorMeta> &in, const Attrs &a) {
  expectArity(op, in, 1, 1);
  const TensorMeta &x = in[0];
  if (a.world < 1) fail(op, "world size " + std::to_string(a.world) + " (must be at least 1)");
  switch (op) {
  case OpKind::all_reduce:
    if (a.reduce < 0 || a.reduce > 2) {
      fail(op, "reduce " + std::to_string(a.reduce) + " is not sum (0), mean (1) or max (2)");
    }
    expectReducible(op, x, a);
    return x;
  case OpKind::all_gather: {
    expectCollectiveDim(op, x, a);
    TensorMeta out = x;
    out.shape[static_cast<size_t>(a.dim)] = detail::checkedMul(
        x.shape[static_cast<size_t>(a.dim)], a.world, "all_gather", "the gathered dim");
    return out;
  }
  case OpKind::reduce_scatter: {
    expectReducible(op, x, a);
    expectCollectiveDim(op, x, a);
    const int64_t n = x.shape[static_cast<size_t>(a.dim)];
    if (n % a.world != 0) {
      fail(op, "dim " + std::to_string(a.dim) + " of " + metaStr(x) + " has size " +
                   std::to_string(n) + ", which " + std::to_string(a.world) +
                   " ranks cannot split evenly");
    }
    TensorMeta out = x;
    out.shape[static_cast<size_t>(a.dim)] = n / a.world;
    return out;
  }
  case OpKind::broadcast:
    if (a.root < 0 || a.root >= a.world) {
      fail(op, "root " + std::to_string(a.root) + " is not a rank of a world of " +
                   std::to_string(a.world));
    }
    return x;
    RCJIT_OP_CASES(Source, Unary, Binary, Compare, Where, Reduce, Normalize, Matmul, Nn, View, Copy)
    break;
  }
  notHandledBy(op, "inferCollective");
}

} // namespace

Shape broadcastShapes(const Shape &a, const Shape &b, const char *op) {
  size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    if (da != db && da != 1 && db != 1) {
      throw Error(std::string(op) + ": shapes " + shapeStr(a) + " and " + shapeStr(b) +
                  " cannot be broadcast (dim " + std::to_string(i) + ": " + std::to_string(da) +
                  " vs " + std::to_string(db) + ")");
    }
    out[i] = da == 1 ? db : da;
  }
  return out;
}

namespace {
int category(DType t) { // bool < integral < floating
  return t == DType::boolean ? 0 : isIntegral(t) ? 1 : 2;
}
DType promotePair(DType a, DType b) {
  if (a == b) return a;
  int ca = category(a), cb = category(b);
  if (ca != cb) return ca > cb ? a : b;
  if (ca == 1) return DType::i64; // i32 with i64
  // floating: f64 wins; f16 with bf16 gives f32; f32 with a half type gives f32
  if (a == DType::f64 || b == DType::f64) return DType::f64;
  return DType::f32;
}
} // namespace

DType promoteTypes(DType a, bool aZeroDim, bool aScalar, DType b, bool bZeroDim, bool bScalar) {
  // PyTorch ranks operands: dimensioned tensors, then 0-dim tensors, then wrapped numbers;
  // a lower-ranked operand changes the result only if it is of a higher category.
  auto rank = [](bool zeroDim, bool scalar) { return scalar ? 2 : zeroDim ? 1 : 0; };
  int ra = rank(aZeroDim, aScalar), rb = rank(bZeroDim, bScalar);
  if (ra == rb) return promotePair(a, b);
  DType hi = ra < rb ? a : b, lo = ra < rb ? b : a;
  bool loScalar = ra < rb ? bScalar : aScalar;
  if (category(lo) <= category(hi)) return hi;
  if (loScalar) return category(lo) == 2 ? DType::f32 : DType::i64; // default dtypes
  return lo;
}

namespace {
TensorMeta inferUnchecked(OpKind op, const std::vector<TensorMeta> &in, const Attrs &a) {
  const OpInfo &info = opInfo(op);
  if (info.arity >= 0 && static_cast<int>(in.size()) != info.arity) {
    expectArity(op, in, static_cast<size_t>(info.arity), static_cast<size_t>(info.arity));
  }
  switch (info.category) {
  case OpCategory::Source:
    fail(op, "a source op has no inputs to infer from");
  case OpCategory::Unary:
    return inferUnary(op, in);
  case OpCategory::Binary:
  case OpCategory::Compare:
    return inferBinary(op, in);
  case OpCategory::Where:
    return inferWhere(op, in);
  case OpCategory::Reduce:
    return inferReduce(op, in, a);
  case OpCategory::Normalize:
    return inferNormalize(op, in, a);
  case OpCategory::Matmul:
    return inferMatmulCategory(op, in, a);
  case OpCategory::Nn:
    return inferNn(op, in, a);
  case OpCategory::View:
    return inferView(op, in, a);
  case OpCategory::Copy:
    return inferCopy(op, in, a);
  case OpCategory::Collective:
    return inferCollective(op, in, a);
  }
  fail(op, "unknown op category");
}
} // namespace

TensorMeta inferMeta(OpKind op, const std::vector<TensorMeta> &in, const Attrs &a) {
  TensorMeta m = inferUnchecked(op, in, a);
  detail::checkedBytes(m.shape, m.dtype, opName(op)); // no result may overflow a size
  return m;
}

} // namespace rcjit
