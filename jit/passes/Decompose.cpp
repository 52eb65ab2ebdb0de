// decompose: softmax, norms, sdpa and small matmuls spelled as fusible primitives.
#include "jit/passes/Decompose.h"

#include <cmath>
#include <limits>
#include <utility>
#include <vector>

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

/// matmul as one batched GEMM takes it (DecomposeOptions::batchedGemm), or -1 when it is one
/// already: 1-D operands as matrices, broadcast batch dims expanded into contiguous copies,
/// integer products as a multiply and a sum.
int decomposeForBatchedGemm(GraphBuilder &b, const Node &n, const std::vector<int> &in) {
  int x = in[0], y = in[1];
  Shape xs = b.meta(x).shape, ys = b.meta(y).shape;
  const bool vecX = xs.size() == 1, vecY = ys.size() == 1;
  if (vecX) x = b.emit(OpKind::reshape, {x}, dimsAttrs({1, xs[0]}));
  if (vecY) y = b.emit(OpKind::reshape, {y}, dimsAttrs({ys[0], 1}));
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
      Dims dims(want.begin(), want.end());
      return b.emit(OpKind::contiguous, {b.emit(OpKind::expand, {v}, dimsAttrs(dims))});
    };
    if (!projection) {
      x = expanded(x, xs);
      y = expanded(y, ys);
    }
    if (!changed) return -1;
    out = b.emit(OpKind::matmul, {x, y});
  }
  if (vecX || vecY) {
    const Shape want = concreteShape(n.shape);
    out = b.emit(OpKind::reshape, {out}, dimsAttrs(Dims(want.begin(), want.end())));
  }
  return out;
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

/// The new node standing for old node `n`, or -1 when `n` is not decomposed.
int tryDecompose(GraphBuilder &b, const Graph &g, const Node &n, const DecomposeOptions &o) {
  if (n.op == OpKind::check_target && o.dropDataChecks) return b.at(n.inputs[0]);
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
  case OpKind::conv2d:                 // a library call
  case OpKind::embedding:              // a gather, run by the eager kernel
  case OpKind::embedding_backward:     // a scatter-add, run by the eager kernel
  case OpKind::conv2d_backward_input:  // run by the eager kernel
  case OpKind::conv2d_backward_weight: // run by the eager kernel
  case OpKind::check_target:           // a host read, run by the eager kernel
  case OpKind::linear_ce_pick:         // chunked GEMMs, run by the eager kernel
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
