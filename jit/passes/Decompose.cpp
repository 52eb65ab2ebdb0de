// decompose: softmax, norms, sdpa and small matmuls spelled as fusible primitives.
#include "jit/passes/Decompose.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>
#include <vector>

#include "jit/passes/ConstantFold.h"
#include "jit/passes/GraphBuilder.h"
#include "tracer/OpCases.h"
#include "tracer/ShapeInference.h"

namespace rcjit {

namespace {

/// f16 and bf16 compute in f32, as the eager target does; other dtypes in themselves.
DType computeType(DType t) { return t == DType::f16 || t == DType::bf16 ? DType::f32 : t; }

Attrs reduceAttrs(Dims dims, bool keepdim) {
  Attrs a;
  a.dims = std::move(dims);
  a.keepdim = keepdim;
  return a;
}

Attrs dimsAttrs(Dims dims) {
  Attrs a;
  a.dims = std::move(dims);
  return a;
}

/// The last `k` dims of a rank-`rank` tensor.
Dims trailingDims(int64_t rank, int64_t k) {
  Dims d;
  for (int64_t i = rank - k; i < rank; ++i) d.push_back(i);
  return d;
}

int64_t rankOf(const GraphBuilder &b, int id) {
  return static_cast<int64_t>(b.node(id).shape.size());
}

/// (log_)softmax of `x` over `dim`, in x's dtype.
int softmaxOf(GraphBuilder &b, int x, int64_t dim, bool log) {
  int m = b.emit(OpKind::amax, {x}, reduceAttrs({dim}, true));
  int z = b.emit(OpKind::sub, {x, m});
  int e = b.emit(OpKind::exp, {z});
  int s = b.emit(OpKind::sum, {e}, reduceAttrs({dim}, true));
  if (log) return b.emit(OpKind::sub, {z, b.emit(OpKind::log, {s})});
  return b.emit(OpKind::div, {e, s});
}

int decomposeSoftmax(GraphBuilder &b, const Node &n, const std::vector<int> &in) {
  int x = b.cast(in[0], computeType(n.dtype));
  int y = softmaxOf(b, x, n.attrs.dim, n.op == OpKind::log_softmax);
  return b.cast(y, n.dtype);
}

/// layer_norm (x, w [, b]) or rms_norm (x, w) over w's dims, the trailing dims of x.
int decomposeNorm(GraphBuilder &b, const Node &n, const std::vector<int> &in) {
  DType ct = computeType(n.dtype);
  int x = b.cast(in[0], ct);
  Attrs over = reduceAttrs(trailingDims(rankOf(b, x), rankOf(b, in[1])), true);
  int centered = x;
  if (n.op == OpKind::layer_norm) {
    centered = b.emit(OpKind::sub, {x, b.emit(OpKind::mean, {x}, over)});
  }
  int var = b.emit(OpKind::mean, {b.emit(OpKind::mul, {centered, centered})}, over);
  int rstd = b.emit(OpKind::rsqrt, {b.emit(OpKind::add, {var, b.scalar(n.attrs.eps, ct)})});
  int y = b.emit(OpKind::mul, {b.emit(OpKind::mul, {centered, rstd}), b.cast(in[1], ct)});
  if (in.size() > 2) y = b.emit(OpKind::add, {y, b.cast(in[2], ct)});
  return b.cast(y, n.dtype);
}

/// A bool [Lq, Lk] mask, true where key j is after query i (j > i): the causal mask.
int causalMask(GraphBuilder &b, int64_t lq, int64_t lk) {
  int rows = b.emit(OpKind::reshape, {b.arange(lq)}, dimsAttrs({lq, 1}));
  int cols = b.emit(OpKind::reshape, {b.arange(lk)}, dimsAttrs({1, lk}));
  return b.emit(OpKind::gt, {cols, rows});
}

/// sum(a[..., M, 1, K] * bt[N, K], last): a @ bt^T with the product and sum in one kernel.
int productSum(GraphBuilder &b, int a, int bt) {
  Shape as = concreteShape(b.node(a).shape);
  Dims target(as.begin(), as.end() - 1);
  target.push_back(1);
  target.push_back(as.back());
  int prod = b.emit(OpKind::mul, {b.emit(OpKind::reshape, {a}, dimsAttrs(target)), bt});
  return b.emit(OpKind::sum, {prod}, reduceAttrs({static_cast<int64_t>(target.size()) - 1}, false));
}

int decomposeSmallLinear(GraphBuilder &b, const Node &n, const std::vector<int> &in) {
  DType ct = computeType(n.dtype);
  int y = productSum(b, b.cast(in[0], ct), b.cast(in[1], ct));
  if (in.size() > 2) y = b.emit(OpKind::add, {y, b.cast(in[2], ct)});
  return b.cast(y, n.dtype);
}

/// a [..., M, K] @ b [..., K, N] (batch dims broadcast): b's last two dims swapped and a
/// size-1 dim put before them, so that [..., 1, N, K] lines up with a's [..., M, 1, K].
int decomposeSmallMatmul(GraphBuilder &b, const Node &n, const std::vector<int> &in) {
  DType ct = computeType(n.dtype);
  const int64_t r = rankOf(b, in[1]);
  Dims swap = trailingDims(r, r);
  std::swap(swap[r - 2], swap[r - 1]);
  int bt = b.emit(OpKind::permute, {b.cast(in[1], ct)}, dimsAttrs(swap));
  if (r > 2) {
    Shape bs = concreteShape(b.node(bt).shape);
    bs.insert(bs.end() - 2, 1);
    bt = b.emit(OpKind::reshape, {bt}, dimsAttrs(bs));
  }
  return b.cast(productSum(b, b.cast(in[0], ct), bt), n.dtype);
}

int reshapeTo(GraphBuilder &b, int x, const Shape &s) {
  return b.emit(OpKind::reshape, {x}, dimsAttrs(s));
}

int sliceOf(GraphBuilder &b, int x, int64_t dim, int64_t start, int64_t end) {
  Attrs a;
  a.dim = dim;
  a.start = start;
  a.end = end;
  return b.emit(OpKind::slice, {x}, a);
}

/// matmul as one batched GEMM takes it (DecomposeOptions::batchedGemm), or -1 when it is one
/// already: 1-D operands as matrices, broadcast batch dims expanded into contiguous copies,
/// integer products as a multiply and a sum.
int decomposeForBatchedGemm(GraphBuilder &b, const Node &n, const std::vector<int> &in) {
  int x = in[0], y = in[1];
  Shape xs = b.meta(x).shape, ys = b.meta(y).shape;
  const bool vecX = xs.size() == 1, vecY = ys.size() == 1;
  if (vecX) x = reshapeTo(b, x, {1, xs[0]});
  if (vecY) y = reshapeTo(b, y, {ys[0], 1});
  xs = b.meta(x).shape;
  ys = b.meta(y).shape;
  bool changed = vecX || vecY;
  int out = -1;
  if (!isFloating(n.dtype)) {
    out = decomposeSmallMatmul(b, n, {x, y}); // broadcasts batches itself
  } else {
    // x [..., M, K] @ y [K, N] is one GEMM over x's rows (MatmulLayout); other batch dims
    // must be the same on both sides
    const bool projection = xs.size() >= 3 && ys.size() == 2;
    const size_t rank = std::max(xs.size(), ys.size());
    Shape batch(rank - 2, 1);
    for (const Shape *s : {&xs, &ys}) {
      const size_t lead = rank - s->size();
      for (size_t i = 0; i + 2 < s->size(); ++i)
        batch[lead + i] = std::max(batch[lead + i], (*s)[i]);
    }
    auto expanded = [&](int v, const Shape &s) {
      Shape want = batch;
      want.insert(want.end(), s.end() - 2, s.end());
      if (want == s) return v;
      changed = true;
      return b.emit(OpKind::contiguous, {b.emit(OpKind::expand, {v}, dimsAttrs(want))});
    };
    if (!projection) {
      x = expanded(x, xs);
      y = expanded(y, ys);
    }
    if (!changed) return -1;
    out = b.emit(OpKind::matmul, {x, y});
  }
  if (vecX || vecY) out = reshapeTo(b, out, concreteShape(n.shape));
  return out;
}

// ---- conv2d as GEMMs, for a target whose library calls are batched GEMMs alone (cuda) --------

/// x with `before` zeros ahead of it and `after` behind it along `dim`.
int padDim(GraphBuilder &b, int x, int64_t dim, int64_t before, int64_t after) {
  if (before == 0 && after == 0) return x;
  const TensorMeta m = b.meta(x);
  auto zeros = [&](int64_t count) {
    Shape s = m.shape;
    s[dim] = count;
    return b.emit(OpKind::expand, {b.scalar(0, m.dtype)}, dimsAttrs(s));
  };
  std::vector<int> parts;
  if (before > 0) parts.push_back(zeros(before));
  parts.push_back(x);
  if (after > 0) parts.push_back(zeros(after));
  Attrs a;
  a.dim = dim;
  return b.emit(OpKind::cat, parts, a);
}

/// A convolution's geometry: x [N, C, H, W], w [O, C, KH, KW], out [N, O, OH, OW]; the input
/// is padded to [HP, WP] so that rows i + s * r (i < KH, r < OH) all exist, as do the columns.
struct ConvShape {
  int64_t n, c, h, w, o, kh, kw, oh, ow, s, p, hp, wp;
  ConvShape(const Shape &x, const Shape &wt, int64_t stride, int64_t padding)
      : n(x[0]), c(x[1]), h(x[2]), w(x[3]), o(wt[0]), kh(wt[2]), kw(wt[3]),
        oh((x[2] + 2 * padding - wt[2]) / stride + 1),
        ow((x[3] + 2 * padding - wt[3]) / stride + 1), s(stride), p(padding),
        hp(std::max(h + 2 * p, kh - 1 + s * oh)), wp(std::max(w + 2 * p, kw - 1 + s * ow)) {}
  int64_t patch() const { return c * kh * kw; } // a column's length
  int64_t points() const { return n * oh * ow; }
};

/// The columns of x for the convolution: [C*KH*KW, N*OH*OW], ordered as w [O, C, KH, KW]
/// flattens, so that w [O, C*KH*KW] @ columns is the output [O, N*OH*OW].
int im2col(GraphBuilder &b, int x, const ConvShape &g) {
  int xp = padDim(b, padDim(b, x, 2, g.p, g.hp - g.h - g.p), 3, g.p, g.wp - g.w - g.p);
  std::vector<int> taps;
  for (int64_t i = 0; i < g.kh; ++i) {
    for (int64_t j = 0; j < g.kw; ++j) {
      // rows i, i + s, ..., columns j, j + s, ...: a window of s * OH rows seen as [OH, s]
      int v = sliceOf(b, sliceOf(b, xp, 2, i, i + g.s * g.oh), 3, j, j + g.s * g.ow);
      if (g.s > 1) {
        v = reshapeTo(b, v, {g.n, g.c, g.oh, g.s, g.ow, g.s});
        v = sliceOf(b, sliceOf(b, v, 3, 0, 1), 5, 0, 1);
      }
      taps.push_back(reshapeTo(b, v, {g.n, g.c, 1, g.oh * g.ow}));
    }
  }
  Attrs along;
  along.dim = 2;
  int cols = taps.size() == 1 ? taps[0] : b.emit(OpKind::cat, taps, along); // [N, C, KK, P]
  cols = b.emit(OpKind::permute, {cols}, dimsAttrs({1, 2, 0, 3}));          // [C, KK, N, P]
  return reshapeTo(b, b.emit(OpKind::contiguous, {cols}), {g.patch(), g.points()});
}

/// grad [N, O, OH, OW] as [O, N*OH*OW], the layout the columns' GEMMs take.
int gradRows(GraphBuilder &b, int grad, const ConvShape &g) {
  int t = b.emit(OpKind::permute, {grad}, dimsAttrs({1, 0, 2, 3}));
  return reshapeTo(b, b.emit(OpKind::contiguous, {t}), {g.o, g.points()});
}

/// conv2d (x, w, bias?), conv2d_backward_input (grad, w) and conv2d_backward_weight (grad, x)
/// as im2col / col2im around one GEMM each.
int decomposeConv2d(GraphBuilder &b, const Node &n, const std::vector<int> &in) {
  const Shape out = concreteShape(n.shape);
  if (n.op == OpKind::conv2d) {
    const ConvShape g(b.meta(in[0]).shape, b.meta(in[1]).shape, n.attrs.stride, n.attrs.padding);
    int w2 = reshapeTo(b, in[1], {g.o, g.patch()});
    int y = b.emit(OpKind::matmul, {w2, im2col(b, in[0], g)}); // [O, N*P]
    y = b.emit(OpKind::permute, {reshapeTo(b, y, {g.o, g.n, g.oh, g.ow})}, dimsAttrs({1, 0, 2, 3}));
    if (in.size() > 2) y = b.emit(OpKind::add, {y, reshapeTo(b, in[2], {1, g.o, 1, 1})});
    return b.emit(OpKind::contiguous, {y});
  }
  if (n.op == OpKind::conv2d_backward_weight) { // dw = grad [O, N*P] @ columns^T
    const ConvShape g(b.meta(in[1]).shape, out, n.attrs.stride, n.attrs.padding);
    int colsT = b.emit(OpKind::permute, {im2col(b, in[1], g)}, dimsAttrs({1, 0}));
    int dw = b.emit(OpKind::matmul, {gradRows(b, in[0], g), colsT});
    return reshapeTo(b, dw, out);
  }
  // backward_input: columns = w^T [C*KK, O] @ grad [O, N*P], each tap's column added back
  // where the forward read it (col2im)
  const ConvShape g(out, b.meta(in[1]).shape, n.attrs.stride, n.attrs.padding);
  int wT = b.emit(OpKind::permute, {reshapeTo(b, in[1], {g.o, g.patch()})}, dimsAttrs({1, 0}));
  int cols = reshapeTo(b, b.emit(OpKind::matmul, {wT, gradRows(b, in[0], g)}),
                       {g.c, g.kh, g.kw, g.n, g.oh, g.ow});
  int sum = -1;
  for (int64_t i = 0; i < g.kh; ++i) {
    for (int64_t j = 0; j < g.kw; ++j) {
      int v = sliceOf(b, sliceOf(b, cols, 1, i, i + 1), 2, j, j + 1); // [C, 1, 1, N, OH, OW]
      v = b.emit(OpKind::permute, {reshapeTo(b, v, {g.c, g.n, g.oh, g.ow})},
                 dimsAttrs({1, 0, 2, 3})); // [N, C, OH, OW]
      if (g.s > 1) {                       // every s-th row and column, zeros between
        v = reshapeTo(b, b.emit(OpKind::contiguous, {v}), {g.n, g.c, g.oh, 1, g.ow, 1});
        v = padDim(b, padDim(b, v, 3, 0, g.s - 1), 5, 0, g.s - 1);
        v = reshapeTo(b, v, {g.n, g.c, g.oh * g.s, g.ow * g.s});
      }
      v = padDim(b, v, 2, i, g.hp - i - g.s * g.oh);
      v = padDim(b, v, 3, j, g.wp - j - g.s * g.ow); // [N, C, HP, WP]
      sum = sum < 0 ? v : b.emit(OpKind::add, {sum, v});
    }
  }
  return b.emit(OpKind::contiguous,
                {sliceOf(b, sliceOf(b, sum, 2, g.p, g.p + g.h), 3, g.p, g.p + g.w)});
}

/// Static and non-empty: the node and its operands.
bool decomposable(const Graph &g, const Node &n) {
  auto ok = [](const Node &m) {
    for (const Dim &d : m.shape) {
      if (d.isSymbolic() || d.value == 0) return false;
    }
    return true;
  };
  // a 1-D @ 1-D matmul's result has no dims; other rank-0 results stay as they are
  if (!ok(n) || (n.shape.empty() && n.op != OpKind::matmul)) return false;
  for (int i : n.inputs) {
    if (!ok(g.nodes[i])) return false;
  }
  return true;
}

/// A floating-point linear (a [..., K], w [N, K]), or a matmul of two operands of rank >= 2
/// (a [..., M, K], w [..., K, N]), giving `out`, that is small: K and N within
/// smallMatmulMax, or at most smallMatmulMacs multiply-adds. Others stay library calls.
bool isSmallProduct(OpKind op, DType dt, const Shape &a, const Shape &w, const Shape &out,
                    const DecomposeOptions &o) {
  if (!isFloating(dt)) return false;
  if (op == OpKind::matmul && (a.size() < 2 || w.size() < 2)) return false;
  const int64_t k = a.back();
  const int64_t cols = op == OpKind::linear ? w[0] : w.back();
  if (k <= o.smallMatmulMax && cols <= o.smallMatmulMax) return true;
  double macs = static_cast<double>(k); // [..., M, N] x K
  for (int64_t d : out) macs *= static_cast<double>(d);
  return o.smallMatmulMacs > 0 && macs <= static_cast<double>(o.smallMatmulMacs);
}

bool isSmallMatmul(const Graph &g, const Node &n, const DecomposeOptions &o) {
  return isSmallProduct(n.op, n.dtype, concreteShape(g.nodes[n.inputs[0]].shape),
                        concreteShape(g.nodes[n.inputs[1]].shape), concreteShape(n.shape), o);
}

/// x @ y as a matmul node, or spelled as a product and a sum when small: what decompose
/// would make of that matmul on a second run, so that it stays a fixed point.
int matmulOf(GraphBuilder &b, int x, int y, const DecomposeOptions &o) {
  TensorMeta mx = b.meta(x), my = b.meta(y);
  TensorMeta out = inferMeta(OpKind::matmul, {mx, my}, {});
  if (isSmallProduct(OpKind::matmul, out.dtype, mx.shape, my.shape, out.shape, o)) {
    Node n;
    n.op = OpKind::matmul;
    n.dtype = out.dtype;
    return decomposeSmallMatmul(b, n, {x, y});
  }
  return b.emit(OpKind::matmul, {x, y});
}

int decomposeSdpa(GraphBuilder &b, const Node &n, const std::vector<int> &in,
                  const DecomposeOptions &o) {
  DType ct = computeType(n.dtype);
  int q = b.cast(in[0], ct), k = b.cast(in[1], ct), v = b.cast(in[2], ct);
  Shape qs = concreteShape(b.node(q).shape), ks = concreteShape(b.node(k).shape);
  int64_t r = static_cast<int64_t>(qs.size());
  Dims swapLast = trailingDims(r, r);
  std::swap(swapLast[r - 2], swapLast[r - 1]);
  // The mask comes first so that its kernel precedes the scores' and the where can join
  // the scaling, softmax and all, in one kernel.
  int mask = n.attrs.causal ? causalMask(b, qs[r - 2], ks[r - 2]) : -1;
  int kt = b.emit(OpKind::permute, {k}, dimsAttrs(swapLast));
  double scale = 1.0 / std::sqrt(static_cast<double>(qs.back()));
  int s = b.emit(OpKind::mul, {matmulOf(b, q, kt, o), b.scalar(scale, ct)});
  if (mask >= 0) {
    int ninf = b.scalar(-std::numeric_limits<double>::infinity(), ct);
    s = b.emit(OpKind::where, {mask, ninf, s});
  }
  int p = softmaxOf(b, s, r - 1, false);
  return b.cast(matmulOf(b, p, v, o), n.dtype);
}

/// pow(x, c), c a one-element constant 2, 3, 4 or 0.5 and x floating of the result's
/// shape and dtype, as products of x or as sqrt(x): a kernel multiplies instead of calling
/// powf per element (libmvec's vector powf takes its scalar path for a negative base, as
/// GELU's tanh form gives it half the time). Shapes are copied, so symbolic ones are fine.
/// -1 otherwise.
int decomposePow(GraphBuilder &b, const Graph &g, const Node &n) {
  const Node &x = g.nodes[n.inputs[0]], &e = g.nodes[n.inputs[1]];
  if (!isScalarConstant(e) || !isFloating(n.dtype) || x.dtype != n.dtype || x.shape != n.shape)
    return -1;
  const double c = e.attrs.value;
  if (c != 2 && c != 3 && c != 4 && c != 0.5) return -1;
  const DType ct = computeType(n.dtype);
  auto make = [&](OpKind op, std::vector<int> in, DType t) {
    Node m;
    m.op = op;
    m.inputs = std::move(in);
    m.dtype = t;
    m.shape = n.shape;
    return b.append(std::move(m));
  };
  const int in = b.at(n.inputs[0]);
  const int xc = ct == n.dtype ? in : make(OpKind::cast, {in}, ct);
  int r = -1;
  if (c == 0.5) {
    r = make(OpKind::sqrt, {xc}, ct);
  } else {
    const int sq = make(OpKind::mul, {xc, xc}, ct);
    r = c == 2 ? sq : make(OpKind::mul, {sq, c == 3 ? xc : sq}, ct);
  }
  return ct == n.dtype ? r : make(OpKind::cast, {r}, n.dtype);
}

/// The new node standing for old node `n`, or -1 when `n` is not decomposed.
int tryDecompose(GraphBuilder &b, const Graph &g, const Node &n, const DecomposeOptions &o) {
  if (n.op == OpKind::check_target && o.dropDataChecks) return b.at(n.inputs[0]);
  if (n.op == OpKind::pow) return decomposePow(b, g, n);
  if (!decomposable(g, n)) return -1;
  std::vector<int> in;
  for (int i : n.inputs) in.push_back(b.at(i));
  switch (n.op) {
  case OpKind::softmax:
  case OpKind::log_softmax:
    return decomposeSoftmax(b, n, in);
  case OpKind::layer_norm:
  case OpKind::rms_norm:
    return decomposeNorm(b, n, in);
  case OpKind::sdpa:
    return decomposeSdpa(b, n, in, o);
  case OpKind::linear:
    if (isSmallMatmul(g, n, o)) return decomposeSmallLinear(b, n, in);
    if (o.splitLinearBias && in.size() == 3)
      return b.emit(OpKind::add, {b.emit(OpKind::linear, {in[0], in[1]}), in[2]});
    return -1;
  case OpKind::matmul:
    if (isSmallMatmul(g, n, o)) return decomposeSmallMatmul(b, n, in);
    return o.batchedGemm ? decomposeForBatchedGemm(b, n, in) : -1;
  case OpKind::conv2d: // a library call, or GEMMs where the target's library has no conv
  case OpKind::conv2d_backward_input:
  case OpKind::conv2d_backward_weight:
    return o.batchedGemm ? decomposeConv2d(b, n, in) : -1;
  case OpKind::embedding:          // a gather, run by the eager kernel
  case OpKind::embedding_backward: // a scatter-add, run by the eager kernel
  case OpKind::check_target:       // a host read, run by the eager kernel
  case OpKind::linear_ce_pick:     // chunked GEMMs, run by the eager kernel
  case OpKind::linear_ce_pick_backward:
    RCJIT_OP_CASES(Source, Unary, Binary, Compare, Where, Reduce, View, Copy,
                   Collective) // lowered as is
    return -1;
  }
  return -1;
}

} // namespace

Graph decompose(const Graph &g, const DecomposeOptions &opts) {
  GraphBuilder b(g);
  bool changed = false;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    int old = static_cast<int>(i);
    b.begin(old);
    int id = tryDecompose(b, g, g.nodes[i], opts);
    if (id < 0) {
      b.copy(old);
      continue;
    }
    b.map(old, id);
    changed = true;
  }
  return changed ? b.finish() : g;
}

} // namespace rcjit
