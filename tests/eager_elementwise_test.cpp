// Eager elementwise ops (unary, binary, compare, where, casts and copies) against plain-loop
// double references, over every dtype, broadcasting, views and the multithreaded sizes.
#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/TestUtil.h"

#include <rcjit/rcjit.h>

namespace {

using rcjit::test::expectError;

using rcjit::test::make;
using rcjit::test::numelOf;

using rcjit::DType;
using rcjit::Shape;
using rcjit::Tensor;

/// Deterministic values in [lo, hi).
std::vector<float> values(int64_t n, float lo, float hi, uint32_t seed = 1) {
  std::vector<float> v(static_cast<size_t>(n));
  uint32_t s = seed * 2654435761u + 12345u;
  for (auto &x : v) {
    s = s * 1664525u + 1013904223u;
    x = lo + (hi - lo) * static_cast<float>(s >> 8) / 16777216.0f;
  }
  return v;
}

/// The flat index in a tensor of shape `in` that NumPy broadcasting reads for element
/// `flat` of shape `out`.
int64_t broadcastIndex(int64_t flat, const Shape &out, const Shape &in) {
  int64_t idx = 0;
  int64_t stride = 1;
  const auto lead = static_cast<int64_t>(out.size() - in.size());
  for (int64_t d = static_cast<int64_t>(out.size()) - 1; d >= 0; --d) {
    const int64_t c = flat % out[d];
    flat /= out[d];
    if (d < lead) continue;
    const int64_t size = in[d - lead];
    if (size != 1) idx += c * stride;
    stride *= size;
  }
  return idx;
}

/// Tolerances of an op's result in dtype `dt` (rounding of the result dominates in f16/bf16).
struct Tol {
  double rtol;
  double atol;
};
Tol tolFor(DType dt) {
  switch (dt) {
  case DType::f64:
    return {1e-12, 1e-12};
  case DType::f32:
    return {1e-5, 1e-6};
  case DType::f16:
    return {2e-3, 2e-3};
  case DType::bf16:
    return {1.6e-2, 1e-2};
  default:
    return {0, 0};
  }
}

void expectClose(const std::vector<double> &got, const std::vector<double> &want, Tol tol,
                 const std::string &what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int bad = 0;
  for (size_t i = 0; i < got.size() && bad < 5; ++i) {
    const double g = got[i];
    const double w = want[i];
    if (std::isnan(w) && std::isnan(g)) continue;
    if (std::isinf(w) && g == w) continue;
    if (std::abs(g - w) <= tol.atol + tol.rtol * std::abs(w)) continue;
    ADD_FAILURE() << what << ": element " << i << " is " << g << ", expected " << w;
    ++bad;
  }
}

/// want[i] = f(a[bcast i], b[bcast i]) over the broadcast of shapes sa and sb.
std::vector<double> refBinary(const std::vector<double> &a, const Shape &sa,
                              const std::vector<double> &b, const Shape &sb, const Shape &so,
                              const std::function<double(double, double)> &f) {
  std::vector<double> out(static_cast<size_t>(numelOf(so)));
  for (int64_t i = 0; i < numelOf(so); ++i) {
    out[i] = f(a[broadcastIndex(i, so, sa)], b[broadcastIndex(i, so, sb)]);
  }
  return out;
}

struct UnaryCase {
  const char *name;
  Tensor (*fn)(const Tensor &);
  double (*ref)(double);
  float lo;
  float hi;
};

const std::vector<UnaryCase> &unaryCases() {
  static const std::vector<UnaryCase> cases = {
      {"neg", &rcjit::neg, [](double x) { return -x; }, -4, 4},
      {"abs", &rcjit::abs, [](double x) { return std::abs(x); }, -4, 4},
      {"exp", &rcjit::exp, [](double x) { return std::exp(x); }, -10, 10},
      {"log", &rcjit::log, [](double x) { return std::log(x); }, 0.01f, 50},
      {"sqrt", &rcjit::sqrt, [](double x) { return std::sqrt(x); }, 0, 50},
      {"rsqrt", &rcjit::rsqrt, [](double x) { return 1 / std::sqrt(x); }, 0.01f, 50},
      {"reciprocal", &rcjit::reciprocal, [](double x) { return 1 / x; }, 0.1f, 10},
      {"tanh", &rcjit::tanh, [](double x) { return std::tanh(x); }, -5, 5},
      {"sigmoid", &rcjit::sigmoid, [](double x) { return 1 / (1 + std::exp(-x)); }, -12, 12},
      {"relu", &rcjit::relu, [](double x) { return x < 0 ? 0.0 : x; }, -4, 4},
      {"gelu", &rcjit::gelu, [](double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); },
       -6, 6},
      {"silu", &rcjit::silu, [](double x) { return x / (1 + std::exp(-x)); }, -12, 12},
      {"erf", &rcjit::erf, [](double x) { return std::erf(x); }, -3, 3},
      {"sin", &rcjit::sin, [](double x) { return std::sin(x); }, -6, 6},
      {"cos", &rcjit::cos, [](double x) { return std::cos(x); }, -6, 6},
  };
  return cases;
}

