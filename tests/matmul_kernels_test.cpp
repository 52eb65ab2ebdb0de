// Generated matmul kernels: small linear/matmul steps compiled as one LLVM kernel with their
// epilogue (RCJIT_MATMUL_KERNELS, the cost model in targets/Target.h) give eager's results
// on every layout the CPU code generator treats specially (B packed or read in place, rows
// in blocks of four or one at a time, accumulator blocks of 64 and a tail, a range split
// between threads inside a row), and the planner keeps big products library calls.
#include <gtest/gtest.h>

#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include <rcjit/rcjit.h>

#include "jit/CompileGraph.h"
#include "targets/Target.h"
#include "targets/cpu/CpuKernels.h"
#include "tests/TestUtil.h"
#include "tools/Cli.h"
#include "tracer/Tracer.h"

using namespace rcjit;

namespace {

// Sets RCJIT_MATMUL_KERNELS for the scope (unset after it).
struct MatmulKernelsEnv {
  explicit MatmulKernelsEnv(const char *value) { setenv("RCJIT_MATMUL_KERNELS", value, 1); }
  ~MatmulKernelsEnv() { unsetenv("RCJIT_MATMUL_KERNELS"); }
};

using MatmulFn = std::function<Tensor(const std::vector<Tensor> &)>;

// The lowered program of fn on args under the current environment.
Program loweredProgram(const MatmulFn &fn, const std::vector<Tensor> &args) {
  TracedFn traced = [fn](const std::vector<Tensor> &a) { return std::vector<Tensor>{fn(a)}; };
  CompileRequest r = tools::traceRequest(traceFunction(traced, args), Target::cpu);
  r.stop = CompileStop::program;
  return compileGraph(r).program;
}

int librarySteps(const Program &p) {
  int n = 0;
  for (const Step &s : p.steps) n += s.kind == Step::Kind::library;
  return n;
}

// Compiled under `mode` (generated kernels: "always"; library calls: "never") equals eager.
// Untiered: every call runs the optimized program (a tiered compile's first calls run the
// traced ops or the quick tier, whose products are library calls).
void expectMatchesEager(const char *mode, const MatmulFn &fn, const std::vector<Tensor> &args,
                        double rtol, double atol, int wantLibrary) {
  MatmulKernelsEnv env(mode);
  EXPECT_EQ(librarySteps(loweredProgram(fn, args)), wantLibrary) << mode;
  auto compiled = compile([fn](const std::vector<Tensor> &a) { return fn(a); },
                          CompileOptions{.tiered = false});
  Tensor want = fn(args);
  for (int call = 0; call < 2; ++call) {
    Tensor got = compiled(args);
    ASSERT_EQ(got.shape(), want.shape());
    ASSERT_EQ(got.dtype(), want.dtype());
    EXPECT_TRUE(allclose(got.to(DType::f32), want.to(DType::f32), rtol, atol))
        << mode << ": max |diff| " << amax(abs(got.to(DType::f32) - want.to(DType::f32))).item();
  }
}

struct Case {
  std::string name;
  MatmulFn fn;
  std::vector<Tensor> args;
  int products = 1; // library steps when generated kernels are off
};

std::vector<Case> cases() {
  std::vector<Case> out;
  auto linearCase = [&](const std::string &name, Shape x, int64_t n, bool bias,
                        std::function<Tensor(const Tensor &)> act, uint64_t seed) {
    const int64_t k = x.back();
    Tensor w = Tensor::randn({n, k}, seed), b = Tensor::randn({n}, seed + 1);
    out.push_back({name,
                   [w, b, bias, act](const std::vector<Tensor> &a) {
                     return act(linear(a[0], w, bias ? b : Tensor()));
                   },
                   {Tensor::randn(x, seed + 2)}});
  };
  auto id = [](const Tensor &t) { return t; };
  auto reluSig = [](const Tensor &t) { return sigmoid(relu(t)); };
  // one row, few rows (a dot product per output), blocks of four rows plus a remainder
  linearCase("toy layer, one row", {1, 1, 10}, 10, true, reluSig, 10);
  linearCase("three rows, odd sizes", {3, 7}, 5, true, id, 20);
  linearCase(
      "rows in blocks and one by one", {2, 9, 17}, 13, true,
      [](const Tensor &t) { return gelu(t) * 0.5 + 1.0; }, 30);
  linearCase(
      "no bias", {6, 33}, 31, false, [](const Tensor &t) { return tanh(t); }, 40);
  // accumulators: one full block of 64 and a tail; two full blocks (a loop over blocks)
  linearCase("70 outputs", {5, 12}, 70, true, id, 50);
  linearCase(
      "128 outputs", {9, 8}, 128, false, [](const Tensor &t) { return silu(t); }, 60);
  // a range split between two threads inside a row: 63 rows x 70 outputs x 40
  linearCase("split rows", {63, 40}, 70, true, id, 70);
  // matmul: B read in place (row-major), transposed weights (packed), batched, broadcast
  Tensor b1 = Tensor::randn({5, 11}, 80);
  out.push_back({"matmul",
                 [b1](const std::vector<Tensor> &a) { return matmul(a[0], b1); },
                 {Tensor::randn({7, 5}, 81)}});
  Tensor wt = Tensor::randn({11, 5}, 90);
  out.push_back(
      {"transposed weights",
       [wt](const std::vector<Tensor> &a) { return relu(matmul(a[0], transpose(wt, 0, 1))); },
       {Tensor::randn({9, 5}, 91)}});
  out.push_back({"batched",
                 [](const std::vector<Tensor> &a) { return matmul(a[0], a[1]) * 2.0; },
                 {Tensor::randn({3, 6, 5}, 100), Tensor::randn({3, 5, 7}, 101)}});
  out.push_back({"broadcast batch",
                 [](const std::vector<Tensor> &a) { return matmul(a[0], a[1]); },
                 {Tensor::randn({2, 3, 9, 4}, 110), Tensor::randn({4, 6}, 111)}});
  out.push_back({"batched, transposed B",
                 [](const std::vector<Tensor> &a) { return matmul(a[0], transpose(a[1], 1, 2)); },
                 {Tensor::randn({2, 8, 5}, 120), Tensor::randn({2, 6, 5}, 121)}});
  Tensor w1 = Tensor::randn({16, 10}, 130), w2 = Tensor::randn({10, 16}, 131);
  out.push_back(
      {"two layers",
       [w1, w2](const std::vector<Tensor> &a) { return linear(relu(linear(a[0], w1)), w2) + a[0]; },
       {Tensor::randn({4, 10}, 132)},
       2});
  return out;
}

TEST(MatmulKernels, GeneratedKernelsEqualEagerOnEveryLayout) {
  for (const Case &c : cases()) {
    SCOPED_TRACE(c.name);
    expectMatchesEager("always", c.fn, c.args, 1e-4, 1e-4, 0);
    expectMatchesEager("never", c.fn, c.args, 1e-4, 1e-4, c.products);
  }
}

// Rows whose width is not a multiple of 8 are cut at the last multiple on AVX2 (the sums
// and the epilogue alike; targets/cpu/CpuKernels.cpp, SplitTails) and kept whole under
// AVX-512: both equal eager under each feature set this CPU runs (an AVX-512 host checks
// the AVX2 code too). Widths: under 8 (no cut), 10 and 13 (cut), 16 (none), 74 (a block of
// 64 and a tail of 10, cut); 128 rows run in blocks of four, 6 rows end with two rows one by
// one; exp and sigmoid in the epilogue.
TEST(MatmulKernels, RowsCutForAvx2EqualEagerUnderEachFeatureSet) {
  const std::vector<std::string> sets = test::runnableFeatureSets();
  if (sets.empty()) GTEST_SKIP() << "this CPU has neither AVX2 nor AVX-512";
  for (const std::string &set : sets) {
    cpu::setCpuFeatures(set);
    for (int64_t n : {5, 10, 13, 16, 74}) {
      for (int64_t rows : {6, 128}) {
        SCOPED_TRACE(set + ": " + std::to_string(rows) + " rows of " + std::to_string(n));
        Tensor w = Tensor::randn({n, 10}, 200 + static_cast<uint64_t>(n));
        Tensor b = Tensor::randn({n}, 300 + static_cast<uint64_t>(n));
        MatmulFn fn = [w, b](const std::vector<Tensor> &a) {
          Tensor y = linear(a[0], w, b);
          return sigmoid(relu(y)) + exp(y * 0.25);
        };
        expectMatchesEager("always", fn, {Tensor::randn({1, rows, 10}, 400)}, 1e-5, 1e-5, 0);
      }
    }
  }
  cpu::setCpuFeatures("native");
}

TEST(MatmulKernels, Bf16ComputesInF32) {
  Tensor w = Tensor::randn({12, 20}, 140).to(DType::bf16);
  Tensor b = Tensor::randn({12}, 141).to(DType::bf16);
  MatmulFn fn = [w, b](const std::vector<Tensor> &a) { return relu(linear(a[0], w, b)); };
  std::vector<Tensor> args = {Tensor::randn({6, 20}, 142).to(DType::bf16)};
  expectMatchesEager("always", fn, args, 2e-2, 2e-2, 0);
}

// Sets RCJIT_BF16_MATMUL for the scope (unset after it).
struct Bf16MatmulEnv {
  explicit Bf16MatmulEnv(const char *value) { setenv("RCJIT_BF16_MATMUL", value, 1); }
  ~Bf16MatmulEnv() { unsetenv("RCJIT_BF16_MATMUL"); }
};

// bf16 products the way a CPU without native bf16 runs them: in f32, the weight converted
// once per storage version; a weight written in place is converted again.
TEST(MatmulKernels, Bf16ViaF32ConvertsAWeightOncePerVersion) {
  Bf16MatmulEnv env("f32");
  Tensor w = Tensor::randn({300, 200}, 170).to(DType::bf16);
  Tensor b = Tensor::randn({300}, 171).to(DType::bf16);
  Tensor x = Tensor::randn({5, 200}, 172).to(DType::bf16);
  auto reference = [&] {
    return linear(x.to(DType::f32), w.to(DType::f32), b.to(DType::f32)).to(DType::bf16);
  };
  Tensor want = reference();
  for (int call = 0; call < 3; ++call) { // a conversion, then the cached copy
    Tensor got = linear(x, w, b);
    ASSERT_EQ(got.dtype(), DType::bf16);
    EXPECT_TRUE(allclose(got.to(DType::f32), want.to(DType::f32), 1e-2, 1e-2)) << call;
  }
  w.copy_(Tensor::randn({300, 200}, 173).to(DType::bf16)); // a new version
  b.copy_(Tensor::randn({300}, 174).to(DType::bf16));
  Tensor want2 = reference();
  EXPECT_FALSE(allclose(want2.to(DType::f32), want.to(DType::f32), 1e-2, 1e-2));
  EXPECT_TRUE(allclose(linear(x, w, b).to(DType::f32), want2.to(DType::f32), 1e-2, 1e-2));
  // compiled (the product a library-sized eager step) agrees too
  MatmulKernelsEnv library("never");
  auto f = compile([&](const Tensor &in) { return linear(in, w, b); });
  EXPECT_TRUE(allclose(f(x).to(DType::f32), want2.to(DType::f32), 1e-2, 1e-2));
  Bf16MatmulEnv bad("sometimes");
  std::string msg = test::errorOf([&] { linear(x, w, b); });
  EXPECT_NE(msg.find("RCJIT_BF16_MATMUL='sometimes'"), std::string::npos) << msg;
}

TEST(MatmulKernels, PlannerGeneratesSmallProductsAndKeepsBigOnesLibraryCalls) {
  unsetenv("RCJIT_MATMUL_KERNELS"); // the default cost model
  Tensor small = Tensor::randn({10, 10}, 150), big = Tensor::randn({512, 512}, 151);
  MatmulFn fn = [&](const std::vector<Tensor> &a) {
    return linear(relu(linear(a[0], small)), small * 2.0);
  };
  // toy64's layer at [1, 1, 10]: both products generated
  EXPECT_EQ(librarySteps(loweredProgram(fn, {Tensor::randn({1, 1, 10}, 152)})), 0);
  // a 512 x 512 x 512 product stays a oneDNN call
  MatmulFn large = [&](const std::vector<Tensor> &a) { return linear(a[0], big); };
  const Program p = loweredProgram(large, {Tensor::randn({512, 512}, 153)});
  EXPECT_EQ(librarySteps(p), 1);
  EXPECT_EQ(smallMatmulMacsFor(Target::cpu), kCpuSmallMatmulMacs);
  EXPECT_EQ(smallMatmulMacsFor(Target::cuda), 0);
}

TEST(MatmulKernels, UnknownSettingIsAClearError) {
  MatmulKernelsEnv env("sometimes");
  Tensor w = Tensor::randn({4, 4}, 160);
  auto f = compile([w](const Tensor &x) { return linear(x, w); });
  std::string msg = test::errorOf([&] { f(Tensor::randn({2, 4}, 161)); });
  EXPECT_NE(msg.find("RCJIT_MATMUL_KERNELS='sometimes'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("never, small or always"), std::string::npos) << msg;
}

} // namespace
