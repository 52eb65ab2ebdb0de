// The eager target's nn kernels: layer_norm, rms_norm, embedding (and its backward) and sdpa
// (OpenMP loops).
#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include <rcjit/Error.h>

#include "targets/eager/Eager.h"
#include "tracer/Half.h"
#include "tracer/OpCases.h"
#include "tracer/TensorImpl.h"

namespace rcjit::eager {

Tensor contiguousAs(const Tensor &t, DType dt) {
  if (t.dtype() == dt && t.is_contiguous()) return t;
  Tensor c = detail::makeTensor(t.shape(), dt);
  copyInto(c, t);
  return c;
}

namespace {

/// Work (in elements touched) below which a kernel stays on one thread.
constexpr int64_t kParallelWork = 1 << 15;

// ---- storage <-> compute types ------------------------------------------------------------

/// float for f32/f16/bf16 storage, double for f64.
template <class S> using ComputeOf = std::conditional_t<std::is_same_v<S, double>, double, float>;

template <class S> inline ComputeOf<S> load(S v) {
  if constexpr (std::is_same_v<S, Half>) {
    return halfToFloat(v.bits);
  } else if constexpr (std::is_same_v<S, BFloat16>) {
    return bf16ToFloat(v.bits);
  } else {
    return v;
  }
}

template <class S, class C> inline S store(C v) {
  if constexpr (std::is_same_v<S, Half>) {
    return Half{floatToHalf(static_cast<float>(v))};
  } else if constexpr (std::is_same_v<S, BFloat16>) {
    return BFloat16{floatToBf16(static_cast<float>(v))};
  } else {
    return static_cast<S>(v);
  }
}

/// Calls f(S{}) with S the storage type of a floating dtype; an Error naming `op` otherwise.
template <class F> void dispatchFloating(DType t, const char *op, F &&f) {
  switch (t) {
  case DType::f32:
    f(float{});
    return;
  case DType::f64:
    f(double{});
    return;
  case DType::f16:
    f(Half{});
    return;
  case DType::bf16:
    f(BFloat16{});
    return;
  case DType::i32:
  case DType::i64:
  case DType::boolean:
    break;
  }
  throw Error(std::string(op) + ": dtype " + std::string(dtypeName(t)) +
              " is not supported (floating dtypes only)");
}

template <class S> const S *elems(const Tensor &t) {
  return reinterpret_cast<const S *>(t.impl()->ptr());
}
template <class S> S *mutableElems(const Tensor &t) {
  return reinterpret_cast<S *>(t.impl()->ptr());
}

/// t's elements in compute type C, row-major.
template <class S, class C> std::vector<C> computeVector(const Tensor &t) {
  Tensor c = contiguousAs(t, t.dtype());
  const S *p = elems<S>(c);
  std::vector<C> v(static_cast<size_t>(c.numel()));
  for (size_t i = 0; i < v.size(); ++i) v[i] = load(p[i]);
  return v;
}

// ---- layer_norm and rms_norm -------------------------------------------------------------

struct NormSpec {
  int64_t rows = 0, width = 0;
  double eps = 0;
  bool rms = false;
};

/// Normalizes one row of `width` elements (x and y contiguous).
template <class S, class C>
void normRow(const S *x, S *y, const C *w, const C *b, const NormSpec &n) {
  double mean = 0, sq = 0;
  if (!n.rms) {
#pragma omp simd reduction(+ : mean)
    for (int64_t i = 0; i < n.width; ++i) mean += load(x[i]);
    mean /= static_cast<double>(n.width);
  }
  C m = static_cast<C>(mean);
#pragma omp simd reduction(+ : sq)
  for (int64_t i = 0; i < n.width; ++i) {
    C d = load(x[i]) - m;
    sq += static_cast<double>(d) * d;
  }
  C rstd = static_cast<C>(1.0 / std::sqrt(sq / static_cast<double>(n.width) + n.eps));
  for (int64_t i = 0; i < n.width; ++i) {
    C v = (load(x[i]) - m) * rstd * w[i];
    y[i] = store<S>(b ? v + b[i] : v);
  }
}

template <class S>
void normRows(const Tensor &x, const Tensor &w, const Tensor *b, const NormSpec &n,
              const Tensor &y) {
  using C = ComputeOf<S>;
  std::vector<C> wv = computeVector<S, C>(w);
  std::vector<C> bv = b ? computeVector<S, C>(*b) : std::vector<C>();
  const S *xp = elems<S>(x);
  S *yp = mutableElems<S>(y);
  const C *bp = b ? bv.data() : nullptr;
#pragma omp parallel for schedule(static) if (n.rows * n.width > kParallelWork)
  for (int64_t r = 0; r < n.rows; ++r) {
    normRow<S, C>(xp + r * n.width, yp + r * n.width, wv.data(), bp, n);
  }
}

Tensor runNorm(OpKind op, const std::vector<Tensor> &in, const Attrs &a, const TensorMeta &meta) {
  Tensor x = contiguousAs(in[0], in[0].dtype());
  const Tensor &w = in[1];
  const Tensor *b = op == OpKind::layer_norm && in.size() > 2 && in[2].defined() ? &in[2] : nullptr;
  Tensor y = detail::makeTensor(meta.shape, meta.dtype);
  NormSpec n{0, w.numel(), a.eps, op == OpKind::rms_norm};
  if (y.numel() == 0 || n.width == 0) return y;
  n.rows = x.numel() / n.width;
  dispatchFloating(meta.dtype, std::string(opName(op)).c_str(),
                   [&](auto tag) { normRows<decltype(tag)>(x, w, b, n, y); });
  return y;
}

// ---- embedding ---------------------------------------------------------------------------

/// ids as contiguous i64, checked against [0, num).
Tensor checkedIds(const Tensor &ids, int64_t num) {
  Tensor c = contiguousAs(ids, DType::i64);
  const int64_t *p = elems<int64_t>(c);
  for (int64_t i = 0; i < c.numel(); ++i) {
    if (p[i] < 0 || p[i] >= num) {
      throw Error("embedding: id " + std::to_string(p[i]) + " is out of range for a weight " +
                  "of " + std::to_string(num) + " rows (ids must be in [0, " + std::to_string(num) +
                  "))");
    }
  }
  return c;
}

// ---- check_target ------------------------------------------------------------------------

} // namespace

Tensor runCheckTarget(const Tensor &target, const Attrs &a) {
  const int64_t classes = a.dims.at(0), ignore = a.dims.at(1);
  const bool host = target.device().is_cpu();
  Tensor c = contiguousAs(host ? target : target.to(Device::cpu()), DType::i64);
  const int64_t *p = elems<int64_t>(c);
  for (int64_t i = 0; i < c.numel(); ++i) {
    if (p[i] != ignore && (p[i] < 0 || p[i] >= classes)) {
      throw Error("cross_entropy: target " + std::to_string(p[i]) + " is out of range for " +
                  std::to_string(classes) + " classes (expected [0, " +
                  std::to_string(classes - 1) + "] or ignore_index " + std::to_string(ignore) +
                  ")");
    }
  }
  if (!host) return target;
  // a copy: in a compiled program the result outlives the arena bytes the target may sit in
  Tensor y = detail::makeTensor(target.shape(), target.dtype());
  copyInto(y, target);
  return y;
}

namespace {

Tensor runEmbedding(const Tensor &weight, const Tensor &ids, const TensorMeta &meta) {
  const auto &wi = *weight.impl();
  Tensor idc = checkedIds(ids, wi.shape[0]);
  Tensor y = detail::makeTensor(meta.shape, meta.dtype);
  int64_t n = idc.numel(), dim = wi.shape[1];
  size_t es = dtypeSize(weight.dtype());
  const int64_t *idp = elems<int64_t>(idc);
  const char *wp = wi.ptr();
  char *yp = y.impl()->ptr();
  int64_t rs = wi.strides[0], cs = wi.strides[1];
#pragma omp parallel for schedule(static) if (n * dim > kParallelWork)
  for (int64_t i = 0; i < n; ++i) {
    const char *src = wp + idp[i] * rs * static_cast<int64_t>(es);
    char *dst = yp + i * dim * static_cast<int64_t>(es);
    if (cs == 1) {
      std::memcpy(dst, src, static_cast<size_t>(dim) * es);
      continue;
    }
    for (int64_t j = 0; j < dim; ++j) std::memcpy(dst + j * es, src + j * cs * es, es);
  }
  return y;
}

/// Sums the rows of grad into rows ids of a zero [num, dim] tensor, in the compute type.
/// Threads own column ranges, so the sums are race-free and deterministic.
template <class C>
void scatterAddRows(const C *g, const int64_t *ids, C *out, int64_t n, int64_t num, int64_t dim,
                    const C *base) {
  // the starting rows: zeros, or base's (in parallel: this is a whole table); none to
  // write when the base is the output itself (embeddingBackwardInto)
#pragma omp parallel for schedule(static) if (num * dim > kParallelWork)
  for (int64_t r = 0; r < (base == out ? 0 : num); ++r) {
    if (base) {
      std::copy(base + r * dim, base + (r + 1) * dim, out + r * dim);
    } else {
      std::fill(out + r * dim, out + (r + 1) * dim, C(0));
    }
  }
  constexpr int64_t kCols = 64;
  const int64_t chunks = (dim + kCols - 1) / kCols;
#pragma omp parallel for schedule(static) if (n * dim > kParallelWork)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t j0 = c * kCols, j1 = std::min(dim, j0 + kCols);
    for (int64_t i = 0; i < n; ++i) {
      const C *src = g + i * dim;
      C *dst = out + ids[i] * dim;
#pragma omp simd
      for (int64_t j = j0; j < j1; ++j) dst[j] += src[j];
    }
  }
}

Tensor runEmbeddingBackward(const std::vector<Tensor> &in, const TensorMeta &meta) {
  const Tensor &grad = in[0], &ids = in[1];
  const int64_t num = meta.shape[0], dim = meta.shape[1];
  Tensor idc = checkedIds(ids, num);
  const DType ct = meta.dtype == DType::f64 ? DType::f64 : DType::f32;
  Tensor gc = contiguousAs(grad, ct);
  Tensor bc = in.size() > 2 ? contiguousAs(in[2], ct) : Tensor();
  Tensor acc = detail::makeTensor(meta.shape, ct);
  if (ct == DType::f64) {
    scatterAddRows(elems<double>(gc), elems<int64_t>(idc), mutableElems<double>(acc), idc.numel(),
                   num, dim, bc.defined() ? elems<double>(bc) : nullptr);
  } else {
    scatterAddRows(elems<float>(gc), elems<int64_t>(idc), mutableElems<float>(acc), idc.numel(),
                   num, dim, bc.defined() ? elems<float>(bc) : nullptr);
  }
  if (meta.dtype == ct) return acc;
  Tensor y = detail::makeTensor(meta.shape, meta.dtype);
  copyInto(y, acc);
  return y;
}

} // namespace

