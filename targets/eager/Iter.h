// Strided N-d iteration for the eager kernels, with the element traits and math they share.
//
// StridedIter walks one index space shared by several operands, each with its own byte
// strides (0 where it broadcasts). Size-1 dims are dropped and dims that are contiguous for
// every operand merged, so an all-contiguous op becomes one flat loop. The kernel sees runs
// of the innermost dim: (operand pointers, their innermost byte strides, run length).
#pragma once
#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include <omp.h>
#if defined(__F16C__)
#include <immintrin.h>
#endif

#include <rcjit/Types.h>

#include "tracer/Half.h"
#include "tracer/TensorImpl.h"

namespace rcjit::eager {

/// Forces inlining of the per-element helpers: the kernels' translation units are large
/// enough that GCC otherwise leaves some out of line, which stops the loops vectorizing.
#define RCJIT_ALWAYS_INLINE [[gnu::always_inline]] inline
/// Inlines every call inside a kernel's inner loop, for the same reason.
#define RCJIT_FLATTEN [[gnu::flatten]]
#define RCJIT_FLATTEN_LAMBDA __attribute__((flatten))

/// Elementwise work below this many elements runs on one thread.
inline constexpr int64_t kParallelGrain = 32768;

/// Byte strides of `t` broadcast to `shape` (trailing dims aligned, 0 on broadcast dims).
inline Shape broadcastByteStrides(const detail::TensorImpl &t, const Shape &shape) {
  const auto esize = static_cast<int64_t>(dtypeSize(t.dtype));
  Shape out(shape.size(), 0);
  const size_t lead = shape.size() - t.shape.size();
  for (size_t d = 0; d < t.shape.size(); ++d) {
    if (t.shape[d] != 1) out[lead + d] = t.strides[d] * esize;
  }
  return out;
}

/// How many threads to split `work` elements over: 1 below kParallelGrain or inside a
/// parallel region.
inline int64_t parallelChunks(int64_t work, int64_t maxChunks) {
  if (work < kParallelGrain || omp_in_parallel()) return 1;
  const int64_t byWork = work / (kParallelGrain / 2);
  return std::max<int64_t>(
      1, std::min({byWork, maxChunks, static_cast<int64_t>(omp_get_max_threads())}));
}

/// Runs f(i) for i in [0, n), in parallel when `work` (total elements touched) is large.
template <class F> void parallelFor(int64_t n, int64_t work, F &&f) {
  if (parallelChunks(work, n) <= 1) {
    for (int64_t i = 0; i < n; ++i) f(i);
    return;
  }
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) f(i);
}

