// Eager reductions (sum, mean, amax, argmax) and softmax/log_softmax against plain-loop
// double references: every dim set, keepdim, dtypes, views, long rows and error messages.
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/TestUtil.h"

#include <rcjit/rcjit.h>

namespace {

using rcjit::test::expectError;

using rcjit::test::make;
using rcjit::test::numelOf;

using rcjit::Dims;
using rcjit::DType;
using rcjit::Shape;
using rcjit::Tensor;

std::vector<float> reduceValues(int64_t n, float lo, float hi, uint32_t seed = 1) {
  std::vector<float> v(static_cast<size_t>(n));
  uint32_t s = seed * 2654435761u + 777u;
  for (auto &x : v) {
    s = s * 1664525u + 1013904223u;
    x = lo + (hi - lo) * static_cast<float>(s >> 8) / 16777216.0f;
  }
  return v;
}

std::string name(DType dt) { return std::string(rcjit::dtypeName(dt)); }

/// A reduction's result computed naively: out shape, and the fold of every input element
/// into its output slot.
struct RefReduce {
  Shape shape;
  std::vector<double> vals;
  std::vector<int64_t> counts;
};

RefReduce refReduce(const std::vector<double> &x, const Shape &s, Dims dims, bool keepdim,
                    double init, const std::function<double(double, double)> &f) {
  const auto rank = static_cast<int64_t>(s.size());
  if (dims.empty()) {
    for (int64_t d = 0; d < rank; ++d) dims.push_back(d);
  }
  std::vector<bool> red(s.size(), false);
  for (int64_t d : dims) red[static_cast<size_t>(d < 0 ? d + rank : d)] = true;
  RefReduce r;
  Shape full;
  for (int64_t d = 0; d < rank; ++d) {
    full.push_back(red[d] ? 1 : s[d]);
    if (!red[d] || keepdim) r.shape.push_back(red[d] ? 1 : s[d]);
  }
  r.vals.assign(static_cast<size_t>(numelOf(full)), init);
  r.counts.assign(r.vals.size(), 0);
  for (int64_t i = 0; i < numelOf(s); ++i) {
    int64_t rem = i;
    int64_t o = 0;
    int64_t stride = 1;
    for (int64_t d = rank - 1; d >= 0; --d) {
      const int64_t c = rem % s[d];
      rem /= s[d];
      if (!red[d]) o += c * stride;
      stride *= full[d];
    }
    r.vals[o] = f(r.vals[o], x[i]);
    ++r.counts[o];
  }
  return r;
}

void expectClose(const std::vector<double> &got, const std::vector<double> &want, double rtol,
                 double atol, const std::string &what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int bad = 0;
  for (size_t i = 0; i < got.size() && bad < 5; ++i) {
    const double g = got[i];
    const double w = want[i];
    if ((std::isnan(w) && std::isnan(g)) || (std::isinf(w) && g == w)) continue;
    if (std::abs(g - w) <= atol + rtol * std::abs(w)) continue;
    ADD_FAILURE() << what << ": element " << i << " is " << g << ", expected " << w;
    ++bad;
  }
}

double rtolFor(DType dt) {
  switch (dt) {
  case DType::f16:
    return 2e-3;
  case DType::bf16:
    return 1.6e-2;
  case DType::f32:
    return 1e-5;
  case DType::f64:
    return 1e-12;
  default:
    return 0;
  }
}

const std::vector<Dims> &dimSets() {
  static const std::vector<Dims> sets = {{},     {0},    {1},     {2},       {-1}, {0, 1},
                                         {0, 2}, {1, 2}, {0, -1}, {0, 1, 2}, {-3}, {2, 0}};
  return sets;
}

std::string dimsStr(const Dims &d) { return rcjit::shapeStr(d); }

/// Checks sum, mean and amax of x over every dim set against the naive reference.
void checkReductions(const Tensor &x, const std::string &what) {
  const DType dt = x.dtype();
  const auto xv = x.to_vector<double>();
  const bool fl = rcjit::isFloating(dt);
  const double rt = fl ? rtolFor(dt) : 0;
  for (const Dims &dims : dimSets()) {
    for (bool keep : {false, true}) {
      const std::string tag = what + " dims " + dimsStr(dims) + (keep ? " keepdim" : "");
      auto add = [](double a, double b) { return a + b; };
      const RefReduce s = refReduce(xv, x.shape(), dims, keep, 0, add);
      const Tensor ys = rcjit::sum(x, dims, keep);
      EXPECT_EQ(ys.dtype(), fl ? dt : DType::i64) << tag;
      EXPECT_EQ(ys.shape(), s.shape) << tag;
      expectClose(ys.to_vector<double>(), s.vals, rt, fl ? 1e-3 : 0, "sum " + tag);
      if (fl) {
        std::vector<double> mean = s.vals;
        for (size_t i = 0; i < mean.size(); ++i) mean[i] /= static_cast<double>(s.counts[i]);
        const Tensor ym = rcjit::mean(x, dims, keep);
        EXPECT_EQ(ym.dtype(), dt) << tag;
        expectClose(ym.to_vector<double>(), mean, rt, 1e-3, "mean " + tag);
      }
      if (dt == DType::boolean) continue;
      auto mx = [](double a, double b) { return std::max(a, b); };
      const RefReduce m = refReduce(xv, x.shape(), dims, keep, -INFINITY, mx);
      const Tensor ya = rcjit::amax(x, dims, keep);
      EXPECT_EQ(ya.dtype(), dt) << tag;
      EXPECT_EQ(ya.shape(), m.shape) << tag;
      expectClose(ya.to_vector<double>(), m.vals, 0, 0, "amax " + tag);
    }
  }
}

TEST(EagerReduce, AllDimSetsAndDtypes) {
  for (DType dt : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
    checkReductions(make(reduceValues(3 * 4 * 5, -2, 2, 1), {3, 4, 5}, dt), name(dt));
  }
  std::vector<int64_t> iv;
  for (float v : reduceValues(60, -100, 100, 2)) iv.push_back(static_cast<int64_t>(v));
  for (DType dt : {DType::i32, DType::i64, DType::boolean}) {
    checkReductions(Tensor::from_vector(iv, {3, 4, 5}).to(dt), name(dt));
  }
}

TEST(EagerReduce, NonContiguousInputs) {
  const Tensor base = make(reduceValues(5 * 4 * 6, -2, 2, 3), {5, 4, 6});
  checkReductions(rcjit::permute(base, {2, 0, 1}), "permuted");
  checkReductions(rcjit::transpose(base, 0, 2), "transposed");
  checkReductions(rcjit::slice(rcjit::slice(base, 2, 1, 5), 0, 1, 4), "sliced");
  checkReductions(rcjit::expand(make(reduceValues(4, -1, 1, 4), {1, 4, 1}), {3, 4, 5}), "expanded");
}

TEST(EagerReduce, ZeroDimAndSizeOneDims) {
  const Tensor s = make({2.5f}, {});
  EXPECT_EQ(rcjit::sum(s).shape(), Shape{});
  EXPECT_EQ(rcjit::sum(s).item(), 2.5);
  EXPECT_EQ(rcjit::amax(s).item(), 2.5);
  EXPECT_EQ(rcjit::mean(s).item(), 2.5);
  checkReductions(make(reduceValues(5, -1, 1, 5), {1, 5, 1}), "size-1 dims");
}

TEST(EagerReduce, LargeSumsAreAccurate) {
  const int64_t n = 3'000'017;
  const auto v = reduceValues(n, -1, 1.5f, 6);
  const Tensor x = make(v, {n});
  double ref = 0;
  for (float e : v) ref += e;
  expectClose({rcjit::sum(x).item()}, {ref}, 1e-5, 0, "sum of 3M");
  expectClose({rcjit::mean(x).item()}, {ref / n}, 1e-5, 0, "mean of 3M");
  // a few long rows (split over threads), many short rows, and columns
  for (const Shape &shape : {Shape{4, 750000}, Shape{30000, 100}, Shape{100, 30000}}) {
    const auto xv = make(reduceValues(3'000'000, -1, 1.5f, 7), shape);
    const auto xd = xv.to_vector<double>();
    for (int64_t dim : {0, 1}) {
      const RefReduce r =
          refReduce(xd, shape, {dim}, false, 0, [](double a, double b) { return a + b; });
      const std::string tag = rcjit::shapeStr(shape) + " dim " + std::to_string(dim);
      expectClose(rcjit::sum(xv, {dim}).to_vector<double>(), r.vals, 1e-5, 1e-4, "sum " + tag);
      const RefReduce m = refReduce(xd, shape, {dim}, false, -INFINITY,
                                    [](double a, double b) { return std::max(a, b); });
      expectClose(rcjit::amax(xv, {dim}).to_vector<double>(), m.vals, 0, 0, "amax " + tag);
    }
  }
  std::vector<int64_t> ones(1 << 20, 3);
  EXPECT_EQ(rcjit::sum(Tensor::from_vector(ones, {1 << 20}).to(DType::i32)).item(), 3 << 20);
}

TEST(EagerReduce, AmaxPropagatesNan) {
  const Tensor x = make({1, NAN, 3, 4, 5, 6}, {2, 3});
  const auto rows = rcjit::amax(x, {1}).to_vector<double>();
  EXPECT_TRUE(std::isnan(rows[0]));
  EXPECT_EQ(rows[1], 6);
  const auto cols = rcjit::amax(x, {0}).to_vector<double>();
  EXPECT_EQ(cols[0], 4);
  EXPECT_TRUE(std::isnan(cols[1]));
  EXPECT_TRUE(std::isnan(rcjit::amax(x).item()));
}

/// Naive argmax over `dim` of a contiguous [outer, dim, inner] view of x.
std::vector<int64_t> refArgmax(const std::vector<double> &x, const Shape &s, int64_t dim) {
  int64_t outer = 1;
  int64_t inner = 1;
  for (int64_t d = 0; d < static_cast<int64_t>(s.size()); ++d) {
    if (d < dim) outer *= s[d];
    if (d > dim) inner *= s[d];
  }
  std::vector<int64_t> out;
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t i = 0; i < inner; ++i) {
      int64_t best = 0;
      for (int64_t r = 1; r < s[dim]; ++r) {
        const double v = x[(o * s[dim] + r) * inner + i];
        const double b = x[(o * s[dim] + best) * inner + i];
        if (!std::isnan(b) && (v > b || std::isnan(v))) best = r;
      }
      out.push_back(best);
    }
  }
  return out;
}