void embeddingBackwardInto(const Tensor &acc, const Tensor &grad, const Tensor &ids) {
  if (!acc.is_contiguous() || !acc.device().is_cpu() || acc.dim() != 2 ||
      (acc.dtype() != DType::f32 && acc.dtype() != DType::f64)) {
    throw Error("embedding_backward into a base: the base must be a contiguous f32 or f64 [num, "
                "dim] CPU tensor (internal error)");
  }
  const int64_t num = acc.size(0), dim = acc.size(1);
  Tensor idc = checkedIds(ids, num);
  Tensor gc = contiguousAs(grad, acc.dtype());
  if (gc.numel() != idc.numel() * dim) {
    throw Error("embedding_backward into a base: " + std::to_string(gc.numel()) +
                " gradient elements for " + std::to_string(idc.numel()) + " ids of " +
                std::to_string(dim) + " (internal error)");
  }
  if (acc.dtype() == DType::f64) {
    auto *out = static_cast<double *>(acc.data_ptr());
    scatterAddRows(elems<double>(gc), elems<int64_t>(idc), out, idc.numel(), num, dim, out);
  } else {
    auto *out = static_cast<float *>(acc.data_ptr());
    scatterAddRows(elems<float>(gc), elems<int64_t>(idc), out, idc.numel(), num, dim, out);
  }
}