void checkUnary(const UnaryCase &c, const Tensor &x, const std::string &what) {
  const Tensor y = c.fn(x);
  EXPECT_EQ(y.dtype(), x.dtype()) << what;
  EXPECT_EQ(y.shape(), x.shape()) << what;
  EXPECT_TRUE(y.is_contiguous()) << what;
  std::vector<double> want = x.to_vector<double>();
  for (double &v : want) v = c.ref(v);
  Tol tol = tolFor(x.dtype());
  if (x.dtype() == DType::f32) tol.atol = 2e-6; // sin/cos/erf near their zeros
  expectClose(y.to_vector<double>(), want, tol, what);
}

TEST(EagerElementwise, UnaryFloatDtypes) {
  for (const UnaryCase &c : unaryCases()) {
    for (DType dt : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
      const Tensor x = make(values(37 * 19, c.lo, c.hi, 3), {37, 19}, dt);
      checkUnary(c, x, std::string(c.name) + " " + std::string(rcjit::dtypeName(dt)));
    }
  }
}

TEST(EagerElementwise, UnaryViewsAndZeroDim) {
  for (const UnaryCase &c : unaryCases()) {
    const Tensor x = make(values(6 * 10, c.lo, c.hi, 5), {6, 10});
    checkUnary(c, rcjit::transpose(x, 0, 1), std::string(c.name) + " transposed");
    checkUnary(c, rcjit::slice(x, 1, 2, 9), std::string(c.name) + " sliced");
    checkUnary(c, rcjit::expand(make({c.hi / 2}, {1}), {5}), std::string(c.name) + " expanded");
    checkUnary(c, make({c.hi / 3}, {}), std::string(c.name) + " 0-dim");
  }
}

TEST(EagerElementwise, UnaryLargeCrossesThreadThreshold) {
  for (const UnaryCase &c : unaryCases()) {
    const Tensor x = make(values(613 * 163, c.lo, c.hi, 7), {613 * 163});
    checkUnary(c, x, std::string(c.name) + " large");
    checkUnary(c, rcjit::transpose(x.reshape({613, 163}), 0, 1),
               std::string(c.name) + " large transposed");
  }
}

TEST(EagerElementwise, ExpExtremes) {
  const float inf = INFINITY;
  const Tensor x = make({-inf, -1000, -100, -87.5f, 0, 88.7f, 89, 1000, inf, NAN}, {10});
  std::vector<double> want;
  for (double v : x.to_vector<double>()) want.push_back(static_cast<float>(std::exp(v)));
  expectClose(rcjit::exp(x).to_vector<double>(), want, {1e-5, 1e-43}, "exp extremes");
  const Tensor s = rcjit::sigmoid(make({-inf, -200, 200, inf}, {4}));
  expectClose(s.to_vector<double>(), {0, 0, 1, 1}, {0, 0}, "sigmoid extremes");
}

