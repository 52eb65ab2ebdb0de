// The CUDA runtime without a GPU: clear Errors where a device is needed, the lowering the
// GPU gets (checked by running it on the CPU), GEMM layouts, the PTX cache, allocator classes.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>

#include <random>
#include <string>
#include <vector>

#include <rcjit/rcjit.h>

#include "jit/CompileGraph.h"
#include "jit/Pipeline.h"
#include "models/ModelLlama.h"
#include "models/Models.h"
#include "targets/Lower.h"
#include "targets/MatmulLayout.h"
#include "targets/cpu/CpuProgram.h"
#include "targets/cuda/CudaProgram.h"
#include "targets/cuda/CudaRuntime.h"
#include "tests/Ptxas.h"
#include "tests/TestUtil.h"
#include "tracer/Tracer.h"

namespace {

using namespace rcjit;
using rcjit::test::errorOf;

TEST(CudaRuntime, AllocationClasses) {
  EXPECT_EQ(cuda::allocationClass(0), 512u);
  EXPECT_EQ(cuda::allocationClass(1), 512u);
  EXPECT_EQ(cuda::allocationClass(512), 512u);
  EXPECT_EQ(cuda::allocationClass(513), 1024u);
  EXPECT_EQ(cuda::allocationClass((1u << 20) - 1), 1u << 20);
  EXPECT_EQ(cuda::allocationClass(1u << 20), 2u << 20);
  EXPECT_EQ(cuda::allocationClass((2u << 20) + 1), 4u << 20);
}

TEST(CudaRuntime, WithoutAGpuEveryDeviceUseIsAClearError) {
  if (cuda_available()) GTEST_SKIP() << "this machine has a CUDA device";
  const std::string why = cuda::unavailableReason();
  ASSERT_FALSE(why.empty());
  std::string e = errorOf([] { Tensor::zeros({2, 3}, DType::f32, Device::cuda()); });
  EXPECT_NE(e.find("CUDA is not available"), std::string::npos) << e;
  EXPECT_NE(e.find(why), std::string::npos) << e;
  e = errorOf([] { Tensor::ones({4}).to(Device::cuda()); });
  EXPECT_NE(e.find("CUDA is not available"), std::string::npos) << e;
  e = errorOf([] { Tensor::randn({4}, 1, DType::f32, Device::cuda(1)); });
  EXPECT_NE(e.find("CUDA is not available"), std::string::npos) << e;
  nn::Linear lin(4, 4);
  e = errorOf([&] { lin.to(Device::cuda()); });
  EXPECT_NE(e.find("CUDA is not available"), std::string::npos) << e;
  EXPECT_EQ(lin.weight.device(), Device::cpu()) << "a failed move leaves the module as it was";
  CompileOptions o;
  o.target = Target::cuda;
  e = errorOf([&] { compile([](const Tensor &x) { return x + 1; }, o); });
  EXPECT_NE(e.find("Target::cuda needs an NVIDIA GPU"), std::string::npos) << e;
}

// ---- the lowering the GPU gets, run on the CPU ---------------------------------------

struct Lowered {
  Program program;
  std::vector<Tensor> inputs; // args then captured
};

Lowered lowerFor(Target target, const TracedFn &fn, const std::vector<Tensor> &args) {
  Trace t = traceFunction(fn, args, /*meta=*/false);
  Lowered l;
  l.inputs = t.args;
  l.inputs.insert(l.inputs.end(), t.captured.begin(), t.captured.end());
  std::vector<Shape> strides;
  for (const Tensor &in : l.inputs) strides.push_back(in.strides());
  CompileRequest r;
  r.exec.target = target;
  r.stop = CompileStop::program; // the GPU's program, without a GPU
  r.samples.push_back({t.graph, strides});
  l.program = compileGraph(std::move(r)).program;
  return l;
}

// The cuda lowering of fn: every step runs on the GPU, GEMMs carry no bias or post-ops; run
// on the CPU executor, it computes what eager does.
void checkGpuLowering(const std::string &what, const TracedFn &fn,
                      const std::vector<Tensor> &args) {
  SCOPED_TRACE(what);
  Lowered l = lowerFor(Target::cuda, fn, args);
  int gemms = 0;
  for (const Step &s : l.program.steps) {
    EXPECT_EQ(cuda::unsupportedStep(l.program, s), "") << s.note;
    if (s.kind != Step::Kind::library) continue;
    ++gemms;
    EXPECT_TRUE(s.postOps.empty()) << s.note;
    EXPECT_LE(s.operands.size(), 2u) << s.note << ": the bias belongs in the next kernel";
  }
  EXPECT_GT(gemms, 0);
  std::vector<const Tensor *> in;
  for (const Tensor &t : l.inputs) in.push_back(&t);
  auto cpu = cpu::CpuProgram::create(l.program, "cuda_lowering_on_cpu");
  std::vector<Tensor> got = cpu->run(in.data(), in.size());
  std::vector<Tensor> want = fn(args);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_TRUE(allclose(got[i], want[i], 1e-4, 1e-5)) << "output " << i;
  }
}