namespace {

// ---- scaled dot-product attention --------------------------------------------------------

struct AttnSpec {
  int64_t batches = 1, lq = 0, lk = 0, d = 0, dv = 0;
  bool causal = false;
};

/// One query row: o = softmax(q k^T * scale) v over the visible keys.
template <class C>
void attendRow(const C *q, const C *k, const C *v, C *o, int64_t visible, const AttnSpec &s,
               C *scores) {
  C scale = static_cast<C>(1.0 / std::sqrt(static_cast<double>(s.d)));
  C mx = -std::numeric_limits<C>::infinity();
  for (int64_t j = 0; j < visible; ++j) {
    const C *kj = k + j * s.d;
    C dot = 0;
#pragma omp simd reduction(+ : dot)
    for (int64_t t = 0; t < s.d; ++t) dot += q[t] * kj[t];
    scores[j] = dot * scale;
    mx = std::max(mx, scores[j]);
  }
  C sum = 0;
  for (int64_t j = 0; j < visible; ++j) {
    scores[j] = std::exp(scores[j] - mx);
    sum += scores[j];
  }
  std::fill(o, o + s.dv, C(0));
  for (int64_t j = 0; j < visible; ++j) {
    C p = scores[j] / sum;
    const C *vj = v + j * s.dv;
#pragma omp simd
    for (int64_t t = 0; t < s.dv; ++t) o[t] += p * vj[t];
  }
}

/// o [B, Lq, Dv] = sdpa(q [B, Lq, D], k [B, Lk, D], v [B, Lk, Dv]), all contiguous in C.
template <class C> void attention(const C *q, const C *k, const C *v, C *o, const AttnSpec &s) {
  int64_t rows = s.batches * s.lq;
#pragma omp parallel if (rows * s.lk * (s.d + s.dv) > kParallelWork)
  {
    std::vector<C> scores(static_cast<size_t>(s.lk));
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      int64_t b = r / s.lq, i = r % s.lq;
      int64_t visible = s.causal ? std::min(i + 1, s.lk) : s.lk;
      attendRow(q + r * s.d, k + b * s.lk * s.d, v + b * s.lk * s.dv, o + r * s.dv, visible, s,
                scores.data());
    }
  }
}

