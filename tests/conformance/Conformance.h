// Shared helpers of the conformance suite: deterministic inputs of any dtype and layout,
// per-dtype tolerances, and the compiled-vs-eager check every conformance test runs.
#pragma once
#include <gtest/gtest.h>
#include <rcjit/rcjit.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "tests/TestUtil.h"

namespace rcjit::conformance {

/// A traced function of the suite: tensors in, tensors out.
using Fn = std::function<std::vector<Tensor>(const std::vector<Tensor> &)>;

/// How an input's elements are laid out in memory (the values are the same either way).
enum class Layout {
  contiguous,
  transposed, // the last two dims are swapped in storage (rank >= 2)
  sliced,     // a window of a wider last dim: an offset and a row stride > the row length
  expanded,   // dim 0 is broadcast from size 1 (stride 0)
};

/// The value domain of an input, chosen so the op under test stays finite.
enum class Values {
  normal,   // standard normal (integers: round(3 * normal))
  positive, // |normal| + 0.5 (integers: 1..)
  nonzero,  // normal with |v| >= 0.25 (integers: never 0)
  smallInt, // integers 0..3 (as the dtype)
  ids,      // integers 0..idRange-1 (indices)
  wide,     // 4 * normal, fractions kept (casts)
};

/// One input of a case: its logical shape, layout, values, and optionally a fixed dtype
/// (otherwise the dtype the case runs in).
struct In {
  Shape shape;
  Layout layout = Layout::contiguous;
  Values values = Values::normal;
  std::optional<DType> dtype = std::nullopt;
  int64_t idRange = 0;
};

inline const char *layoutName(Layout l) {
  switch (l) {
  case Layout::contiguous:
    return "contiguous";
  case Layout::transposed:
    return "transposed";
  case Layout::sliced:
    return "sliced";
  case Layout::expanded:
    return "expanded";
  }
  return "?";
}

inline std::string describe(const Tensor &t) {
  if (!t.defined()) return "undefined";
  std::string s = std::string(dtypeName(t.dtype())) + shapeStr(t.shape());
  if (!t.is_contiguous()) s += "(strided " + shapeStr(t.strides()) + ")";
  return s;
}

inline std::string describe(const std::vector<Tensor> &ts) {
  std::string s;
  for (const Tensor &t : ts) s += (s.empty() ? "" : ", ") + describe(t);
  return s;
}

inline int64_t numelOf(const Shape &s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

/// Deterministic values for `in` in dtype `dt`, laid out as `in.layout` asks.
inline Tensor makeInput(const In &in, DType dt, uint64_t seed) {
  const DType d = in.dtype.value_or(dt);
  Layout layout = in.layout;
  if (in.shape.empty() || (layout == Layout::transposed && in.shape.size() < 2)) {
    layout = Layout::contiguous;
  }
  Shape storage = in.shape;
  switch (layout) {
  case Layout::contiguous:
    break;
  case Layout::transposed:
    std::swap(storage[storage.size() - 1], storage[storage.size() - 2]);
    break;
  case Layout::sliced:
    storage.back() = 2 * storage.back() + 1;
    break;
  case Layout::expanded:
    storage[0] = 1;
    break;
  }
  std::mt19937_64 rng(seed * 0x9E3779B97F4A7C15ull + 17);
  std::normal_distribution<double> normal(0.0, 1.0);
  const bool integral = isIntegral(d) || d == DType::boolean;
  std::vector<double> buf(static_cast<size_t>(numelOf(storage)));
  for (double &v : buf) {
    const double g = normal(rng);
    switch (in.values) {
    case Values::normal:
      v = integral ? std::round(3 * g) : g;
      break;
    case Values::positive:
      v = integral ? std::round(std::abs(3 * g)) + 1 : std::abs(g) + 0.5;
      break;
    case Values::nonzero:
      if (integral) {
        v = std::round(3 * g);
        if (v == 0) v = g < 0 ? -1 : 1;
      } else {
        v = std::abs(g) < 0.25 ? (g < 0 ? -0.25 : 0.25) + g : g;
      }
      break;
    case Values::smallInt:
      v = static_cast<double>(rng() % 4);
      break;
    case Values::ids:
      v = static_cast<double>(rng() % static_cast<uint64_t>(in.idRange));
      break;
    case Values::wide:
      v = 4 * g;
      break;
    }
    if (d == DType::boolean)
      v = (in.values == Values::normal || in.values == Values::wide) ? (g > 0) : (v != 0);
  }
  Tensor t = Tensor::from_blob(buf.data(), storage, DType::f64).clone().to(d);
  switch (layout) {
  case Layout::contiguous:
    return t;
  case Layout::transposed:
    return transpose(t, -1, -2);
  case Layout::sliced:
    return slice(t, -1, 1, 1 + in.shape.back());
  case Layout::expanded:
    return expand(t, in.shape);
  }
  return t;
}

/// Tolerances of a result of dtype `dt`; `scale` widens them for ops that accumulate.
struct Tol {
  double rtol;
  double atol;
};
inline Tol tolFor(DType dt, double scale = 1) {
  switch (dt) {
  case DType::f32:
    return {1e-4 * scale, 1e-5 * scale}; // the contract in API.md
  case DType::f64:
    return {1e-9 * scale, 1e-10 * scale};
  // f16/bf16: compiled code may round to the storage type at other points than eager
  case DType::f16:
    return {1e-2 * scale, 1e-2 * scale};
  case DType::bf16:
    return {1e-2 * scale, 1e-2 * scale};
  default:
    return {0, 0}; // integers and booleans compare exactly
  }
}

/// Compares a compiled result with the eager one: same dtype and shape, and every element
/// within tolerance (NaNs in the same places count as equal).
inline ::testing::AssertionResult sameResult(const Tensor &got, const Tensor &want, double scale) {
  if (got.defined() != want.defined()) return ::testing::AssertionFailure() << "defined() differs";
  if (got.dtype() != want.dtype()) {
    return ::testing::AssertionFailure() << "dtype " << dtypeName(got.dtype()) << " (compiled) vs "
                                         << dtypeName(want.dtype()) << " (eager)";
  }
  if (got.shape() != want.shape()) {
    return ::testing::AssertionFailure() << "shape " << shapeStr(got.shape()) << " (compiled) vs "
                                         << shapeStr(want.shape()) << " (eager)";
  }
  const Tol tol = tolFor(want.dtype(), scale);
  const std::vector<double> g = got.to_vector<double>(), w = want.to_vector<double>();
  int64_t bad = 0, worst = -1;
  double worstErr = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    if (std::isnan(g[i]) && std::isnan(w[i])) continue;
    if (g[i] == w[i]) continue; // also equal infinities
    const double err = std::abs(g[i] - w[i]);
    if (!(err <= tol.atol + tol.rtol * std::abs(w[i]))) {
      ++bad;
      if (worst < 0 || err > worstErr || std::isnan(err)) {
        worst = static_cast<int64_t>(i);
        worstErr = err;
      }
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << bad << " of " << g.size() << " elements differ (" << dtypeName(want.dtype())
         << shapeStr(want.shape()) << ", rtol " << tol.rtol << ", atol " << tol.atol
         << "); worst at flat index " << worst << ": compiled " << g[static_cast<size_t>(worst)]
         << " vs eager " << w[static_cast<size_t>(worst)];
}

/// Runs `fn` eagerly on `inputs` and compiled (full mode, CPU) three times: twice on
/// `inputs` and once on `fresh` (same specs, other values: compiled code must read its
/// arguments, not constants). Every result must match eager; one compile, no graph break.
/// `what` names the case in every failure message.
inline void checkCompiledMatchesEager(const std::string &what, const Fn &fn,
                                      const std::vector<Tensor> &inputs,
                                      const std::vector<Tensor> &fresh, double tolScale = 1) {
  SCOPED_TRACE(what + " | inputs: " + describe(inputs));
  std::vector<Tensor> want, wantFresh;
  try {
    want = fn(inputs);
    wantFresh = fn(fresh);
  } catch (const std::exception &e) {
    ADD_FAILURE() << "eager run threw: " << e.what();
    return;
  }
  int traced = 0;
  // the first call runs the compiled fast tier (quick LLVM; interpreting it would run the
  // eager kernels again), the later ones the optimized tier
  test::CompiledFirstTier compiledFirst;
  auto cf = compile([&fn, &traced](const std::vector<Tensor> &v) {
    ++traced;
    return fn(v);
  });
  for (int call = 0; call < 3; ++call) {
    if (call == 1) {
      EXPECT_TRUE(waitForBackgroundCompiles(600));
    }
    const std::vector<Tensor> &in = call < 2 ? inputs : fresh;
    const std::vector<Tensor> &ref = call < 2 ? want : wantFresh;
    std::vector<Tensor> got;
    try {
      got = cf(in);
    } catch (const std::exception &e) {
      ADD_FAILURE() << "compiled call " << call + 1 << " threw: " << e.what();
      return;
    }
    if (got.size() != ref.size()) {
      ADD_FAILURE() << "compiled call " << call + 1 << " returned " << got.size()
                    << " outputs, eager " << ref.size();
      return;
    }
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_TRUE(sameResult(got[i], ref[i], tolScale))
          << "output #" << i << " of compiled call " << call + 1;
    }
  }
  const CompileStats st = cf.stats();
  EXPECT_EQ(st.compiles, 1) << "one graph expected\n" << cf.explain();
  EXPECT_EQ(st.graph_breaks, 0);
  EXPECT_EQ(traced, 1) << "later calls must run compiled code, not the function";
}

/// FNV-1a of a name: a stable seed per case.
inline uint64_t seedOf(const std::string &s) {
  uint64_t h = 1469598103934665603ull;
  for (char c : s) h = (h ^ static_cast<uint8_t>(c)) * 1099511628211ull;
  return h;
}

} // namespace rcjit::conformance