/// Iteration over the shared index space of N operands. Not thread-safe to construct
/// concurrently with writes to the operands' geometry; forRange/forEach are const.
template <int N> class StridedIter {
public:
  /// `strides[k]` are operand k's byte strides over `shape` (same rank as `shape`).
  StridedIter(const Shape &shape, const std::array<char *, N> &base,
              const std::array<Shape, N> &strides)
      : base_(base) {
    numel_ = 1;
    for (int64_t s : shape) numel_ *= s;
    for (size_t d = 0; d < shape.size(); ++d) {
      if (shape[d] != 1) addDim(shape[d], strides, d);
    }
    if (shape_.empty()) {
      shape_.push_back(1);
      for (auto &s : strides_) s.push_back(0);
    }
  }

  int64_t numel() const { return numel_; }
  int rank() const { return static_cast<int>(shape_.size()); }
  const Shape &shape() const { return shape_; }
  const Shape &strides(int k) const { return strides_[k]; }

  /// Calls f(ptrs, innerStrides, n) for each run of the innermost dim covering the
  /// row-major element range [begin, end).
  template <class F> void forRange(int64_t begin, int64_t end, F &&f) const {
    const int r = rank();
    std::vector<int64_t> idx(r);
    std::array<char *, N> p = base_;
    std::array<int64_t, N> inner;
    int64_t rem = begin;
    for (int d = r - 1; d >= 0; --d) {
      idx[d] = rem % shape_[d];
      rem /= shape_[d];
      for (int k = 0; k < N; ++k) p[k] += idx[d] * strides_[k][d];
    }
    for (int k = 0; k < N; ++k) inner[k] = strides_[k][r - 1];
    for (int64_t pos = begin; pos < end;) {
      const int64_t n = std::min(shape_[r - 1] - idx[r - 1], end - pos);
      f(p.data(), inner.data(), n);
      pos += n;
      idx[r - 1] += n;
      for (int k = 0; k < N; ++k) p[k] += n * inner[k];
      for (int d = r - 1; d > 0 && idx[d] == shape_[d]; --d) {
        idx[d] = 0;
        ++idx[d - 1];
        for (int k = 0; k < N; ++k) p[k] += strides_[k][d - 1] - shape_[d] * strides_[k][d];
      }
    }
  }

  /// forRange over every element, split over OpenMP threads when there are many.
  template <class F> void forEach(F &&f) const {
    const int64_t chunks = parallelChunks(numel_, numel_);
    if (chunks <= 1) {
      forRange(0, numel_, f);
      return;
    }
    auto bound = [&](int64_t c) {
      return c == chunks ? numel_ : (numel_ * c / chunks) & ~int64_t{63};
    };
#pragma omp parallel for schedule(static)
    for (int64_t c = 0; c < chunks; ++c) forRange(bound(c), bound(c + 1), f);
  }

private:
  void addDim(int64_t size, const std::array<Shape, N> &strides, size_t d) {
    bool merge = !shape_.empty();
    for (int k = 0; k < N && merge; ++k) merge = strides_[k].back() == strides[k][d] * size;
    if (merge) {
      shape_.back() *= size;
      for (int k = 0; k < N; ++k) strides_[k].back() = strides[k][d];
      return;
    }
    shape_.push_back(size);
    for (int k = 0; k < N; ++k) strides_[k].push_back(strides[k][d]);
  }

  std::array<char *, N> base_;
  Shape shape_;
  std::array<Shape, N> strides_;
  int64_t numel_ = 0;
};

/// Storage type S and compute type C of each dtype; load/store convert between them
/// (f16/bf16 compute in float and round once on store; bool stores `value != 0`).
template <DType D> struct Elem;
template <> struct Elem<DType::f32> {
  using S = float;
  using C = float;
  static C load(S v) { return v; }
  static S store(C v) { return v; }
};
template <> struct Elem<DType::f64> {
  using S = double;
  using C = double;
  static C load(S v) { return v; }
  static S store(C v) { return v; }
};
template <> struct Elem<DType::f16> {
  using S = uint16_t;
  using C = float;
#if defined(__F16C__) // the hardware conversions (round to nearest even, like Half.h)
  static C load(S v) { return _cvtsh_ss(v); }
  static S store(C v) { return _cvtss_sh(v, _MM_FROUND_TO_NEAREST_INT); }
#else
  static C load(S v) { return halfToFloat(v); }
  static S store(C v) { return floatToHalf(v); }
#endif
};
template <> struct Elem<DType::bf16> {
  using S = uint16_t;
  using C = float;
  static C load(S v) { return bf16ToFloat(v); }
  static S store(C v) { return floatToBf16(v); }
};
template <> struct Elem<DType::i32> {
  using S = int32_t;
  using C = int32_t;
  static C load(S v) { return v; }
  static S store(C v) { return v; }
};
template <> struct Elem<DType::i64> {
  using S = int64_t;
  using C = int64_t;
  static C load(S v) { return v; }
  static S store(C v) { return v; }
};
template <> struct Elem<DType::boolean> {
  using S = uint8_t;
  using C = int32_t;
  static C load(S v) { return v; }
  static S store(C v) { return v != 0; }
};

/// Calls f.template operator()<D>() with D = `t` (a generic lambda `[&]<DType D>() {...}`).
template <class F> decltype(auto) dispatchDType(DType t, F &&f) {
  switch (t) {
  case DType::f32:
    return f.template operator()<DType::f32>();
  case DType::f64:
    return f.template operator()<DType::f64>();
  case DType::f16:
    return f.template operator()<DType::f16>();
  case DType::bf16:
    return f.template operator()<DType::bf16>();
  case DType::i32:
    return f.template operator()<DType::i32>();
  case DType::i64:
    return f.template operator()<DType::i64>();
  case DType::boolean:
    return f.template operator()<DType::boolean>();
  }
  return f.template operator()<DType::f32>();
}