TEST(CudaLowering, ModelsLowerToGpuStepsThatComputeTheSame) {
  tools::ModelConfig c;
  c.batch = 2;
  c.seq = 16;
  c.layers = 3;
  auto toy = tools::findModel("toy64").build(c);
  checkGpuLowering(
      "toy64", [&](const std::vector<Tensor> &v) { return std::vector<Tensor>{toy->forward(v)}; },
      toy->makeInputs(c));
  tools::LlamaConfig lc;
  lc.hidden = 32;
  lc.heads = 4;
  lc.kvHeads = 2;
  lc.intermediate = 64;
  auto layers = tools::buildLlama(lc, c, /*layersOnly=*/true);
  checkGpuLowering(
      "llama layers",
      [&](const std::vector<Tensor> &v) { return std::vector<Tensor>{layers->forward(v)}; },
      layers->makeInputs(c));
}

// RCJIT_MATMUL_KERNELS=never for the scope: the CPU's small linear stays a oneDNN call.
struct CpuLibraryMatmulsEnv {
  CpuLibraryMatmulsEnv() { setenv("RCJIT_MATMUL_KERNELS", "never", 1); }
  ~CpuLibraryMatmulsEnv() { unsetenv("RCJIT_MATMUL_KERNELS"); }
};

TEST(CudaLowering, LinearBiasIsSplitOnlyForCuda) {
  CpuLibraryMatmulsEnv library;
  nn::Linear lin(8, 4);
  auto fn = [&](const std::vector<Tensor> &v) { return std::vector<Tensor>{relu(lin(v[0]))}; };
  std::vector<Tensor> x = {Tensor::randn({5, 8}, 3)};
  Lowered cpu = lowerFor(Target::cpu, fn, x);
  Lowered gpu = lowerFor(Target::cuda, fn, x);
  auto libraryStep = [](const Program &p) {
    for (const Step &s : p.steps) {
      if (s.kind == Step::Kind::library) return s;
    }
    return Step{};
  };
  Step c = libraryStep(cpu.program), g = libraryStep(gpu.program);
  EXPECT_EQ(c.operands.size(), 3u) << "oneDNN adds the bias";
  EXPECT_EQ(c.postOps.size(), 1u) << "and applies relu";
  EXPECT_EQ(g.operands.size(), 2u);
  EXPECT_TRUE(g.postOps.empty());
  EXPECT_EQ(gpu.program.kernels.size(), 1u) << "bias + relu: one kernel after the GEMM\n"
                                            << printProgram(gpu.program);
}

