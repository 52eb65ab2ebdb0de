// Column sums (codegen::KernelBody::columnSum, the CPU's emitColumnSumLoop): a sum over the
// rows of a row-major tensor, as a bias's or a LayerNorm weight's gradient is, compiles to a
// loop over the rows around a vectorized loop along the columns, many outputs at once, with
// the kernel's epilogue after; the results equal eager's on every shape the loop cuts
// differently (tiles of 512 outputs and a shorter last one, a thread's range starting or
// ending inside a row of outputs, outer dims before the columns, symbolic sizes).
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <rcjit/rcjit.h>

#include "targets/cpu/CpuKernels.h"
#include "tests/TestUtil.h"

using namespace rcjit;

namespace {

using Fn = std::function<Tensor(const std::vector<Tensor> &)>;

// The output_code log captured from stderr for the scope's life (the compiles' IR).
struct CapturedIr {
  CapturedIr() {
    set_logs("output_code");
    testing::internal::CaptureStderr();
  }
  ~CapturedIr() {
    if (!taken) take();
  }
  std::string take() {
    taken = true;
    std::string ir = testing::internal::GetCapturedStderr();
    set_logs("");
    return ir;
  }
  bool taken = false;
};

// `fn` compiled (untiered: every call runs the optimized program) equals eager on `args`,
// two calls; returns the IR the compile printed (output_code).
std::string expectMatchesEager(const Fn &fn, const std::vector<Tensor> &args,
                               CompileOptions options = CompileOptions{.tiered = false}) {
  test::IsolatedCache cache; // compiled here, so its IR is printed
  CapturedIr ir;
  auto compiled = compile([fn](const std::vector<Tensor> &a) { return fn(a); }, options);
  Tensor want = fn(args);
  for (int call = 0; call < 2; ++call) {
    Tensor got = compiled(args);
    EXPECT_EQ(got.shape(), want.shape());
    EXPECT_TRUE(allclose(got, want, 1e-4, 1e-4)) << "call " << call;
  }
  return ir.take();
}

bool hasColumnSumLoop(const std::string &ir) { return ir.find("cs.r") != std::string::npos; }

} // namespace

TEST(ColumnSum, SumsOverRowsEqualEagerAndRunAsColumnLoops) {
  for (auto [rows, cols] : std::vector<std::pair<int64_t, int64_t>>{
           {512, 768}, {37, 129}, {5, 1000}, {300, 3}, {1, 17}, {64, 1537}}) {
    SCOPED_TRACE(std::to_string(rows) + " x " + std::to_string(cols));
    Tensor x = Tensor::randn({rows, cols}, 1), y = Tensor::randn({rows, cols}, 2);
    Tensor b = Tensor::randn({cols}, 3);
    // (one row: the size-1 dim is dropped, an elementwise kernel)
    const bool loop = rows > 1;
    // a bias's gradient
    EXPECT_EQ(
        hasColumnSumLoop(expectMatchesEager([](const auto &a) { return sum(a[0], {0}); }, {x})),
        loop);
    // a LayerNorm weight's gradient, with an epilogue after the sum
    EXPECT_EQ(
        hasColumnSumLoop(expectMatchesEager(
            [](const auto &a) { return tanh(sum(a[0] * a[1], {0}) * 2.0 + a[2]); }, {x, y, b})),
        loop);
  }
}

TEST(ColumnSum, LeadingDimsTransposedInputsAndBroadcastFactors) {
  // [4, 128, 768] over its first two dims (merged into one inner dim of 512 rows)
  Tensor g = Tensor::randn({4, 128, 96}, 4), h = Tensor::randn({4, 128, 96}, 5);
  EXPECT_TRUE(hasColumnSumLoop(expectMatchesEager(
      [](const auto &a) {
        return sum(a[0] * a[1], {0, 1});
      },
      {g, h})));
  // outer dims before the columns: [3, 40, 70] summed over dim 1, one row of 70 outputs per
  // index of dim 0
  Tensor z = Tensor::randn({3, 40, 70}, 6);
  EXPECT_TRUE(
      hasColumnSumLoop(expectMatchesEager([](const auto &a) { return sum(a[0], {1}); }, {z})));
  // the transposed view of a row-major tensor summed over its last dim is a column sum too
  Tensor t = Tensor::randn({200, 33}, 7);
  EXPECT_TRUE(hasColumnSumLoop(
      expectMatchesEager([](const auto &a) { return sum(transpose(a[0], 0, 1), {1}); }, {t})));
  // a factor broadcast along the columns (one per row)
  Tensor w = Tensor::randn({200, 1}, 8);
  expectMatchesEager([](const auto &a) { return sum(a[0] * a[1], {0}); }, {t, w});
  // a row sum is not a column sum: its default nest reads each row contiguously
  EXPECT_FALSE(
      hasColumnSumLoop(expectMatchesEager([](const auto &a) { return sum(a[0], {1}); }, {t})));
}

TEST(ColumnSum, SymbolicRowsAndColumns) {
  CompileOptions dynamicShapes{.dynamic = Dynamic::always, .tiered = false};
  for (auto [rows, cols] : std::vector<std::pair<int64_t, int64_t>>{{70, 600}, {9, 1100}}) {
    SCOPED_TRACE(std::to_string(rows) + " x " + std::to_string(cols));
    Tensor x = Tensor::randn({rows, cols}, 9), y = Tensor::randn({rows, cols}, 10);
    expectMatchesEager([](const auto &a) { return sum(a[0] * a[1], {0}) + 1.0; }, {x, y},
                       dynamicShapes);
  }
}

TEST(ColumnSum, EqualEagerUnderEachFeatureSet) {
  const std::vector<std::string> sets = test::runnableFeatureSets();
  if (sets.empty()) GTEST_SKIP() << "this CPU has neither AVX2 nor AVX-512";
  for (const std::string &set : sets) {
    SCOPED_TRACE(set);
    cpu::setCpuFeatures(set);
    Tensor x = Tensor::randn({129, 530}, 11), y = Tensor::randn({129, 530}, 12);
    expectMatchesEager([](const auto &a) { return sum(a[0] * a[1], {0}); }, {x, y});
  }
  cpu::setCpuFeatures("native");
}