// The float tanh runs a vectorized polynomial / exp form (targets/eager/Iter.h fastTanh):
// within 2 ulp of std::tanh on both sides of the 0.625 switch, signed zeros, saturation
// and NaN as std::tanh has them, contiguous (vectorized loop) and strided alike.
TEST(EagerElementwise, TanhAccuracyAndExtremes) {
  std::vector<float> v;
  for (float a = 1e-30f; a < 30.0f; a *= 1.0137f) {
    v.push_back(a);
    v.push_back(-a);
  }
  for (float a : {0.0f, -0.0f, 0.6249999f, 0.625f, 0.6250001f, 9.0f, 44.5f, 89.0f, 1e30f}) {
    v.push_back(a);
    v.push_back(-a);
  }
  for (float a : {INFINITY, -INFINITY, NAN}) v.push_back(a);
  const auto n = static_cast<int64_t>(v.size());
  const Tensor x = make(v, {n});
  const Tensor strided = rcjit::slice(rcjit::expand(x.reshape({n, 1}), {n, 2}), 1, 0, 1);
  for (const Tensor &in : {x, strided}) {
    const std::vector<float> got = rcjit::tanh(in.reshape({n})).to_vector<float>();
    for (size_t i = 0; i < v.size(); ++i) {
      const float want = std::tanh(v[i]), g = got[i];
      if (std::isnan(want)) {
        EXPECT_TRUE(std::isnan(g)) << v[i];
        continue;
      }
      EXPECT_EQ(std::signbit(g), std::signbit(want)) << v[i];
      const float ulp = std::nextafter(std::abs(want), INFINITY) - std::abs(want);
      EXPECT_LE(std::abs(g - want), 2 * ulp) << v[i] << ": " << g << " vs " << want;
    }
  }
}

TEST(EagerElementwise, IntegerUnary) {
  const std::vector<int64_t> v = {-7, -1, 0, 1, 5, 123456};
  for (DType dt : {DType::i32, DType::i64}) {
    const Tensor x = Tensor::from_vector(v, {6}).to(dt);
    EXPECT_EQ(rcjit::neg(x).dtype(), dt);
    EXPECT_EQ(rcjit::neg(x).to_vector<int64_t>(), (std::vector<int64_t>{7, 1, 0, -1, -5, -123456}));
    EXPECT_EQ(rcjit::abs(x).to_vector<int64_t>(), (std::vector<int64_t>{7, 1, 0, 1, 5, 123456}));
    EXPECT_EQ(rcjit::relu(x).to_vector<int64_t>(), (std::vector<int64_t>{0, 0, 0, 1, 5, 123456}));
    const Tensor e = rcjit::exp(rcjit::slice(x, 0, 0, 5)); // float op on ints gives f32
    EXPECT_EQ(e.dtype(), DType::f32);
    expectClose(e.to_vector<double>(),
                {std::exp(-7.0), std::exp(-1.0), 1, std::exp(1.0), std::exp(5.0)},
                tolFor(DType::f32), "exp of ints");
  }
}

TEST(EagerElementwise, NanSemantics) {
  const Tensor a = make({NAN, 1, NAN, -2}, {4});
  const Tensor b = make({1, NAN, NAN, 3}, {4});
  const auto mx = rcjit::maximum(a, b).to_vector<double>();
  const auto mn = rcjit::minimum(a, b).to_vector<double>();
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(std::isnan(mx[i]) && std::isnan(mn[i])) << i;
  EXPECT_EQ(mx[3], 3);
  EXPECT_EQ(mn[3], -2);
  EXPECT_TRUE(std::isnan(rcjit::relu(a).to_vector<double>()[0]));
  EXPECT_EQ(rcjit::ne(a, a).to_vector<double>(), (std::vector<double>{1, 0, 1, 0}));
}

