// The eager target's reductions (sum, mean, amax, argmax) and softmax / log_softmax.
//
// Every reduction runs on a contiguous [outer, reduced, inner] block: a contiguous input
// whose reduced dims are adjacent is used in place; any other input is first copied with
// its kept dims first and its reduced dims last. inner == 1 reduces contiguous rows
// (several accumulators, split over threads when rows are few and long); inner > 1
// accumulates whole column blocks at once so the loads stay contiguous.
#include <cassert>
#include <limits>
#include <string>
#include <type_traits>

#include "targets/eager/Eager.h"
#include "targets/eager/Iter.h"
#include "tracer/CheckedSize.h"
#include "tracer/OpCases.h"

namespace rcjit::eager {
namespace {

using detail::TensorImpl;

/// Columns accumulated together by the inner > 1 kernels.
constexpr int64_t kColBlock = 256;
/// Independent accumulators of the row kernels.
constexpr int kLanes = 16;

/// A contiguous reduction as [outer, reduced, inner].
struct Block3 {
  int64_t outer = 1;
  int64_t reduced = 1;
  int64_t inner = 1;
};

/// The [O, R, I] view of a contiguous tensor whose reduced dims are adjacent once size-1
/// dims are ignored; false when they are not.
bool asBlock3(const Shape &shape, const std::vector<bool> &red, Block3 &b) {
  int phase = 0; // 0: outer kept dims, 1: reduced dims, 2: inner kept dims
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    if (red[d]) {
      if (phase == 2) return false;
      phase = 1;
      b.reduced = detail::checkedMul(b.reduced, shape[d], "reduce", "block size");
    } else {
      if (phase == 1) phase = 2;
      int64_t &n = phase == 0 ? b.outer : b.inner;
      n = detail::checkedMul(n, shape[d], "reduce", "block size");
    }
  }
  return true;
}

/// x's elements, converted to `dt`, in a new contiguous tensor with dims ordered by `perm`.
Tensor permutedCopy(const Tensor &x, const std::vector<int64_t> &perm, DType dt) {
  const TensorImpl &xi = *x.impl();
  Shape shape;
  Shape strides;
  for (int64_t p : perm) {
    shape.push_back(xi.shape[p]);
    strides.push_back(xi.strides[p]);
  }
  Tensor out = detail::makeTensor(shape, dt);
  copyInto(out, detail::makeView(x, shape, strides, xi.offset));
  return out;
}

/// x as a contiguous tensor of dtype `dt` (x itself when it already is one).
Tensor denseAs(const Tensor &x, DType dt) {
  const TensorImpl &xi = *x.impl();
  if (xi.dtype == dt && detail::isContiguous(xi.shape, xi.strides)) return x;
  std::vector<int64_t> perm(xi.shape.size());
  for (size_t d = 0; d < perm.size(); ++d) perm[d] = static_cast<int64_t>(d);
  return permutedCopy(x, perm, dt);
}

template <DType D> using S = typename Elem<D>::S;
template <DType D> using C = typename Elem<D>::C;
template <DType D> constexpr bool kFloatD = std::is_floating_point_v<C<D>>;

/// sum / mean: accumulates in double (floating inputs) or int64 (integers, bool).
template <DType D> struct SumOp {
  using Acc = std::conditional_t<kFloatD<D>, double, int64_t>;
  static Acc init() { return 0; }
  static Acc step(Acc a, S<D> v) { return a + static_cast<Acc>(Elem<D>::load(v)); }
  static Acc combine(Acc a, Acc b) { return a + b; }
};

/// amax: NaN propagates.
template <DType D> struct MaxOp {
  using Acc = C<D>;
  static Acc init() {
    if constexpr (kFloatD<D>) return -std::numeric_limits<Acc>::infinity();
    return std::numeric_limits<Acc>::lowest();
  }
  static Acc step(Acc a, S<D> v) { return nanMax(Elem<D>::load(v), a); }
  static Acc combine(Acc a, Acc b) { return nanMax(a, b); }
};

template <class Op> constexpr bool kIsMax = false;
template <DType D> constexpr bool kIsMax<MaxOp<D>> = true;

/// NaN-propagating max of n contiguous floating values (an OpenMP simd reduction: GCC
/// does not vectorize the NaN-aware select on its own).
template <class T> T rowMax(const T *p, int64_t n) {
  T m = -std::numeric_limits<T>::infinity();
  int nan = 0;
#pragma omp simd reduction(max : m) reduction(| : nan)
  for (int64_t i = 0; i < n; ++i) {
    m = p[i] > m ? p[i] : m;
    nan |= std::isnan(p[i]);
  }
  return nan ? std::numeric_limits<T>::quiet_NaN() : m;
}

/// Reduces n contiguous elements with kLanes independent accumulators.
template <class Op, class T> RCJIT_FLATTEN typename Op::Acc reduceRun(const T *p, int64_t n) {
  if constexpr (kIsMax<Op> && std::is_floating_point_v<T>) return rowMax(p, n);
  typename Op::Acc a[kLanes];
  for (auto &v : a) v = Op::init();
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int j = 0; j < kLanes; ++j) a[j] = Op::step(a[j], p[i + j]);
  }
  for (; i < n; ++i) a[0] = Op::step(a[0], p[i]);
  for (int w = kLanes / 2; w > 0; w /= 2) {
    for (int j = 0; j < w; ++j) a[j] = Op::combine(a[j], a[j + w]);
  }
  return a[0];
}