// cross_entropy's target check is a host read, which the cuda target has no step for: its
// pipeline drops it, and the kernels make the loss NaN for an out-of-range target instead of
// counting the row as 0 (silently wrong). Good targets compute what eager does.
TEST(CudaLowering, CrossEntropyWithoutItsHostCheckIsNaNForABadTarget) {
  nn::Linear head(6, 10, true, 3);
  TracedFn fn = [&](const std::vector<Tensor> &v) {
    return std::vector<Tensor>{cross_entropy(head(v[0]), v[1])};
  };
  Tensor x = Tensor::randn({3, 6}, 4);
  Tensor good = Tensor::from_vector(std::vector<int64_t>{1, 9, -100}, {3});
  checkGpuLowering("cross_entropy", fn, {x, good});
  Lowered l = lowerFor(Target::cuda, fn, {x, good});
  for (const Step &s : l.program.steps) EXPECT_NE(s.op, OpKind::check_target) << s.note;
  auto cpu = cpu::CpuProgram::create(l.program, "cuda_lowering_on_cpu");
  for (int64_t v : {int64_t{10}, int64_t{-1}, int64_t{1} << 40}) {
    Tensor bad = Tensor::from_vector(std::vector<int64_t>{1, v, -100}, {3});
    std::vector<Tensor> in = l.inputs;
    in[1] = bad;
    std::vector<const Tensor *> ptrs;
    for (const Tensor &t : in) ptrs.push_back(&t);
    std::vector<Tensor> got = cpu->run(ptrs.data(), ptrs.size());
    EXPECT_TRUE(std::isnan(got.at(0).item())) << "target " << v << ": " << got[0].item();
  }
  // the CPU target keeps the check as a step of the program
  Lowered c = lowerFor(Target::cpu, fn, {x, good});
  int checks = 0;
  for (const Step &s : c.program.steps) checks += s.op == OpKind::check_target;
  EXPECT_EQ(checks, 1) << printProgram(c.program);
}

TEST(CudaLowering, UnsupportedStepsAreNamed) {
  nn::Embedding emb(10, 4);
  Lowered l = lowerFor(Target::cuda,
                       [&](const std::vector<Tensor> &v) { return std::vector<Tensor>{emb(v[0])}; },
                       {Tensor::from_vector(std::vector<int64_t>{1, 2, 3}, {3})});
  std::string why;
  for (const Step &s : l.program.steps) why += cuda::unsupportedStep(l.program, s);
  EXPECT_NE(why.find("embedding"), std::string::npos) << why;
  EXPECT_NE(why.find("no GPU implementation"), std::string::npos) << why;
}

// ---- GEMM layouts ------------------------------------------------------------------