struct BinaryCase {
  const char *name;
  Tensor (*fn)(const Tensor &, const Tensor &);
  double (*ref)(double, double);
  bool compare;
};

const std::vector<BinaryCase> &binaryCases() {
  using T = const Tensor &;
  static const std::vector<BinaryCase> cases = {
      {"add", [](T a, T b) { return rcjit::add(a, b); }, [](double a, double b) { return a + b; },
       false},
      {"sub", [](T a, T b) { return rcjit::sub(a, b); }, [](double a, double b) { return a - b; },
       false},
      {"mul", [](T a, T b) { return rcjit::mul(a, b); }, [](double a, double b) { return a * b; },
       false},
      {"div", [](T a, T b) { return rcjit::div(a, b); }, [](double a, double b) { return a / b; },
       false},
      {"pow", [](T a, T b) { return rcjit::pow(a, b); },
       [](double a, double b) { return std::pow(a, b); }, false},
      {"maximum", [](T a, T b) { return rcjit::maximum(a, b); },
       [](double a, double b) { return std::max(a, b); }, false},
      {"minimum", [](T a, T b) { return rcjit::minimum(a, b); },
       [](double a, double b) { return std::min(a, b); }, false},
      {"eq", [](T a, T b) { return rcjit::eq(a, b); },
       [](double a, double b) { return double(a == b); }, true},
      {"ne", [](T a, T b) { return rcjit::ne(a, b); },
       [](double a, double b) { return double(a != b); }, true},
      {"lt", [](T a, T b) { return rcjit::lt(a, b); },
       [](double a, double b) { return double(a < b); }, true},
      {"le", [](T a, T b) { return rcjit::le(a, b); },
       [](double a, double b) { return double(a <= b); }, true},
      {"gt", [](T a, T b) { return rcjit::gt(a, b); },
       [](double a, double b) { return double(a > b); }, true},
      {"ge", [](T a, T b) { return rcjit::ge(a, b); },
       [](double a, double b) { return double(a >= b); }, true},
  };
  return cases;
}

/// Operand values for a binary op: pow gets positive bases, div nonzero divisors, and
/// comparisons small integers so that ties occur.
std::vector<float> operand(const BinaryCase &c, int64_t n, bool second, uint32_t seed) {
  const std::string name = c.name;
  if (c.compare) {
    std::vector<float> v = values(n, -3, 3, seed);
    for (float &x : v) x = std::round(x);
    return v;
  }
  if (name == "pow") return second ? values(n, -2, 2, seed) : values(n, 0.5f, 2, seed);
  if (name == "div" && second) return values(n, 0.5f, 2, seed);
  return values(n, -4, 4, seed);
}

void checkBinary(const BinaryCase &c, const Tensor &a, const Tensor &b, const std::string &what) {
  const Tensor y = c.fn(a, b);
  const Shape so = y.shape();
  const DType want = c.compare ? DType::boolean : a.dtype();
  EXPECT_EQ(y.dtype(), want) << what;
  const auto ref =
      refBinary(a.to_vector<double>(), a.shape(), b.to_vector<double>(), b.shape(), so, c.ref);
  expectClose(y.to_vector<double>(), ref, c.compare ? Tol{0, 0} : tolFor(a.dtype()), what);
}