/// out[o] = finish(reduce(x[o, :])) for contiguous rows; long rows split over threads.
template <class Op, class T, class U, class Finish>
void reduceRows(const T *x, const Block3 &b, U *out, Finish finish) {
  const int64_t threads = parallelChunks(b.outer * b.reduced, b.outer * b.reduced);
  int64_t parts = 1;
  if (threads > 1 && b.outer < threads) {
    parts = std::min((threads + b.outer - 1) / b.outer, b.reduced / 4096 + 1);
  }
  std::vector<typename Op::Acc> partial(static_cast<size_t>(b.outer * parts));
  parallelFor(b.outer * parts, b.outer * b.reduced, [&](int64_t t) {
    const int64_t o = t / parts;
    const int64_t lo = b.reduced * (t % parts) / parts;
    const int64_t hi = b.reduced * (t % parts + 1) / parts;
    partial[t] = reduceRun<Op>(x + o * b.reduced + lo, hi - lo);
  });
  for (int64_t o = 0; o < b.outer; ++o) {
    typename Op::Acc acc = partial[o * parts];
    for (int64_t p = 1; p < parts; ++p) acc = Op::combine(acc, partial[o * parts + p]);
    out[o] = finish(acc);
  }
}

/// out[o, i] = finish(reduce(x[o, :, i])), kColBlock columns at a time.
template <class Op, class T, class U, class Finish>
void reduceCols(const T *x, const Block3 &b, U *out, Finish finish) {
  const int64_t blocks = (b.inner + kColBlock - 1) / kColBlock;
  parallelFor(b.outer * blocks, b.outer * b.reduced * b.inner, [&](int64_t t) RCJIT_FLATTEN_LAMBDA {
    const int64_t o = t / blocks;
    const int64_t i0 = (t % blocks) * kColBlock;
    const int64_t len = std::min(kColBlock, b.inner - i0);
    typename Op::Acc acc[kColBlock];
    for (int64_t i = 0; i < len; ++i) acc[i] = Op::init();
    for (int64_t r = 0; r < b.reduced; ++r) {
      const T *row = x + (o * b.reduced + r) * b.inner + i0;
      for (int64_t i = 0; i < len; ++i) acc[i] = Op::step(acc[i], row[i]);
    }
    for (int64_t i = 0; i < len; ++i) out[o * b.inner + i0 + i] = finish(acc[i]);
  });
}

template <class Op, class T, class U, class Finish>
void reduceBlock(const T *x, const Block3 &b, U *out, Finish finish) {
  if (b.inner == 1) {
    reduceRows<Op>(x, b, out, finish);
  } else {
    reduceCols<Op>(x, b, out, finish);
  }
}

/// sum, mean or amax of input dtype D on the block `b` of `src` into `result`.
template <DType D>
void reduceTyped(OpKind op, const Tensor &src, const Block3 &b, const Tensor &result) {
  const auto *x = static_cast<const S<D> *>(src.data_ptr());
  if (op == OpKind::amax) {
    assert(result.dtype() == D);
    auto *out = static_cast<S<D> *>(result.data_ptr());
    reduceBlock<MaxOp<D>>(x, b, out, [](C<D> v) { return Elem<D>::store(v); });
    return;
  }
  if (op == OpKind::mean) {
    assert(result.dtype() == D);
    auto *out = static_cast<S<D> *>(result.data_ptr());
    const double r = static_cast<double>(b.reduced);
    reduceBlock<SumOp<D>>(x, b, out, [r](typename SumOp<D>::Acc v) {
      return Elem<D>::store(static_cast<C<D>>(static_cast<double>(v) / r));
    });
    return;
  }
  constexpr DType DO = kFloatD<D> ? D : DType::i64;
  assert(result.dtype() == DO);
  auto *out = static_cast<S<DO> *>(result.data_ptr());
  reduceBlock<SumOp<D>>(
      x, b, out, [](typename SumOp<D>::Acc v) { return Elem<DO>::store(static_cast<C<DO>>(v)); });
}

