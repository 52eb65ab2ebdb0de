// The eager target's elementwise kernels (unary, cast, binary, compare, where) and copyInto.
#include <cassert>
#include <cmath>
#include <cstring>
#include <string>
#include <type_traits>

#include "targets/eager/Eager.h"
#include "targets/eager/Iter.h"
#include "tracer/OpCases.h"

namespace rcjit::eager {
namespace {

using detail::TensorImpl;

template <class C> constexpr bool kFloat = std::is_floating_point_v<C>;

/// f(x) in C for floating C; through double (then truncated) for integer C, which the
/// callers never request for transcendental ops but the templates still instantiate.
template <class C, class F> RCJIT_ALWAYS_INLINE C viaFloat(C x, F f) {
  if constexpr (kFloat<C>) {
    return f(x);
  } else {
    return static_cast<C>(f(static_cast<double>(x)));
  }
}

template <class C> RCJIT_ALWAYS_INLINE C sigmoidC(C x) { return C(1) / (C(1) + expC(-x)); }
template <class C> RCJIT_ALWAYS_INLINE C tanhC(C x) { return std::tanh(x); }
template <> RCJIT_ALWAYS_INLINE float tanhC(float x) { return fastTanh(x); }
template <class C> RCJIT_ALWAYS_INLINE C erfC(C x) { return std::erf(x); }
template <> RCJIT_ALWAYS_INLINE float erfC(float x) { return fastErf(x); }
// 0 where 1 + erf(x/sqrt 2) is 0 in C's precision (as compiled kernels do): gelu(-inf) is
// 0, not -inf * 0; NaN compares false and propagates.
template <class C> RCJIT_ALWAYS_INLINE C geluC(C x) {
  const C zeroBelow = sizeof(C) == 4 ? C(-5.65685424949238) : C(-40);
  const C g = C(0.5) * x * (C(1) + erfC(x * C(0.70710678118654752440)));
  return x <= zeroBelow ? C(0) : g;
}

// ---- inner loops: one run of the innermost dim; `s` are byte strides, out is contiguous

template <class T> T &at(char *p, int64_t stride, int64_t i) {
  return *reinterpret_cast<T *>(p + i * stride);
}

template <DType DO, DType DI, class F>
RCJIT_FLATTEN void unaryRun(char *const *p, const int64_t *s, int64_t n, F f) {
  using SO = typename Elem<DO>::S;
  using SI = typename Elem<DI>::S;
  auto *o = reinterpret_cast<SO *>(p[0]);
  if (s[1] == static_cast<int64_t>(sizeof(SI))) {
    const auto *a = reinterpret_cast<const SI *>(p[1]);
    for (int64_t i = 0; i < n; ++i) o[i] = Elem<DO>::store(f(Elem<DI>::load(a[i])));
    return;
  }
  for (int64_t i = 0; i < n; ++i) {
    at<SO>(p[0], s[0], i) = Elem<DO>::store(f(Elem<DI>::load(at<SI>(p[1], s[1], i))));
  }
}

template <DType DO, DType DI, class F>
RCJIT_FLATTEN void binaryRun(char *const *p, const int64_t *s, int64_t n, F f) {
  using SI = typename Elem<DI>::S;
  using EI = Elem<DI>;
  constexpr auto z = static_cast<int64_t>(sizeof(SI));
  auto *o = reinterpret_cast<typename Elem<DO>::S *>(p[0]);
  const auto *a = reinterpret_cast<const SI *>(p[1]);
  const auto *b = reinterpret_cast<const SI *>(p[2]);
  if (s[1] == z && s[2] == z) {
    for (int64_t i = 0; i < n; ++i) o[i] = Elem<DO>::store(f(EI::load(a[i]), EI::load(b[i])));
  } else if (s[1] == z && s[2] == 0) {
    const auto bv = EI::load(*b);
    for (int64_t i = 0; i < n; ++i) o[i] = Elem<DO>::store(f(EI::load(a[i]), bv));
  } else if (s[1] == 0 && s[2] == z) {
    const auto av = EI::load(*a);
    for (int64_t i = 0; i < n; ++i) o[i] = Elem<DO>::store(f(av, EI::load(b[i])));
  } else {
    for (int64_t i = 0; i < n; ++i) {
      o[i] = Elem<DO>::store(f(EI::load(at<SI>(p[1], s[1], i)), EI::load(at<SI>(p[2], s[2], i))));
    }
  }
}

template <class S> RCJIT_FLATTEN void whereRun(char *const *p, const int64_t *s, int64_t n) {
  constexpr auto z = static_cast<int64_t>(sizeof(S));
  auto *o = reinterpret_cast<S *>(p[0]);
  if (s[1] == 1 && s[2] == z && s[3] == z) {
    const auto *c = reinterpret_cast<const uint8_t *>(p[1]);
    const auto *a = reinterpret_cast<const S *>(p[2]);
    const auto *b = reinterpret_cast<const S *>(p[3]);
    for (int64_t i = 0; i < n; ++i) o[i] = c[i] ? a[i] : b[i];
    return;
  }
  for (int64_t i = 0; i < n; ++i) {
    o[i] = at<uint8_t>(p[1], s[1], i) ? at<S>(p[2], s[2], i) : at<S>(p[3], s[3], i);
  }
}

/// Copies runs of raw elements of size sizeof(S) (same-dtype copies of any layout).
template <class S> void copyRun(char *const *p, const int64_t *s, int64_t n) {
  constexpr auto z = static_cast<int64_t>(sizeof(S));
  if (s[0] == z && s[1] == z) {
    std::memcpy(p[0], p[1], static_cast<size_t>(n * z));
  } else if (s[1] == 0) {
    const S v = *reinterpret_cast<const S *>(p[1]);
    for (int64_t i = 0; i < n; ++i) at<S>(p[0], s[0], i) = v;
  } else {
    for (int64_t i = 0; i < n; ++i) at<S>(p[0], s[0], i) = at<S>(p[1], s[1], i);
  }
}

// ---- drivers: build the iteration over the output's shape and run a loop per dtype

template <int N> StridedIter<N> iterFor(const Tensor &out, const std::vector<Tensor> &in) {
  const TensorImpl &o = *out.impl();
  std::array<char *, N> base{o.ptr()};
  std::array<Shape, N> strides{broadcastByteStrides(o, o.shape)};
  for (int k = 1; k < N; ++k) {
    base[k] = in[k - 1].impl()->ptr();
    strides[k] = broadcastByteStrides(*in[k - 1].impl(), o.shape);
  }
  return StridedIter<N>(o.shape, base, strides);
}

/// out = f(in[0]) for a functor generic over the compute type (same dtype in and out).
template <class F> void runUnary(const Tensor &out, const std::vector<Tensor> &in, F f) {
  assert(in[0].dtype() == out.dtype());
  const auto it = iterFor<2>(out, in);
  dispatchDType(out.dtype(), [&]<DType D>() {
    it.forEach([&](char *const *p, const int64_t *s, int64_t n) {
      unaryRun<D, D>(p, s, n, [&](typename Elem<D>::C x) { return f(x); });
    });
  });
}

void runCast(const Tensor &out, const Tensor &in) {
  const auto it = iterFor<2>(out, {in});
  dispatchDType(out.dtype(), [&]<DType DO>() {
    dispatchDType(in.dtype(), [&]<DType DI>() {
      it.forEach([&](char *const *p, const int64_t *s, int64_t n) {
        unaryRun<DO, DI>(p, s, n, [](typename Elem<DI>::C x) { return convertTo<DO>(x); });
      });
    });
  });
}

/// out = f(a, b); out's dtype is the inputs' (Binary) or boolean (Compare, `Cmp`).
template <bool Cmp, class F> void runBinary(const Tensor &out, const std::vector<Tensor> &in, F f) {
  assert(in[0].dtype() == in[1].dtype());
  const auto it = iterFor<3>(out, in);
  dispatchDType(in[0].dtype(), [&]<DType D>() {
    constexpr DType DO = Cmp ? DType::boolean : D;
    it.forEach([&](char *const *p, const int64_t *s, int64_t n) { binaryRun<DO, D>(p, s, n, f); });
  });
}

void runWhere(const Tensor &out, const std::vector<Tensor> &in) {
  assert(in[0].dtype() == DType::boolean && in[1].dtype() == out.dtype());
  const auto it = iterFor<4>(out, in);
  dispatchDType(out.dtype(), [&]<DType D>() {
    it.forEach([&](char *const *p, const int64_t *s, int64_t n) {
      whereRun<typename Elem<D>::S>(p, s, n);
    });
  });
}

// Unary ops computed in a floating compute type (integer inputs go through double).
#define RCJIT_FLOAT_FN(Name, expr)                                                                 \
  struct Name {                                                                                    \
    template <class C> C operator()(C x) const {                                                   \
      return viaFloat(x, [](auto v) { return decltype(v)(expr); });                                \
    }                                                                                              \
  };
RCJIT_FLOAT_FN(ExpFn, expC(v))
RCJIT_FLOAT_FN(LogFn, std::log(v))
RCJIT_FLOAT_FN(SqrtFn, std::sqrt(v))
RCJIT_FLOAT_FN(RsqrtFn, decltype(v)(1) / std::sqrt(v))
RCJIT_FLOAT_FN(ReciprocalFn, decltype(v)(1) / v)
RCJIT_FLOAT_FN(TanhFn, tanhC(v))
RCJIT_FLOAT_FN(SigmoidFn, sigmoidC(v))
RCJIT_FLOAT_FN(GeluFn, geluC(v))
RCJIT_FLOAT_FN(SiluFn, v *sigmoidC(v))
RCJIT_FLOAT_FN(ErfFn, std::erf(v))
RCJIT_FLOAT_FN(SinFn, std::sin(v))
RCJIT_FLOAT_FN(CosFn, std::cos(v))
#undef RCJIT_FLOAT_FN

struct NegFn {
  template <class C> C operator()(C x) const { return static_cast<C>(-x); }
};
struct AbsFn {
  template <class C> C operator()(C x) const { return static_cast<C>(std::abs(x)); }
};
struct ReluFn {
  template <class C> C operator()(C x) const { return x < C(0) ? C(0) : x; } // keeps NaN
};
struct MaxFn {
  template <class C> C operator()(C a, C b) const { return nanMax(a, b); }
};
struct MinFn {
  template <class C> C operator()(C a, C b) const { return nanMin(a, b); }
};
struct DivFn {
  template <class C> C operator()(C a, C b) const {
    return viaFloat(a, [b](auto v) { return v / decltype(v)(b); });
  }
};
struct PowFn {
  template <class C> C operator()(C a, C b) const {
    return viaFloat(a, [b](auto v) { return std::pow(v, decltype(v)(b)); });
  }
};

/// Runs the elementwise op `op` into the fresh contiguous tensor `r`.
void runByOp(OpKind op, const Tensor &r, const std::vector<Tensor> &in) {
  switch (op) {
  case OpKind::neg:
    return runUnary(r, in, NegFn{});
  case OpKind::abs:
    return runUnary(r, in, AbsFn{});
  case OpKind::exp:
    return runUnary(r, in, ExpFn{});
  case OpKind::log:
    return runUnary(r, in, LogFn{});
  case OpKind::sqrt:
    return runUnary(r, in, SqrtFn{});
  case OpKind::rsqrt:
    return runUnary(r, in, RsqrtFn{});
  case OpKind::reciprocal:
    return runUnary(r, in, ReciprocalFn{});
  case OpKind::tanh:
    return runUnary(r, in, TanhFn{});
  case OpKind::sigmoid:
    return runUnary(r, in, SigmoidFn{});
  case OpKind::relu:
    return runUnary(r, in, ReluFn{});
  case OpKind::gelu:
    return runUnary(r, in, GeluFn{});
  case OpKind::silu:
    return runUnary(r, in, SiluFn{});
  case OpKind::erf:
    return runUnary(r, in, ErfFn{});
  case OpKind::sin:
    return runUnary(r, in, SinFn{});
  case OpKind::cos:
    return runUnary(r, in, CosFn{});
  case OpKind::cast:
    return runCast(r, in[0]);
  case OpKind::add:
    return runBinary<false>(r, in, [](auto a, auto b) { return a + b; });
  case OpKind::sub:
    return runBinary<false>(r, in, [](auto a, auto b) { return a - b; });
  case OpKind::mul:
    return runBinary<false>(r, in, [](auto a, auto b) { return a * b; });
  case OpKind::div:
    return runBinary<false>(r, in, DivFn{});
  case OpKind::pow:
    return runBinary<false>(r, in, PowFn{});
  case OpKind::maximum:
    return runBinary<false>(r, in, MaxFn{});
  case OpKind::minimum:
    return runBinary<false>(r, in, MinFn{});
  case OpKind::eq:
    return runBinary<true>(r, in, [](auto a, auto b) { return a == b; });
  case OpKind::ne:
    return runBinary<true>(r, in, [](auto a, auto b) { return a != b; });
  case OpKind::lt:
    return runBinary<true>(r, in, [](auto a, auto b) { return a < b; });
  case OpKind::le:
    return runBinary<true>(r, in, [](auto a, auto b) { return a <= b; });
  case OpKind::gt:
    return runBinary<true>(r, in, [](auto a, auto b) { return a > b; });
  case OpKind::ge:
    return runBinary<true>(r, in, [](auto a, auto b) { return a >= b; });
  case OpKind::where:
    return runWhere(r, in);
    RCJIT_OP_CASES(Source, Reduce, Normalize, Matmul, Nn, View, Copy, Collective)
    break;
  }
  throw Error("eager::runElementwise: '" + std::string(opName(op)) + "' is not an elementwise op");
}

} // namespace

Tensor runElementwise(OpKind op, const std::vector<Tensor> &in, const TensorMeta &out) {
  Tensor result = detail::makeTensor(out.shape, out.dtype);
  if (result.numel() > 0) runByOp(op, result, in);
  return result;
}

void addInto(const Tensor &acc, const Tensor &g) {
  assert(acc.dtype() == g.dtype() && acc.shape() == g.shape() && acc.is_contiguous());
  if (acc.numel() > 0) runByOp(OpKind::add, acc, {acc, g}); // reads each element, then writes it
}

void copyInto(const Tensor &dst, const Tensor &src) {
  const TensorImpl &d = *dst.impl();
  const TensorImpl &s = *src.impl();
  if (d.numel() == 0) return;
  if (d.dtype == s.dtype && d.shape == s.shape && detail::isContiguous(d.shape, d.strides) &&
      detail::isContiguous(s.shape, s.strides)) {
    const int64_t total = d.numel() * static_cast<int64_t>(dtypeSize(d.dtype));
    const int64_t chunks = parallelChunks(d.numel(), d.numel());
    parallelFor(chunks, d.numel(), [&](int64_t c) {
      const int64_t b = total * c / chunks;
      const int64_t e = total * (c + 1) / chunks;
      std::memcpy(d.ptr() + b, s.ptr() + b, static_cast<size_t>(e - b));
    });
    return;
  }
  const StridedIter<2> it(d.shape, {d.ptr(), s.ptr()},
                          {broadcastByteStrides(d, d.shape), broadcastByteStrides(s, d.shape)});
  if (d.dtype == s.dtype) {
    dispatchDType(d.dtype, [&]<DType D>() {
      it.forEach([](char *const *p, const int64_t *st, int64_t n) {
        copyRun<typename Elem<D>::S>(p, st, n);
      });
    });
    return;
  }
  dispatchDType(d.dtype, [&]<DType DO>() {
    dispatchDType(s.dtype, [&]<DType DI>() {
      it.forEach([](char *const *p, const int64_t *st, int64_t n) {
        unaryRun<DO, DI>(p, st, n, [](typename Elem<DI>::C x) { return convertTo<DO>(x); });
      });
    });
  });
}

} // namespace rcjit::eager