TEST(EagerElementwise, BinaryBroadcastShapesAndDtypes) {
  const std::vector<std::pair<Shape, Shape>> shapes = {{{3, 1, 4}, {2, 1}},
                                                       {{5, 7}, {5, 7}},
                                                       {{5, 7}, {7}},
                                                       {{7}, {5, 7}},
                                                       {{5, 7}, {}},
                                                       {{}, {5, 7}},
                                                       {{}, {}},
                                                       {{4, 1}, {1, 6}},
                                                       {{2, 3, 1, 5}, {3, 4, 1}}};
  for (const BinaryCase &c : binaryCases()) {
    for (DType dt : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
      for (const auto &[sa, sb] : shapes) {
        const Tensor a = make(operand(c, numelOf(sa), false, 11), sa, dt);
        const Tensor b = make(operand(c, numelOf(sb), true, 12), sb, dt);
        checkBinary(c, a, b,
                    std::string(c.name) + " " + std::string(rcjit::dtypeName(dt)) + " " +
                        rcjit::shapeStr(sa) + " with " + rcjit::shapeStr(sb));
      }
    }
  }
}

TEST(EagerElementwise, BinaryIntegers) {
  for (const BinaryCase &c : binaryCases()) {
    const std::string name = c.name;
    if (name == "div" || name == "pow") continue;
    for (DType dt : {DType::i32, DType::i64}) {
      std::vector<int64_t> va;
      std::vector<int64_t> vb;
      for (float v : values(12, -50, 50, 21)) va.push_back(static_cast<int64_t>(v));
      for (float v : values(4, -50, 50, 22)) vb.push_back(static_cast<int64_t>(v));
      vb[1] = va[1]; // a tie for the comparisons
      const Tensor a = Tensor::from_vector(va, {3, 4}).to(dt);
      const Tensor b = Tensor::from_vector(vb, {4}).to(dt);
      checkBinary(c, a, b, name + " " + std::string(rcjit::dtypeName(dt)));
    }
  }
  const Tensor q = rcjit::div(Tensor::from_vector(std::vector<int64_t>{7, -3}, {2}),
                              Tensor::from_vector(std::vector<int64_t>{2, 4}, {2}));
  EXPECT_EQ(q.dtype(), DType::f32);
  EXPECT_EQ(q.to_vector<double>(), (std::vector<double>{3.5, -0.75}));
}

TEST(EagerElementwise, BoolArithmetic) {
  const Tensor a = rcjit::gt(make({1, -1, 1, -1}, {4}), 0.0);
  const Tensor b = rcjit::gt(make({1, 1, -1, -1}, {4}), 0.0);
  const Tensor s = rcjit::add(a, b);
  EXPECT_EQ(s.dtype(), DType::boolean);
  EXPECT_EQ(s.to_vector<int64_t>(), (std::vector<int64_t>{1, 1, 1, 0}));
  EXPECT_EQ(rcjit::mul(a, b).to_vector<int64_t>(), (std::vector<int64_t>{1, 0, 0, 0}));
  EXPECT_EQ(rcjit::maximum(a, b).to_vector<int64_t>(), (std::vector<int64_t>{1, 1, 1, 0}));
  EXPECT_EQ(rcjit::minimum(a, b).to_vector<int64_t>(), (std::vector<int64_t>{1, 0, 0, 0}));
  EXPECT_EQ(rcjit::eq(a, b).to_vector<int64_t>(), (std::vector<int64_t>{1, 0, 0, 1}));
}

TEST(EagerElementwise, BinaryNonContiguousAndLarge) {
  for (const BinaryCase &c : binaryCases()) {
    const std::string name = c.name;
    const Tensor base = make(operand(c, 9 * 8, false, 31), {9, 8});
    const Tensor at = rcjit::transpose(base, 0, 1); // [8, 9]
    const Tensor bs = rcjit::slice(make(operand(c, 8 * 12, true, 32), {8, 12}), 1, 2, 11);
    checkBinary(c, at, bs, name + " transposed with sliced");
    const Tensor row = make(operand(c, 257, true, 33), {257});
    const Tensor big = make(operand(c, 300 * 257, false, 34), {300, 257});
    checkBinary(c, big, row, name + " large with row");
    checkBinary(c, row, big, name + " row with large");
    checkBinary(c, big, make(operand(c, 1, true, 35), {}), name + " large with 0-dim");
    const Tensor big2 = make(operand(c, 300 * 257, true, 36), {300, 257});
    checkBinary(c, big, big2, name + " large same shape");
    checkBinary(c, rcjit::transpose(big.reshape({257, 300}), 0, 1), big2,
                name + " large transposed");
  }
}