/// Converts a compute value of one dtype to the compute type of `To` (bool: nonzero).
template <DType To, class C> RCJIT_ALWAYS_INLINE typename Elem<To>::C convertTo(C v) {
  if constexpr (To == DType::boolean) {
    return v != C(0);
  } else {
    return static_cast<typename Elem<To>::C>(v);
  }
}

template <class C> RCJIT_ALWAYS_INLINE bool isNan(C v) {
  if constexpr (std::is_floating_point_v<C>) {
    return std::isnan(v);
  } else {
    return false;
  }
}

/// max/min that propagate NaN (PyTorch's maximum/minimum/amax).
template <class C> RCJIT_ALWAYS_INLINE C nanMax(C a, C b) { return ((a > b) | isNan(a)) ? a : b; }
template <class C> RCJIT_ALWAYS_INLINE C nanMin(C a, C b) { return ((a < b) | isNan(a)) ? a : b; }

/// exp(x) in float, branch-free so loops over it vectorize: Cody-Waite reduction and a
/// degree-6 polynomial (Cephes expf), within 2 ulp, subnormal results included.
RCJIT_ALWAYS_INLINE float fastExp(float x) {
  const float t = std::clamp(x, -104.0f, 88.7228394f);
  const float kRound = 12582912.0f; // 1.5 * 2^23: adding it rounds to an integer
  const float n = (t * 1.44269504088896341f + kRound) - kRound;
  float r = t - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float y = p * r * r + r + 1.0f;
  // 2^n as two normal factors: n spans [-150, 128].
  const auto ni = static_cast<int32_t>(n);
  const int32_t half = ni >> 1;
  const float s1 = std::bit_cast<float>(static_cast<uint32_t>(half + 127) << 23);
  const float s2 = std::bit_cast<float>(static_cast<uint32_t>(ni - half + 127) << 23);
  float res = y * s1 * s2;
  res = x > 88.7228394f ? std::numeric_limits<float>::infinity() : res;
  res = x < -104.0f ? 0.0f : res;
  return std::isnan(x) ? x : res;
}

/// erf(x) in float, branch-free (Abramowitz-Stegun 7.1.26, as PyTorch's vectorized erf):
/// absolute error below 2e-7.
RCJIT_ALWAYS_INLINE float fastErf(float x) {
  const float a = std::abs(x);
  const float t = 1.0f / (1.0f + 0.3275911f * a);
  float p = 1.061405429f;
  p = p * t - 1.453152027f;
  p = p * t + 1.421413741f;
  p = p * t - 0.284496736f;
  p = p * t + 0.254829592f;
  const float y = 1.0f - p * t * fastExp(-a * a);
  return std::copysign(y, x);
}

/// tanh(x) in float, branch-free (Cephes tanhf): an odd polynomial below |x| = 0.625,
/// 1 - 2 / (exp(2|x|) + 1) with x's sign above; within 2 ulp of std::tanh, NaN kept.
RCJIT_ALWAYS_INLINE float fastTanh(float x) {
  const float a = std::abs(x);
  const float z = x * x;
  float p = -5.70498872745e-3f;
  p = p * z + 2.06390887954e-2f;
  p = p * z - 5.37397155531e-2f;
  p = p * z + 1.33314422036e-1f;
  p = p * z - 3.33332819422e-1f;
  const float small = std::copysign(p * z * x + x, x); // (-0 stays -0)
  const float large = std::copysign(1.0f - 2.0f / (fastExp(2.0f * a) + 1.0f), x);
  return a < 0.625f ? small : large; // NaN: large, whose exp and division keep it
}

/// exp in the kernel's compute type (float: fastExp; others: std::exp).
RCJIT_ALWAYS_INLINE float expC(float x) { return fastExp(x); }
RCJIT_ALWAYS_INLINE double expC(double x) { return std::exp(x); }

} // namespace rcjit::eager