TEST(EagerReduce, Argmax) {
  auto v = reduceValues(4 * 5 * 6, -3, 3, 8);
  for (float &e : v) e = std::round(e); // ties: the first index wins
  for (DType dt : {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i32, DType::i64}) {
    const Tensor x = make(v, {4, 5, 6}, dt);
    for (int64_t dim : {0, 1, 2, -1}) {
      for (bool keep : {false, true}) {
        const Tensor y = rcjit::argmax(x, dim, keep);
        const int64_t d = dim < 0 ? dim + 3 : dim;
        Shape want = {4, 5, 6};
        if (keep) {
          want[d] = 1;
        } else {
          want.erase(want.begin() + d);
        }
        EXPECT_EQ(y.dtype(), DType::i64);
        EXPECT_EQ(y.shape(), want);
        EXPECT_EQ(y.to_vector<int64_t>(), refArgmax(x.to_vector<double>(), {4, 5, 6}, d))
            << name(dt) << " dim " << dim;
      }
    }
  }
  const Tensor t = rcjit::transpose(make(v, {4, 5, 6}), 0, 2); // [6, 5, 4]
  const auto tv = t.contiguous().to_vector<double>();
  EXPECT_EQ(rcjit::argmax(t, 1).to_vector<int64_t>(), refArgmax(tv, {6, 5, 4}, 1));
  const Tensor n = make({1, NAN, 5, NAN, 2, 7}, {6});
  EXPECT_EQ(rcjit::argmax(n, 0).item(), 1);
  const auto big = reduceValues(200 * 3000, -1, 1, 9);
  const Tensor b = make(big, {200, 3000});
  const auto bd = b.to_vector<double>();
  EXPECT_EQ(rcjit::argmax(b, 1).to_vector<int64_t>(), refArgmax(bd, {200, 3000}, 1));
  EXPECT_EQ(rcjit::argmax(b, 0).to_vector<int64_t>(), refArgmax(bd, {200, 3000}, 0));
}