TEST(EagerElementwise, ScalarOperands) {
  const Tensor x = make({1, 2, 3}, {3});
  EXPECT_EQ((x * 2.0 + 1.0).to_vector<float>(), (std::vector<float>{3, 5, 7}));
  EXPECT_EQ((1.0 - x).to_vector<float>(), (std::vector<float>{0, -1, -2}));
  EXPECT_EQ((x / 2.0).to_vector<float>(), (std::vector<float>{0.5f, 1, 1.5f}));
  EXPECT_EQ((-x).to_vector<float>(), (std::vector<float>{-1, -2, -3}));
}

TEST(EagerElementwise, WhereBroadcastsAndDtypes) {
  const Tensor cond = rcjit::gt(make(values(12, -1, 1, 41), {3, 1, 4}), 0.0);
  const auto cv = cond.to_vector<double>();
  for (DType dt : {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i32, DType::i64}) {
    const Tensor a = make({1, 2}, {2, 1}, dt);
    const Tensor b = make({-5}, {}, dt);
    const Tensor y = rcjit::where(cond, a, b);
    EXPECT_EQ(y.dtype(), dt);
    EXPECT_EQ(y.shape(), (Shape{3, 2, 4}));
    const Shape so = {3, 2, 4};
    std::vector<double> want(24);
    for (int64_t i = 0; i < 24; ++i) {
      want[i] = cv[broadcastIndex(i, so, {3, 1, 4})] != 0 ? (i / 4) % 2 + 1.0 : -5.0;
    }
    expectClose(y.to_vector<double>(), want, {0, 0}, "where");
  }
  const Tensor big = make(values(70000, -1, 1, 42), {70000});
  const Tensor other = rcjit::transpose(big.reshape({100, 700}), 0, 1).reshape({70000});
  const Tensor w = rcjit::where(rcjit::lt(big, 0.0), 0.0, other);
  const auto bv = big.to_vector<double>();
  const auto ov = other.to_vector<double>();
  std::vector<double> want(70000);
  for (size_t i = 0; i < want.size(); ++i) want[i] = bv[i] < 0 ? 0.0 : ov[i];
  expectClose(w.to_vector<double>(), want, {0, 0}, "where large");
}

TEST(EagerElementwise, CastsBetweenAllDtypes) {
  const std::vector<float> v = {-2.75f, -1, 0, 0.5f, 1.5f, 3, 100};
  const std::vector<DType> all = {DType::f32, DType::f64, DType::f16,    DType::bf16,
                                  DType::i32, DType::i64, DType::boolean};
  for (DType from : all) {
    const Tensor x = make(v, {7}, from);
    const auto xv = x.to_vector<double>();
    for (DType to : all) {
      std::vector<double> want;
      for (double e : xv) {
        if (to == DType::boolean)
          want.push_back(e != 0);
        else if (to == DType::i32 || to == DType::i64)
          want.push_back(std::trunc(e));
        else
          want.push_back(e); // every value here is exact in f16/bf16
      }
      const Tensor y = rcjit::transpose(x.reshape({7, 1}), 0, 1).to(to);
      EXPECT_EQ(y.dtype(), to);
      expectClose(y.to_vector<double>(), want, {0, 0},
                  std::string("cast ") + std::string(rcjit::dtypeName(from)) + " to " +
                      std::string(rcjit::dtypeName(to)));
    }
  }
}