TEST(MatmulLayout, LinearAndBatchedMatmul) {
  Program p;
  auto value = [&](Shape shape, Shape strides) {
    Value v;
    v.shape = std::move(shape);
    v.strides = std::move(strides);
    p.values.push_back(v);
    return static_cast<int>(p.values.size()) - 1;
  };
  Step lin;
  lin.kind = Step::Kind::library;
  lin.op = OpKind::linear;
  lin.operands = {value({2, 3, 8}, {24, 8, 1}), value({5, 8}, {8, 1}), value({5}, {1})};
  MatmulLayout l;
  ASSERT_TRUE(matmulLayout(p, lin, l));
  EXPECT_EQ(l.batch, 1);
  EXPECT_EQ(l.m, 6);
  EXPECT_EQ(l.k, 8);
  EXPECT_EQ(l.n, 5);
  EXPECT_EQ(l.a.row, 8);
  EXPECT_EQ(l.a.col, 1);
  EXPECT_EQ(l.b.row, 1) << "B = W^T: k steps along W's rows";
  EXPECT_EQ(l.b.col, 8);
  EXPECT_TRUE(l.bias);
  EXPECT_EQ(l.c.row, 5);

  Step mm;
  mm.kind = Step::Kind::library;
  mm.op = OpKind::matmul;
  // a: [2, 4, 3, 6] contiguous; b: a transposed view of [2, 4, 7, 6] -> [2, 4, 6, 7]
  mm.operands = {value({2, 4, 3, 6}, {72, 18, 6, 1}), value({2, 4, 6, 7}, {168, 42, 1, 6})};
  ASSERT_TRUE(matmulLayout(p, mm, l));
  EXPECT_EQ(l.batch, 8);
  EXPECT_EQ(l.a.batch, 18);
  EXPECT_EQ(l.b.batch, 42);
  EXPECT_EQ(l.b.row, 1);
  EXPECT_EQ(l.b.col, 6);
  EXPECT_EQ(l.c.batch, 21);

  // x [2, 3, 6] @ w [6, 7] (an exported projection): one GEMM over x's 6 rows
  mm.operands = {value({2, 3, 6}, {18, 6, 1}), value({6, 7}, {7, 1})};
  ASSERT_TRUE(matmulLayout(p, mm, l));
  EXPECT_EQ(l.batch, 1);
  EXPECT_EQ(l.m, 6);
  EXPECT_EQ(l.k, 6);
  EXPECT_EQ(l.n, 7);
  EXPECT_EQ(l.a.row, 6);
  EXPECT_EQ(l.b.row, 7);
  EXPECT_EQ(l.b.col, 1);
  EXPECT_EQ(l.c.row, 7);
  // ... unless x's rows are not equally spaced (a slice of its middle dim)
  mm.operands = {value({2, 3, 6}, {24, 6, 1}), value({6, 7}, {7, 1})};
  EXPECT_FALSE(matmulLayout(p, mm, l));

  // broadcast batches and batch dims that do not collapse are declined
  mm.operands = {value({2, 3, 6}, {18, 6, 1}), value({1, 6, 7}, {42, 7, 1})};
  EXPECT_FALSE(matmulLayout(p, mm, l));
  mm.operands = {value({2, 4, 3, 6}, {144, 18, 6, 1}), value({2, 4, 6, 7}, {168, 42, 7, 1})};
  EXPECT_FALSE(matmulLayout(p, mm, l)) << "a's batch dims are not equally spaced";
}

// ---- the PTX cache -------------------------------------------------------------------

TEST(CudaPtxCache, PtxIsACacheEntryKeyedByArch) {
  // a kernel no other test builds: its key cannot be in the cache yet
  LoopKernel k;
  k.name = "fill";
  k.domain = {SizeExpr::constant(64)};
  k.numOuter = 1;
  k.tensors = {KernelTensor{DType::f32, {SizeExpr::constant(1)}, true}};
  KernelStmt c;
  c.kind = KernelStmt::Kind::constant;
  c.dtype = DType::f32;
  c.value = static_cast<double>(std::random_device{}() % 1000000) + 0.25;
  KernelStmt st;
  st.kind = KernelStmt::Kind::store;
  st.args = {0};
  st.tensor = 0;
  st.dtype = DType::f32;
  k.stmts = {c, st};
  cuda::PtxOptions o;
  o.arch = "sm_80";
  bool generated = false;
  std::string first = cuda::cachedPtx({k}, "cache_test", o, generated);
  EXPECT_TRUE(generated);
  std::string second = cuda::cachedPtx({k}, "cache_test", o, generated);
  EXPECT_FALSE(generated) << "the second lookup is a cache hit";
  EXPECT_EQ(first, second);
  o.arch = "sm_90";
  o.ptxVersion = 78;
  std::string other = cuda::cachedPtx({k}, "cache_test", o, generated);
  EXPECT_TRUE(generated) << "another arch is another entry";
  EXPECT_NE(other.find(".target sm_90"), std::string::npos);
  std::string ir;
  cuda::cachedPtx({k}, "cache_test", o, generated, &ir);
  EXPECT_TRUE(generated) << "asking for the IR compiles";
  EXPECT_NE(ir.find("define"), std::string::npos);
  RCJIT_SKIP_WITHOUT_PTXAS();
  EXPECT_TRUE(rcjit::test::assembles(first, "sm_80"));
}

} // namespace