/// Naive (log_)softmax over `dim` in double.
std::vector<double> refSoftmax(const std::vector<double> &x, const Shape &s, int64_t dim,
                               bool log) {
  int64_t outer = 1;
  int64_t inner = 1;
  for (int64_t d = 0; d < static_cast<int64_t>(s.size()); ++d) {
    if (d < dim) outer *= s[d];
    if (d > dim) inner *= s[d];
  }
  std::vector<double> out(x.size());
  const int64_t n = s[dim];
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t i = 0; i < inner; ++i) {
      auto at = [&](int64_t r) { return (o * n + r) * inner + i; };
      double m = -INFINITY;
      for (int64_t r = 0; r < n; ++r) m = std::max(m, x[at(r)]);
      double sum = 0;
      for (int64_t r = 0; r < n; ++r) sum += std::exp(x[at(r)] - m);
      for (int64_t r = 0; r < n; ++r) {
        out[at(r)] = log ? x[at(r)] - m - std::log(sum) : std::exp(x[at(r)] - m) / sum;
      }
    }
  }
  return out;
}

void checkSoftmax(const Tensor &x, int64_t dim, const std::string &what) {
  const int64_t d = dim < 0 ? dim + x.dim() : dim;
  const auto xv = x.to_vector<double>();
  const double rt = rtolFor(x.dtype()) * (x.dtype() == DType::f32 ? 1 : 2);
  for (bool log : {false, true}) {
    const Tensor y = log ? rcjit::log_softmax(x, dim) : rcjit::softmax(x, dim);
    EXPECT_EQ(y.dtype(), x.dtype()) << what;
    EXPECT_EQ(y.shape(), x.shape()) << what;
    const double atol = x.dtype() == DType::f32 || x.dtype() == DType::f64 ? 1e-6 : rt;
    expectClose(y.to_vector<double>(), refSoftmax(xv, x.shape(), d, log), rt, atol,
                std::string(log ? "log_softmax " : "softmax ") + what + " dim " +
                    std::to_string(dim));
  }
}