Tensor reduceDims(OpKind op, const Tensor &x, const Dims &dims, const TensorMeta &out) {
  Tensor result = detail::makeTensor(out.shape, out.dtype);
  if (result.numel() == 0) return result;
  const TensorImpl &xi = *x.impl();
  std::vector<bool> red(xi.shape.size(), false);
  for (int64_t d : dims) red[static_cast<size_t>(d)] = true;
  Block3 b;
  Tensor src = x;
  if (!detail::isContiguous(xi.shape, xi.strides) || !asBlock3(xi.shape, red, b)) {
    std::vector<int64_t> perm;
    b = Block3{};
    for (size_t d = 0; d < red.size(); ++d) {
      if (red[d]) continue;
      perm.push_back(static_cast<int64_t>(d));
      b.outer = detail::checkedMul(b.outer, xi.shape[d], opName(op), "block size");
    }
    for (int64_t d : dims) {
      perm.push_back(d);
      b.reduced =
          detail::checkedMul(b.reduced, xi.shape[static_cast<size_t>(d)], opName(op), "block size");
    }
    src = permutedCopy(x, perm, xi.dtype);
  }
  dispatchDType(xi.dtype, [&]<DType D>() { reduceTyped<D>(op, src, b, result); });
  return result;
}

/// The [outer, dim, inner] block of a contiguous tensor of shape `shape`.
Block3 blockAround(const Shape &shape, int64_t dim) {
  Block3 b;
  for (size_t d = 0; d < shape.size(); ++d) {
    const auto sd = static_cast<int64_t>(d);
    int64_t &n = sd < dim ? b.outer : sd == dim ? b.reduced : b.inner;
    n = detail::checkedMul(n, shape[d], "reduce", "block size");
  }
  return b;
}

/// True when v should replace best as the running argmax (first max; first NaN wins).
template <class T> bool beats(T v, T best) { return !isNan(best) && (v > best || isNan(v)); }

template <DType D> void argmaxTyped(const S<D> *x, const Block3 &b, int64_t *out) {
  const int64_t blocks = (b.inner + kColBlock - 1) / kColBlock;
  parallelFor(b.outer * blocks, b.outer * b.reduced * b.inner, [&](int64_t t) RCJIT_FLATTEN_LAMBDA {
    const int64_t o = t / blocks;
    const int64_t i0 = (t % blocks) * kColBlock;
    const int64_t len = std::min(kColBlock, b.inner - i0);
    C<D> best[kColBlock];
    int64_t idx[kColBlock] = {};
    const S<D> *base = x + o * b.reduced * b.inner + i0;
    for (int64_t i = 0; i < len && b.reduced > 0; ++i) best[i] = Elem<D>::load(base[i]);
    for (int64_t r = 1; r < b.reduced; ++r) {
      const S<D> *row = base + r * b.inner;
      for (int64_t i = 0; i < len; ++i) {
        const C<D> v = Elem<D>::load(row[i]);
        if (beats(v, best[i])) {
          best[i] = v;
          idx[i] = r;
        }
      }
    }
    for (int64_t i = 0; i < len; ++i) out[o * b.inner + i0 + i] = idx[i];
  });
}

Tensor argmaxDim(const Tensor &x, int64_t dim, const TensorMeta &out) {
  Tensor result = detail::makeTensor(out.shape, out.dtype);
  assert(out.dtype == DType::i64);
  if (result.numel() == 0) return result;
  const Tensor src = denseAs(x, x.dtype());
  const Block3 b = blockAround(src.shape(), dim);
  auto *o = static_cast<int64_t *>(result.data_ptr());
  dispatchDType(src.dtype(), [&]<DType D>() {
    argmaxTyped<D>(static_cast<const S<D> *>(src.data_ptr()), b, o);
  });
  return result;
}

/// Sum of f(i) for i in [0, n) in double, with independent accumulators.
template <class F> double sumLanes(int64_t n, F f) {
  double a[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int j = 0; j < kLanes; ++j) a[j] += static_cast<double>(f(i + j));
  }
  for (; i < n; ++i) a[0] += static_cast<double>(f(i));
  for (int w = kLanes / 2; w > 0; w /= 2) {
    for (int j = 0; j < w; ++j) a[j] += a[j + w];
  }
  return a[0];
}

/// (log_)softmax of one contiguous row in its compute type T; y may alias x.
template <class T> RCJIT_FLATTEN void softmaxRow(const T *x, T *y, int64_t n, bool log) {
  const T mx = rowMax(x, n);
  if (log) {
    const T ls = static_cast<T>(std::log(sumLanes(n, [&](int64_t k) { return expC(x[k] - mx); })));
    for (int64_t k = 0; k < n; ++k) y[k] = x[k] - mx - ls;
    return;
  }
  const double s = sumLanes(n, [&](int64_t k) { return y[k] = expC(x[k] - mx); });
  const T inv = static_cast<T>(1.0 / s);
  for (int64_t k = 0; k < n; ++k) y[k] *= inv;
}