Tensor runSdpa(const std::vector<Tensor> &in, const Attrs &a, const TensorMeta &meta) {
  const Tensor &q = in[0], &k = in[1], &v = in[2];
  if (!isFloating(meta.dtype)) {
    throw Error("sdpa: dtype " + std::string(dtypeName(meta.dtype)) +
                " is not supported (floating dtypes only)");
  }
  AttnSpec s{1, q.size(-2), k.size(-2), q.size(-1), v.size(-1), a.causal};
  for (int d = 0; d + 2 < q.dim(); ++d) s.batches *= q.size(d);
  DType ct = meta.dtype == DType::f64 ? DType::f64 : DType::f32;
  Tensor qc = contiguousAs(q, ct), kc = contiguousAs(k, ct), vc = contiguousAs(v, ct);
  Tensor y = detail::makeTensor(meta.shape, meta.dtype);
  Tensor o = meta.dtype == ct ? y : detail::makeTensor(meta.shape, ct);
  if (ct == DType::f64) {
    attention(elems<double>(qc), elems<double>(kc), elems<double>(vc), mutableElems<double>(o), s);
  } else {
    attention(elems<float>(qc), elems<float>(kc), elems<float>(vc), mutableElems<float>(o), s);
  }
  if (o.impl() != y.impl()) copyInto(y, o);
  return y;
}

} // namespace

Tensor runNn(OpKind op, const std::vector<Tensor> &in, const Attrs &a, const TensorMeta &out) {
  switch (op) {
  case OpKind::layer_norm:
  case OpKind::rms_norm:
    return runNorm(op, in, a, out);
  case OpKind::embedding:
    return runEmbedding(in[0], in[1], out);
  case OpKind::embedding_backward:
    return runEmbeddingBackward(in, out);
  case OpKind::conv2d_backward_input:
  case OpKind::conv2d_backward_weight:
    return runConv2dBackward(op, in, a, out);
  case OpKind::sdpa:
    return runSdpa(in, a, out);
  case OpKind::check_target:
    return runCheckTarget(in[0], a);
  case OpKind::linear_ce_pick:
  case OpKind::linear_ce_pick_backward:
    return runLinearCePick(op, in, out);
    RCJIT_OP_CASES(Source, Unary, Binary, Compare, Where, Reduce, Normalize, Matmul, View, Copy,
                   Collective)
    break;
  }
  assert(false && "runNn: not an Nn-category op");
  throw Error("runNn: op " + std::string(opName(op)) + " is not an nn op");
}

} // namespace rcjit::eager