TEST(EagerReduce, SoftmaxEveryDimAndDtype) {
  for (DType dt : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
    const Tensor x = make(reduceValues(4 * 5 * 6, -4, 4, 10), {4, 5, 6}, dt);
    for (int64_t dim : {0, 1, 2, -1, -3}) checkSoftmax(x, dim, name(dt));
  }
  const Tensor base = make(reduceValues(4 * 5 * 6, -4, 4, 11), {4, 5, 6});
  checkSoftmax(rcjit::transpose(base, 1, 2), -1, "transposed");
  checkSoftmax(rcjit::slice(base, 2, 1, 4), 1, "sliced");
}

TEST(EagerReduce, SoftmaxLargeAndStable) {
  checkSoftmax(make(reduceValues(64 * 2000, -10, 10, 12), {64, 2000}), -1, "rows");
  checkSoftmax(make(reduceValues(300 * 200, -10, 10, 13), {300, 200}), 0, "columns");
  checkSoftmax(make(reduceValues(2 * 3000 * 7, -10, 10, 14), {2, 3000, 7}), 1, "middle");
  // huge logits: stable only if the max is subtracted first
  checkSoftmax(make(reduceValues(1000, 1000, 1010, 15), {10, 100}), 1, "huge logits");
  const float ninf = -std::numeric_limits<float>::infinity();
  const Tensor masked = rcjit::softmax(make({0, ninf, 0, ninf}, {1, 4}), 1);
  EXPECT_EQ(masked.to_vector<float>(), (std::vector<float>{0.5f, 0, 0.5f, 0}));
  const auto ls = rcjit::log_softmax(make({0, ninf}, {2}), 0).to_vector<float>();
  EXPECT_EQ(ls[0], 0);
  EXPECT_EQ(ls[1], ninf);
}

TEST(EagerReduce, ErrorsNameOpAndShapes) {
  // Out-of-range dims are reported with the rank (from detail::normalizeDim), not the shape.
  const Tensor x = Tensor::zeros({2, 3, 4});
  const Tensor i = Tensor::from_vector(std::vector<int64_t>{1, 2, 3}, {3});
  expectError([&] { rcjit::sum(x, {3}); }, {"sum", "dim 3", "rank 3"});
  expectError([&] { rcjit::amax(x, {-4}); }, {"amax", "dim -4", "rank 3"});
  expectError([&] { rcjit::sum(x, {1, 1}); }, {"sum", "[1, 1]"});
  expectError([&] { rcjit::mean(i); }, {"mean", "i64"});
  expectError([&] { rcjit::argmax(x, 3); }, {"argmax", "dim 3", "rank 3"});
  expectError([&] { rcjit::softmax(x, -4); }, {"softmax", "dim -4", "rank 3"});
  expectError([&] { rcjit::log_softmax(x, 5); }, {"log_softmax", "dim 5", "rank 3"});
  expectError([&] { rcjit::softmax(i, 0); }, {"softmax", "i64"});
}

} // namespace