/// Softmax rows of a dtype whose storage is not its compute type, via a float buffer.
template <DType D> void softmaxRowsConverted(const S<D> *x, S<D> *y, const Block3 &b, bool log) {
  parallelFor(b.outer, b.outer * b.reduced, [&](int64_t o) RCJIT_FLATTEN_LAMBDA {
    thread_local std::vector<C<D>> buf;
    buf.resize(static_cast<size_t>(b.reduced));
    const S<D> *xr = x + o * b.reduced;
    for (int64_t k = 0; k < b.reduced; ++k) buf[k] = Elem<D>::load(xr[k]);
    softmaxRow(buf.data(), buf.data(), b.reduced, log);
    for (int64_t k = 0; k < b.reduced; ++k) y[o * b.reduced + k] = Elem<D>::store(buf[k]);
  });
}

/// Softmax over the middle dim of [O, R, I] with I > 1, kColBlock columns at a time.
template <DType D> void softmaxCols(const S<D> *x, S<D> *y, const Block3 &b, bool log) {
  using T = C<D>;
  const int64_t blocks = (b.inner + kColBlock - 1) / kColBlock;
  parallelFor(b.outer * blocks, b.outer * b.reduced * b.inner, [&](int64_t t) RCJIT_FLATTEN_LAMBDA {
    const int64_t i0 = (t % blocks) * kColBlock;
    const int64_t len = std::min(kColBlock, b.inner - i0);
    const int64_t base = (t / blocks) * b.reduced * b.inner + i0;
    auto at = [&](int64_t r, int64_t i) { return Elem<D>::load(x[base + r * b.inner + i]); };
    T m[kColBlock];
    double s[kColBlock] = {};
    for (int64_t i = 0; i < len; ++i) m[i] = -std::numeric_limits<T>::infinity();
    for (int64_t r = 0; r < b.reduced; ++r) {
      for (int64_t i = 0; i < len; ++i) m[i] = nanMax(at(r, i), m[i]);
    }
    for (int64_t r = 0; r < b.reduced; ++r) {
      for (int64_t i = 0; i < len; ++i) s[i] += expC(at(r, i) - m[i]);
    }
    for (int64_t r = 0; r < b.reduced; ++r) {
      for (int64_t i = 0; i < len; ++i) {
        const T v = at(r, i) - m[i];
        const T res = log ? v - static_cast<T>(std::log(s[i])) : expC(v) / static_cast<T>(s[i]);
        y[base + r * b.inner + i] = Elem<D>::store(res);
      }
    }
  });
}

template <DType D>
void softmaxTyped(const Tensor &src, const Tensor &result, const Block3 &b, bool log) {
  if constexpr (kFloatD<D>) {
    const auto *x = static_cast<const S<D> *>(src.data_ptr());
    auto *y = static_cast<S<D> *>(result.data_ptr());
    if (b.inner > 1) {
      softmaxCols<D>(x, y, b, log);
    } else if constexpr (std::is_same_v<S<D>, C<D>>) {
      parallelFor(b.outer, b.outer * b.reduced, [&](int64_t o) {
        softmaxRow(x + o * b.reduced, y + o * b.reduced, b.reduced, log);
      });
    } else {
      softmaxRowsConverted<D>(x, y, b, log);
    }
  } else {
    throw Error("eager::softmax: dtype " + std::string(dtypeName(D)) + " is not floating");
  }
}

Tensor softmaxDim(OpKind op, const Tensor &x, int64_t dim, const TensorMeta &out) {
  Tensor result = detail::makeTensor(out.shape, out.dtype);
  if (result.numel() == 0) return result;
  const Tensor src = denseAs(x, out.dtype);
  const Block3 b = blockAround(src.shape(), dim);
  const bool log = op == OpKind::log_softmax;
  dispatchDType(out.dtype, [&]<DType D>() { softmaxTyped<D>(src, result, b, log); });
  return result;
}

} // namespace

Tensor runReduce(OpKind op, const Tensor &x, const Attrs &a, const TensorMeta &out) {
  switch (op) {
  case OpKind::sum:
  case OpKind::mean:
  case OpKind::amax:
    return reduceDims(op, x, a.dims, out);
  case OpKind::argmax:
    return argmaxDim(x, a.dim, out);
  case OpKind::softmax:
  case OpKind::log_softmax:
    return softmaxDim(op, x, a.dim, out);
    RCJIT_OP_CASES(Source, Unary, Binary, Compare, Where, Matmul, Nn, View, Copy, Collective)
    break;
  }
  throw Error("eager::runReduce: '" + std::string(opName(op)) + "' is not a reduction");
}

} // namespace rcjit::eager