TEST(EagerElementwise, CastRoundsToNearestEven) {
  // 1 + 2^-11 is halfway between two f16 values, 1 + 3*2^-11 rounds up.
  const Tensor x = Tensor::from_vector(
      std::vector<float>{1.0f + 0x1p-11f, 1.0f + 3 * 0x1p-11f, 70000.0f, 1.0f + 0x1p-8f}, {4});
  EXPECT_EQ(x.to(DType::f16).to_vector<float>(),
            (std::vector<float>{1.0f, 1.0f + 0x1p-9f, INFINITY, 1.0f + 0x1p-8f}));
  EXPECT_EQ(x.to(DType::bf16).to_vector<float>()[3], 1.0f);
}

TEST(EagerElementwise, MixedDtypePromotionCasts) {
  const Tensor i = Tensor::from_vector(std::vector<int64_t>{1, 2, 3}, {3});
  const Tensor f = make({0.5f, 0.25f, 0.125f}, {3});
  const Tensor y = rcjit::add(i, f);
  EXPECT_EQ(y.dtype(), DType::f32);
  EXPECT_EQ(y.to_vector<float>(), (std::vector<float>{1.5f, 2.25f, 3.125f}));
  const Tensor h = rcjit::mul(make({1, 2, 3}, {3}, DType::f16), f);
  EXPECT_EQ(h.dtype(), DType::f32);
  EXPECT_EQ(h.to_vector<float>(), (std::vector<float>{0.5f, 0.5f, 0.375f}));
}

TEST(EagerElementwise, CopiesOfViews) {
  const Tensor x = make(values(6 * 5, -1, 1, 51), {6, 5});
  const auto xv = x.to_vector<float>();
  const Tensor t = rcjit::transpose(x, 0, 1).contiguous();
  ASSERT_TRUE(t.is_contiguous());
  for (int i = 0; i < 5; ++i) {
    for (int j = 0; j < 6; ++j) EXPECT_EQ(t.to_vector<float>()[i * 6 + j], xv[j * 5 + i]);
  }
  Tensor dst = Tensor::zeros({4, 6});
  Tensor view = rcjit::slice(dst, 1, 1, 4);
  view.copy_(rcjit::expand(make({1, 2, 3}, {3}), {4, 3}));
  const auto dv = dst.to_vector<float>();
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(std::vector<float>(dv.begin() + r * 6, dv.begin() + r * 6 + 6),
              (std::vector<float>{0, 1, 2, 3, 0, 0}));
  }
  const Tensor big = make(values(1 << 20, -1, 1, 52), {1 << 20});
  EXPECT_EQ(big.clone().to_vector<float>(), big.to_vector<float>());
  const Tensor bigT = rcjit::transpose(big.reshape({1024, 1024}), 0, 1);
  const auto bt = bigT.contiguous().to_vector<float>();
  const auto bv = big.to_vector<float>();
  int bad = 0;
  for (int i = 0; i < 1024 && bad == 0; ++i) {
    for (int j = 0; j < 1024; ++j) bad += bt[i * 1024 + j] != bv[j * 1024 + i];
  }
  EXPECT_EQ(bad, 0);
  EXPECT_EQ(big.to(DType::f64).to(DType::f32).to_vector<float>(), bv);
}

TEST(EagerElementwise, ErrorsNameOpAndShapes) {
  const Tensor a = Tensor::zeros({2, 3});
  const Tensor b = Tensor::zeros({4});
  expectError([&] { rcjit::add(a, b); }, {"add", "[2, 3]", "[4]"});
  expectError(
      [&] {
        rcjit::mul(Tensor::zeros({3, 1, 4}), Tensor::zeros({2, 3}));
      },
      {"mul", "[3, 1, 4]", "[2, 3]"});
  expectError([&] { rcjit::lt(a, b); }, {"lt", "[2, 3]", "[4]"});
  expectError([&] { rcjit::where(a, a, a); }, {"where"});
  expectError([&] { rcjit::where(rcjit::gt(a, 0.0), a, b); }, {"where", "[2, 3]", "[4]"});
}

} // namespace
