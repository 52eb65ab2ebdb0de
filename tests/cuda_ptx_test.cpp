// The CUDA target without a GPU: PTX for real kernels (every conformance case, toy64 in every
// float dtype), each module assembled by ptxas for sm_80 and sm_90.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <iostream>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <rcjit/rcjit.h>

#include "jit/CompileGraph.h"
#include "jit/Pipeline.h"
#include "jit/autograd/Joint.h"
#include "jit/autograd/Partition.h"
#include "models/Models.h"
#include "targets/Lower.h"
#include "targets/Target.h"
#include "targets/cpu/CpuKernels.h"
#include "targets/cuda/CudaDriver.h"
#include "targets/cuda/Libdevice.h"
#include "targets/cuda/PtxCodegen.h"
#include "tests/AutogradTestUtil.h"
#include "tests/GpuTest.h"
#include "tests/Ptxas.h"
#include "tests/TestUtil.h"
#include "tests/conformance/OpCases.h"
#include "tracer/TensorImpl.h"
#include "tracer/Tracer.h"

namespace {

using namespace rcjit;
using rcjit::test::assembles;
using rcjit::test::errorOf;
using K = KernelStmt::Kind;

const char *const kArchs[] = {"sm_80", "sm_90"};

// The loop kernels the CUDA target builds for fn(inputs): traced on shapes, cuda's passes
// (its decompositions: batched-GEMM matmuls, conv2d as GEMMs) and lowering (no library
// epilogues; embedding as gather and scatter-add kernels).
std::vector<LoopKernel> kernelsOf(const TracedFn &fn, const std::vector<Tensor> &inputs) {
  Trace t = traceFunction(fn, inputs, /*meta=*/true);
  Graph g = runPipeline(t.graph, defaultPasses(pipelineOptionsFor(Target::cuda)));
  std::vector<Shape> strides;
  for (const Tensor &a : t.args) strides.push_back(a.strides());
  for (const Tensor &a : t.captured) strides.push_back(a.strides());
  return lower(g, strides, lowerOptionsFor(Target::cuda)).kernels;
}

// c[i] = a[i] + b[i] over n f32 elements.
LoopKernel addKernel(const std::string &name, int64_t n) {
  LoopKernel k;
  k.name = name;
  k.domain = {SizeExpr::constant(n)};
  k.numOuter = 1;
  for (int t = 0; t < 3; ++t) k.tensors.push_back({DType::f32, {SizeExpr::constant(1)}, t == 2});
  k.stmts = {{K::load, OpKind::add, {}, 0, DType::f32, 0},
             {K::load, OpKind::add, {}, 1, DType::f32, 0},
             {K::compute, OpKind::add, {0, 1}, -1, DType::f32, 0},
             {K::store, OpKind::add, {2}, 2, DType::f32, 0}};
  return k;
}

// y[r] = log(sum_c x[r, c]) over a [rows, cols] f32 input: a reduction and a libdevice call.
LoopKernel logSumKernel(const std::string &name, int64_t rows, int64_t cols) {
  LoopKernel k;
  k.name = name;
  k.domain = {SizeExpr::constant(rows), SizeExpr::constant(cols)};
  k.numOuter = 1;
  k.tensors.push_back({DType::f32, {SizeExpr::constant(cols), SizeExpr::constant(1)}, false});
  k.tensors.push_back({DType::f32, {SizeExpr::constant(1), SizeExpr::constant(0)}, true});
  k.stmts = {{K::load, OpKind::add, {}, 0, DType::f32, 0},
             {K::reduce, OpKind::sum, {0}, -1, DType::f32, 0},
             {K::compute, OpKind::log, {1}, -1, DType::f32, 0},
             {K::store, OpKind::add, {2}, 1, DType::f32, 0}};
  return k;
}

// y[r] = argmax_c x[r, c] (i64) over a [rows, cols] f32 input.
LoopKernel argmaxKernel(const std::string &name, int64_t rows, int64_t cols) {
  LoopKernel k;
  k.name = name;
  k.domain = {SizeExpr::constant(rows), SizeExpr::constant(cols)};
  k.numOuter = 1;
  k.tensors.push_back({DType::f32, {SizeExpr::constant(cols), SizeExpr::constant(1)}, false});
  k.tensors.push_back({DType::i64, {SizeExpr::constant(1), SizeExpr::constant(0)}, true});
  k.stmts = {{K::load, OpKind::add, {}, 0, DType::f32, 0},
             {K::reduce, OpKind::argmax, {0}, -1, DType::i64, 0},
             {K::store, OpKind::add, {1}, 1, DType::i64, 0}};
  return k;
}

// m[r] = mean_c x[r, c] and y[r, c] = x[r, c] - m[r] over a [rows, cols] f32 input: an
// outer-level store and an inner-level pass after the reduction.
LoopKernel centerKernel(const std::string &name, int64_t rows, int64_t cols) {
  LoopKernel k;
  k.name = name;
  k.domain = {SizeExpr::constant(rows), SizeExpr::constant(cols)};
  k.numOuter = 1;
  const std::vector<SizeExpr> rowMajor = {SizeExpr::constant(cols), SizeExpr::constant(1)};
  k.tensors.push_back({DType::f32, rowMajor, false});
  k.tensors.push_back({DType::f32, {SizeExpr::constant(1), SizeExpr::constant(0)}, true});
  k.tensors.push_back({DType::f32, rowMajor, true});
  k.stmts = {{K::load, OpKind::add, {}, 0, DType::f32, 0},
             {K::reduce, OpKind::mean, {0}, -1, DType::f32, 0},
             {K::store, OpKind::add, {1}, 1, DType::f32, 0},
             {K::compute, OpKind::sub, {0, 1}, -1, DType::f32, 0},
             {K::store, OpKind::add, {3}, 2, DType::f32, 0}};
  return k;
}

size_t count(const std::string &text, const std::string &what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

TEST(CudaPtx, EntriesVersionAndTarget) {
  cuda::PtxModule m = cuda::compilePtx({addKernel("k_add", 1000)}, "test.add");
  EXPECT_EQ(m.arch, "sm_80");
  EXPECT_EQ(m.ptxVersion, 70); // the lowest PTX ISA sm_80 accepts
  EXPECT_NE(m.ptx.find(".version 7.0"), std::string::npos) << m.ptx;
  EXPECT_NE(m.ptx.find(".target sm_80"), std::string::npos) << m.ptx;
  EXPECT_NE(m.ptx.find(".entry k_add("), std::string::npos) << m.ptx;
  EXPECT_NE(m.ptx.find("%ctaid.x"), std::string::npos) << "a grid-stride loop";
  EXPECT_NE(m.ptx.find("%nctaid.x"), std::string::npos);
  EXPECT_EQ(m.ptx.find(".extern"), std::string::npos) << "PTX must not call undefined code";
  EXPECT_FALSE(m.usesLibdevice);
  EXPECT_EQ(m.entries, std::vector<std::string>{"k_add"});

  cuda::PtxOptions o;
  o.arch = "sm_90";
  o.ptxVersion = 85;
  o.wantLlvmIr = true;
  cuda::PtxModule n = cuda::compilePtx({addKernel("a", 8), logSumKernel("b", 4, 5)}, "test.two", o);
  EXPECT_NE(n.ptx.find(".version 8.5"), std::string::npos);
  EXPECT_NE(n.ptx.find(".target sm_90"), std::string::npos);
  EXPECT_EQ(count(n.ptx, ".entry "), 2u);
  EXPECT_TRUE(n.usesLibdevice) << "f32 log comes from libdevice";
  EXPECT_EQ(n.llvmIr.find("@__nv_logf"), std::string::npos) << "inlined, not called";
  EXPECT_NE(n.llvmIr.find("ptx_kernel void @b("), std::string::npos) << n.llvmIr;
}

// Symbolic sizes are read from the syms array at run time, as on the CPU.
TEST(CudaPtx, SymbolicSizesAssemble) {
  LoopKernel k = addKernel("k_sym", 1);
  k.domain = {SizeExpr{1, {0}}};
  LoopKernel r = logSumKernel("k_rows", 1, 1);
  r.domain = {SizeExpr{1, {0}}, SizeExpr{2, {1}}};
  r.tensors[0].strides = {SizeExpr{2, {1}}, SizeExpr::constant(1)};
  cuda::PtxModule m = cuda::compilePtx({k, r}, "test.symbolic");
  EXPECT_NE(m.ptx.find("k_sym_param_1"), std::string::npos) << "syms is read: " << m.ptx;
  if (rcjit::test::havePtxas()) {
    EXPECT_TRUE(assembles(m.ptx, "sm_80"));
  }
}

// The PTX of one entry of a module: from its `.entry` line to the next one.
std::string entryText(const std::string &ptx, const std::string &name) {
  size_t at = ptx.find(".entry " + name + "(");
  if (at == std::string::npos) return "";
  return ptx.substr(at, ptx.find(".entry ", at + 1) - at);
}

// Kernels with inner dims run a warp per outer point and combine lanes with 5 butterfly
// shuffles (xor 16 ... 1) per 32 bits carried: an f64 sum total is 2 words, argmax's (f32
// value, i64 index) 3. Elementwise kernels keep a thread per point and never shuffle.
TEST(CudaPtx, ReductionsRunAWarpPerPoint) {
  const std::vector<LoopKernel> ks = {addKernel("k_add", 1000), logSumKernel("k_sum", 4, 5),
                                      argmaxKernel("k_argmax", 3, 100),
                                      centerKernel("k_center", 7, 33)};
  for (const char *arch : kArchs) {
    cuda::PtxOptions o;
    o.arch = arch;
    cuda::PtxModule m = cuda::compilePtx(ks, "test.warp", o);
    ASSERT_EQ(m.lanesPerPoint, (std::vector<int>{1, 32, 32, 32})) << "aligned with entries";
    for (size_t i = 0; i < ks.size(); ++i) {
      EXPECT_EQ(cuda::lanesPerPoint(ks[i], o), m.lanesPerPoint[i]) << "known without the PTX";
    }
    EXPECT_EQ(count(entryText(m.ptx, "k_add"), "shfl"), 0u) << m.ptx;
    EXPECT_NE(entryText(m.ptx, "k_add").find("%nctaid.x"), std::string::npos);
    EXPECT_EQ(count(entryText(m.ptx, "k_sum"), "shfl.sync.bfly.b32"), 10u) << m.ptx;
    EXPECT_EQ(count(entryText(m.ptx, "k_argmax"), "shfl.sync.bfly.b32"), 15u) << m.ptx;
    EXPECT_EQ(count(entryText(m.ptx, "k_center"), "shfl.sync.bfly.b32"), 10u) << m.ptx;
    EXPECT_EQ(count(m.ptx, "trap;"), 3u) << "a launch with a partial warp traps";
    if (rcjit::test::havePtxas()) {
      EXPECT_TRUE(assembles(m.ptx, arch));
    }
  }
  // shfl.sync needs PTX ISA 6.0: below it, a reduction keeps one thread per point
  cuda::PtxOptions old;
  old.arch = "sm_50"; // PTX 4.0
  cuda::PtxModule m = cuda::compilePtx({logSumKernel("k_sum", 4, 5)}, "test.old", old);
  EXPECT_EQ(m.lanesPerPoint, std::vector<int>{1});
  EXPECT_EQ(cuda::lanesPerPoint(logSumKernel("k_sum", 4, 5), old), 1);
  EXPECT_EQ(count(m.ptx, "shfl"), 0u);
  old.ptxVersion = 60;
  EXPECT_EQ(cuda::compilePtx({logSumKernel("k_sum", 4, 5)}, "test.60", old).lanesPerPoint,
            std::vector<int>{32});
}

TEST(CudaPtx, BadOptionsAreClearErrors) {
  cuda::PtxOptions o;
  o.arch = "sm_13";
  EXPECT_NE(errorOf([&] {
              cuda::compilePtx({addKernel("k", 4)}, "m", o);
            }).find("unknown GPU architecture 'sm_13'"),
            std::string::npos);
  o.arch = "sm_90";
  o.ptxVersion = 70; // sm_90 needs PTX 7.8
  EXPECT_NE(errorOf([&] { cuda::compilePtx({addKernel("k", 4)}, "m", o); }).find("cannot target"),
            std::string::npos);
  EXPECT_NE(errorOf([&] {
              cuda::compilePtx({addKernel("k", 4), addKernel("k", 5)}, "m");
            }).find("two kernels are named 'k'"),
            std::string::npos);
  LoopKernel bad = addKernel("k", 4);
  bad.stmts[2].args = {0, 7};
  EXPECT_FALSE(errorOf([&] { cuda::compilePtx({bad}, "m"); }).empty());
}

TEST(CudaPtx, TargetForDevice) {
  cuda::PtxOptions a100 = cuda::ptxOptionsForDevice(8, 0, 84);
  EXPECT_EQ(a100.arch, "sm_80");
  EXPECT_EQ(a100.ptxVersion, 84);
  cuda::PtxOptions h100 = cuda::ptxOptionsForDevice(9, 0, 90); // CUDA 13 driver
  EXPECT_EQ(h100.arch, "sm_90");
  EXPECT_EQ(h100.ptxVersion, 85) << "capped at what LLVM 19 emits";
  EXPECT_EQ(cuda::ptxOptionsForDevice(10, 0, 87).arch, "sm_90") << "Blackwell runs sm_90 PTX";
  EXPECT_EQ(cuda::ptxOptionsForDevice(12, 0, 87).arch, "sm_90");
  EXPECT_EQ(cuda::ptxOptionsForDevice(8, 6, 78).arch, "sm_86");
  EXPECT_EQ(cuda::ptxOptionsForDevice(8, 8, 78).arch, "sm_87") << "the newest one not newer";
  EXPECT_EQ(cuda::ptxOptionsForDevice(7, 5, 79).ptxVersion, 78) << "a version LLVM has";
  EXPECT_NE(errorOf([] { cuda::ptxOptionsForDevice(9, 0, 75); }).find("update the NVIDIA driver"),
            std::string::npos);
  EXPECT_NE(errorOf([] { cuda::ptxOptionsForDevice(3, 5, 85); }).find("older than every"),
            std::string::npos);
  EXPECT_EQ(cuda::minPtxVersion("sm_90"), 78);
  EXPECT_EQ(cuda::maxPtxVersion(), 85);
  EXPECT_EQ(cuda::knownArchs().back(), "sm_90a");
}

TEST(CudaPtx, LaunchDims) {
  cuda::LaunchDims one = cuda::launchDims(1, 108);
  EXPECT_EQ(one.grid, 1u);
  EXPECT_EQ(one.block, 1u);
  cuda::LaunchDims d = cuda::launchDims(1000, 108);
  EXPECT_EQ(d.block, 256u);
  EXPECT_EQ(d.grid, 4u);
  EXPECT_EQ(cuda::launchDims(int64_t{1} << 40, 108).grid, 32u * 108); // grid-stride covers it
  EXPECT_EQ(cuda::launchDims(0, 0).grid, 1u);
  EXPECT_EQ(cuda::launchDims(1000, 108, 1).grid, 4u) << "1 lane is the default";

  // a warp per point: 8 points per block of 256 threads; fewer points, fewer warps
  cuda::LaunchDims w = cuda::launchDims(1000, 108, 32);
  EXPECT_EQ(w.block, 256u);
  EXPECT_EQ(w.grid, 125u);
  cuda::LaunchDims few = cuda::launchDims(5, 108, 32);
  EXPECT_EQ(few.block, 160u);
  EXPECT_EQ(few.grid, 1u);
  EXPECT_EQ(cuda::launchDims(1, 108, 32).block, 32u);
  EXPECT_EQ(cuda::launchDims(0, 0, 32).block, 32u) << "whole warps, even for no points";
  EXPECT_EQ(cuda::launchDims(int64_t{1} << 40, 108, 32).grid, 32u * 108) << "warp-stride";
  EXPECT_EQ(cuda::launchDims(int64_t{1} << 40, 0, 32).grid, 0x7fffffffu);
}

TEST(CudaPtx, LibdevicePathHonoursTheEnvironment) {
  if (!std::getenv("RCJIT_LIBDEVICE") &&
      std::filesystem::exists(RCJIT_CUDA_ROOT "/nvvm/libdevice/libdevice.10.bc")) {
    EXPECT_FALSE(cuda::libdevicePath().empty()) << "the toolkit rcjit was built with has it";
  }
  rcjit::test::ScopedEnv env("RCJIT_LIBDEVICE", "/some/where/libdevice.10.bc");
  EXPECT_EQ(cuda::libdevicePath(), "/some/where/libdevice.10.bc");
}

// libdevice is read once per process, so this runs in a fresh one (the threadsafe
// death-test style re-runs only this test): without libdevice, kernels without such math
// still compile, and one that needs it is a clear error.
TEST(CudaPtxDeathTest, MissingLibdeviceIsAClearError) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  rcjit::test::ScopedEnv env("RCJIT_LIBDEVICE", "/nonexistent/libdevice.10.bc");
  EXPECT_EXIT(
      {
        cuda::compilePtx({addKernel("k_add", 8)}, "plain");
        std::fprintf(stderr, "%s\n", errorOf([] {
                                       cuda::compilePtx({logSumKernel("k_log", 2, 3)}, "math");
                                     }).c_str());
        std::exit(0);
      },
      ::testing::ExitedWithCode(0),
      "compilePtx: 'math' needs __nv_logf: cannot read libdevice at "
      "/nonexistent/libdevice.10.bc: No such file or directory");
}

TEST(CudaPtx, BrokenPtxFailsPtxas) {
  RCJIT_SKIP_WITHOUT_PTXAS();
  std::string ptx = cuda::compilePtx({addKernel("k_add", 1000)}, "test.add").ptx;
  ASSERT_TRUE(assembles(ptx, "sm_80"));
  std::string broken = ptx;
  broken.replace(broken.find("add.s64"), 7, "add.q64"); // no such instruction type
  rcjit::test::PtxasResult r = rcjit::test::runPtxas(broken, "sm_80");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.log.find("error"), std::string::npos) << r.log;
  EXPECT_FALSE(assembles(broken, "sm_80"));
  EXPECT_FALSE(assembles(ptx, "sm_00")) << "an unknown arch is an error too";
}

// Runs job(i) for i in [0, n) on a few threads (compilePtx is thread-safe; ptxas is a process).
void parallelFor(size_t n, const std::function<void(size_t)> &job) {
  std::atomic<size_t> next{0};
  auto worker = [&] {
    for (size_t i = next++; i < n; i = next++) job(i);
  };
  std::vector<std::thread> pool;
  const unsigned threads = std::clamp(std::thread::hardware_concurrency(), 1u, 4u);
  for (unsigned t = 1; t < threads; ++t) pool.emplace_back(worker);
  worker();
  for (std::thread &t : pool) t.join();
}

// Every case of the conformance table, in each of its dtypes: the kernels lowering makes
// become one PTX module per case (all its dtypes), generated for sm_80 (PTX 7.0, the lowest
// it takes) and for sm_90 (PTX 8.5, the newest LLVM 19 emits), each assembled by ptxas for
// its arch.
TEST(CudaPtx, ConformanceKernelsAssemble) {
  RCJIT_SKIP_WITHOUT_PTXAS();
  const auto t0 = std::chrono::steady_clock::now();
  struct Module {
    std::string name;
    std::vector<LoopKernel> kernels;
  };
  std::vector<Module> modules;
  size_t kernels = 0;
  const std::vector<conformance::OpCase> &cases = conformance::cases();
  for (size_t c = 0; c < cases.size(); ++c) {
    const conformance::OpCase &oc = cases[c];
    Module mod{oc.name, {}};
    for (DType dt : oc.dtypes) {
      std::vector<Tensor> in;
      for (size_t i = 0; i < oc.ins.size(); ++i) {
        in.push_back(conformance::makeInput(oc.ins[i], dt, conformance::seedOf(oc.name) + i));
      }
      std::vector<LoopKernel> ks;
      try {
        ks = kernelsOf(oc.fn, in);
      } catch (const std::exception &e) {
        ADD_FAILURE() << oc.name << " in " << dtypeName(dt) << ": lowering threw " << e.what();
        continue;
      }
      for (LoopKernel &k : ks) {
        k.name = "c" + std::to_string(c) + "_" + std::string(dtypeName(dt)) + "_" + k.name;
        mod.kernels.push_back(std::move(k));
      }
    }
    kernels += mod.kernels.size();
    if (!mod.kernels.empty()) modules.push_back(std::move(mod)); // else: library steps only
  }
  struct Outcome {
    std::string failure; // empty: generated, every entry present, and ptxas accepted it
    bool libdevice = false;
  };
  std::vector<Outcome> outcomes(2 * modules.size());
  parallelFor(outcomes.size(), [&](size_t job) {
    const Module &mod = modules[job / 2];
    cuda::PtxOptions o;
    o.arch = kArchs[job % 2];
    o.ptxVersion = job % 2 ? cuda::maxPtxVersion() : 0; // both ends of the ISA range
    Outcome &r = outcomes[job];
    try {
      cuda::PtxModule m = cuda::compilePtx(mod.kernels, "conformance." + mod.name, o);
      r.libdevice = m.usesLibdevice;
      if (count(m.ptx, ".entry ") != mod.kernels.size()) r.failure = "entries missing\n";
      ::testing::AssertionResult ok = assembles(m.ptx, o.arch, "-O0");
      if (!ok) r.failure += ok.message();
    } catch (const std::exception &e) {
      r.failure = e.what();
    }
  });
  size_t withLibdevice = 0;
  for (size_t job = 0; job < outcomes.size(); ++job) {
    EXPECT_EQ(outcomes[job].failure, "")
        << "case " << modules[job / 2].name << " for " << kArchs[job % 2];
    withLibdevice += outcomes[job].libdevice ? 1 : 0;
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::cout << "[ptxas] " << kernels << " conformance kernels in " << modules.size()
            << " modules, each generated and assembled for sm_80 and sm_90 (" << outcomes.size()
            << " ptxas runs, " << withLibdevice << " with libdevice) in " << s << " s\n";
  EXPECT_GT(kernels, 300u) << "the table should lower to hundreds of kernels";
  int gathers = 0, scatters = 0; // the embedding cases' kernels are among them
  for (const Module &mod : modules) {
    for (const LoopKernel &k : mod.kernels) {
      for (const KernelStmt &st : k.stmts) {
        gathers += st.kind == K::gather;
        scatters += st.kind == K::scatterAdd;
      }
    }
  }
  EXPECT_GT(gathers, 0);
  EXPECT_GT(scatters, 0);
}

// The PTX module of the built-in toy64 model (relu and sigmoid become kernels: a GPU has no
// oneDNN post-ops) with `layers` layers in `dt`.
cuda::PtxModule toy64Ptx(DType dt, int layers, const std::string &arch, size_t &kernels) {
  tools::ModelConfig cfg;
  cfg.batch = 2;
  cfg.seq = 16;
  cfg.layers = layers;
  cfg.dtype = dt;
  std::unique_ptr<tools::Model> model = tools::findModel("toy64").build(cfg);
  std::vector<LoopKernel> ks = kernelsOf(
      [&](const std::vector<Tensor> &in) { return std::vector<Tensor>{model->forward(in)}; },
      model->makeInputs(cfg));
  kernels = ks.size();
  cuda::PtxOptions o;
  o.arch = arch;
  return cuda::compilePtx(ks, "toy64", o);
}

TEST(CudaPtx, Toy64KernelsAssemble) {
  RCJIT_SKIP_WITHOUT_PTXAS();
  size_t kernels = 0;
  cuda::PtxModule full = toy64Ptx(DType::f32, -1, "sm_80", kernels); // all 64 layers
  EXPECT_GE(kernels, 128u) << "relu and sigmoid of 64 layers";
  EXPECT_EQ(count(full.ptx, ".entry "), kernels);
  EXPECT_TRUE(assembles(full.ptx, "sm_80"));
  // every float dtype of the conformance suite, for both archs (4 layers: the same kernels)
  for (DType dt : conformance::kFloat) {
    for (const char *arch : kArchs) {
      cuda::PtxModule m = toy64Ptx(dt, 4, arch, kernels);
      EXPECT_GE(kernels, 8u);
      EXPECT_EQ(count(m.ptx, ".entry "), kernels);
      EXPECT_TRUE(assembles(m.ptx, arch)) << "toy64 in " << dtypeName(dt);
    }
  }
}

// A model's repeated layers make the same kernels once per layer: a module holds each once
// (distinctKernels), every kernel mapped to an equal one, in first-seen order.
TEST(CudaPtx, RepeatedLayersShareTheirKernels) {
  tools::ModelConfig cfg;
  cfg.batch = 2;
  cfg.seq = 16;
  cfg.layers = 8;
  std::unique_ptr<tools::Model> model = tools::findModel("toy64").build(cfg);
  const std::vector<LoopKernel> ks = kernelsOf(
      [&](const std::vector<Tensor> &in) { return std::vector<Tensor>{model->forward(in)}; },
      model->makeInputs(cfg));
  std::vector<int> which;
  const std::vector<LoopKernel> distinct = cuda::distinctKernels(ks, which);
  ASSERT_EQ(which.size(), ks.size());
  EXPECT_GE(ks.size(), 16u) << "relu and sigmoid of 8 layers";
  EXPECT_LE(distinct.size(), 4u) << "the layers' kernels are the same";
  auto unnamed = [](LoopKernel k) {
    k.name.clear();
    return printKernel(k);
  };
  int next = 0;
  for (size_t i = 0; i < ks.size(); ++i) {
    ASSERT_GE(which[i], 0);
    ASSERT_LT(static_cast<size_t>(which[i]), distinct.size());
    EXPECT_EQ(unnamed(ks[i]), unnamed(distinct[static_cast<size_t>(which[i])])) << "kernel " << i;
    if (which[i] == next) { // a first occurrence: kept with its own name
      EXPECT_EQ(distinct[static_cast<size_t>(next)].name, ks[i].name);
      ++next;
    }
    EXPECT_LT(which[i], next) << "first-seen order";
  }
  EXPECT_EQ(static_cast<size_t>(next), distinct.size());
  std::vector<int> none;
  EXPECT_TRUE(cuda::distinctKernels({}, none).empty());
  EXPECT_TRUE(none.empty());
  if (!test::havePtxas()) return;
  cuda::PtxModule m = cuda::compilePtx(distinct, "distinct", {});
  EXPECT_EQ(count(m.ptx, ".entry "), distinct.size());
  EXPECT_TRUE(assembles(m.ptx, "sm_80"));
}

// Compiled training on the cuda target: a 2-layer GPT-2's joint graph, partitioned, and both
// halves lowered for the GPU (the program compileGraph makes for Target::cuda, stopped before
// the device is needed); every kernel of the forward and the backward assembles.
TEST(CudaPtx, TrainingKernelsAssemble) {
  RCJIT_SKIP_WITHOUT_PTXAS();
  auto model = test::tinyGpt2(2, 8);
  std::vector<int64_t> tokens(16);
  for (int i = 0; i < 16; ++i) tokens[i] = (i * 7 + 3) % 50;
  Tensor ids = Tensor::from_vector(tokens, {2, 8});
  TracedFn fn = [&](const std::vector<Tensor> &a) {
    return std::vector<Tensor>{cross_entropy(model->forward({a[0]}), a[1])};
  };
  Trace t = traceFunction(fn, {ids, ids}, /*meta=*/true);
  std::vector<Tensor> inputs = t.args;
  inputs.insert(inputs.end(), t.captured.begin(), t.captured.end());
  std::vector<bool> wantGrad(inputs.size(), false);
  for (size_t i = t.args.size(); i < inputs.size(); ++i) wantGrad[i] = true;
  Partition part;
  {
    NoGradGuard noGrad;
    part = partitionJoint(buildJointGraph(t.graph, inputs, wantGrad));
  }
  for (const Graph *half : {&part.forward, &part.backward}) {
    CompileRequest r;
    r.exec.target = Target::cuda;
    r.stop = CompileStop::program;
    std::vector<Shape> strides;
    for (int id : half->programInputs())
      strides.push_back(detail::contiguousStrides(concreteShape(half->nodes[id].shape)));
    r.samples.push_back({*half, std::move(strides)});
    CompileResult c = compileGraph(std::move(r));
    ASSERT_GT(c.program.kernels.size(), 5u);
    for (const char *arch : kArchs) {
      cuda::PtxOptions o;
      o.arch = arch;
      cuda::PtxModule m = cuda::compilePtx(c.program.kernels, "training", o);
      EXPECT_EQ(count(m.ptx, ".entry "), c.program.kernels.size());
      EXPECT_TRUE(assembles(m.ptx, arch)) << (half == &part.forward ? "forward" : "backward");
    }
  }
}

// ---------------------------------------------------------------------------------------
// On a GPU (label `gpu`; skipped without one): the PTX loads, runs and matches the CPU.

class GpuPtx : public rcjit::test::GpuTest {};

// Device memory that frees itself (at least one byte: cuMemAlloc refuses 0).
struct DeviceBuffer {
  const cuda::DriverApi &api;
  CUdeviceptr ptr = 0;
  DeviceBuffer(const cuda::DriverApi &a, size_t bytes) : api(a) {
    cuda::check(api.memAlloc(&ptr, std::max<size_t>(bytes, 1)), "cuMemAlloc");
  }
  ~DeviceBuffer() { api.memFree(ptr); }
  DeviceBuffer(const DeviceBuffer &) = delete;
  DeviceBuffer &operator=(const DeviceBuffer &) = delete;
  void upload(const void *data, size_t bytes) {
    if (bytes > 0) cuda::check(api.memcpyHtoD(ptr, data, bytes), "cuMemcpyHtoD");
  }
};

template <class T> std::vector<char> bytesOf(const std::vector<T> &v) {
  std::vector<char> out(v.size() * sizeof(T));
  if (!out.empty()) std::memcpy(out.data(), v.data(), out.size());
  return out;
}

template <class T> T elementAt(const std::vector<char> &bytes, size_t i) {
  T v;
  std::memcpy(&v, bytes.data() + i * sizeof(T), sizeof(T));
  return v;
}

// A kernel of the GPU test: its host tensors (bytes, in KernelTensor order, outputs zeroed)
// and, where set, a launch to use instead of launchDims' (to exercise the stride loops).
struct GpuCase {
  LoopKernel kernel;
  int64_t outer = 0;
  std::vector<std::vector<char>> tensors;
  std::optional<cuda::LaunchDims> launch;
};

// Elementwise and warp-per-point reductions (wide and narrower than a warp, empty, argmax
// with ties, NaNs and -inf rows, a pass after a mean) run with PtxModule::lanesPerPoint and
// match the same kernels compiled for the CPU.
TEST_F(GpuPtx, KernelsMatchTheCpu) {
  const cuda::DriverApi &api = cuda::requireCuda();
  const cuda::DeviceInfo dev = cuda::deviceInfo(0);
  CUdevice device = 0;
  cuda::check(api.deviceGet(&device, 0), "cuDeviceGet");
  CUcontext ctx = nullptr;
  cuda::check(api.devicePrimaryCtxRetain(&ctx, device), "cuDevicePrimaryCtxRetain");
  cuda::check(api.ctxSetCurrent(ctx), "cuCtxSetCurrent");

  std::mt19937 gen(7);
  std::uniform_real_distribution<float> dist(0.1f, 2.0f);
  auto randoms = [&](int64_t count) {
    std::vector<float> v(static_cast<size_t>(count));
    for (float &x : v) x = dist(gen);
    return bytesOf(v);
  };
  auto zeros = [](int64_t count, size_t elementBytes) {
    return std::vector<char>(static_cast<size_t>(count) * elementBytes, 0);
  };
  const int64_t n = 100003, rows = 300, cols = 77;
  std::vector<float> ties(static_cast<size_t>(rows * cols)); // few values: ties everywhere
  for (float &x : ties) x = static_cast<float>(gen() % 4);
  ties[3 * cols + 40] = ties[3 * cols + 60] = std::nanf(""); // the first NaN wins
  std::fill_n(ties.begin() + 5 * cols, cols, -std::numeric_limits<float>::infinity());
  std::fill_n(ties.begin() + 6 * cols, cols, 1.0f);
  std::vector<GpuCase> cases;
  cases.push_back({addKernel("k_add", n), n, {randoms(n), randoms(n), zeros(n, 4)}, {}});
  cases.push_back(
      {logSumKernel("k_logsum", rows, cols), rows, {randoms(rows * cols), zeros(rows, 4)}, {}});
  cases.push_back(
      {logSumKernel("k_logsum_narrow", rows, 5), rows, {randoms(rows * 5), zeros(rows, 4)}, {}});
  cases.push_back({logSumKernel("k_logsum_empty", 9, 0), 9, {{}, zeros(9, 4)}, {}});
  cases.push_back(
      {argmaxKernel("k_argmax", rows, cols), rows, {bytesOf(ties), zeros(rows, 8)}, {}});
  cases.push_back({centerKernel("k_center", rows, 1000),
                   rows,
                   {randoms(rows * 1000), zeros(rows, 4), zeros(rows * 1000, 4)},
                   cuda::LaunchDims{2, 64}}); // 4 warps, 75 points each
  std::vector<LoopKernel> ks;
  for (const GpuCase &c : cases) ks.push_back(c.kernel);

  const cuda::PtxOptions target =
      cuda::ptxOptionsForDevice(dev.major, dev.minor, dev.driverPtxVersion);
  const cuda::PtxModule pm = cuda::compilePtx(ks, "gpu.test", target);
  ASSERT_EQ(pm.lanesPerPoint, (std::vector<int>{1, 32, 32, 32, 32, 32}));
  char log[8192] = {};
  CUjit_option opts[] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
  void *values[] = {log, reinterpret_cast<void *>(sizeof log)};
  CUmodule mod = nullptr;
  CUresult loaded = api.moduleLoadDataEx(&mod, pm.ptx.c_str(), 2, opts, values);
  ASSERT_EQ(loaded, CUDA_SUCCESS) << cuda::describeResult(&api, loaded) << "\n" << log;

  // The reference: the same kernels compiled for the CPU, run on copies of the tensors.
  cpu::CpuCompiledKernels cpu = cpu::compileKernels(ks, "gpu.test.cpu");
  const int64_t sym = 0;
  std::vector<std::vector<std::vector<char>>> want;
  for (size_t k = 0; k < cases.size(); ++k) {
    want.push_back(cases[k].tensors);
    std::vector<char *> ptrs;
    for (std::vector<char> &t : want.back()) ptrs.push_back(t.data());
    cpu.functions[k](ptrs.data(), &sym, 0, cases[k].outer);
  }

  CUstream stream = nullptr;
  cuda::check(api.streamCreate(&stream, 0), "cuStreamCreate");
  std::vector<std::vector<std::unique_ptr<DeviceBuffer>>> buf(cases.size());
  for (size_t k = 0; k < cases.size(); ++k) {
    std::vector<CUdeviceptr> ptrs;
    for (const std::vector<char> &t : cases[k].tensors) {
      buf[k].push_back(std::make_unique<DeviceBuffer>(api, t.size()));
      buf[k].back()->upload(t.data(), t.size());
      ptrs.push_back(buf[k].back()->ptr);
    }
    CUfunction fn = nullptr;
    cuda::check(api.moduleGetFunction(&fn, mod, pm.entries[k].c_str()), "cuModuleGetFunction");
    std::vector<int64_t> symsArg(static_cast<size_t>(cuda::symbolSlots(cases[k].kernel)), sym);
    int64_t begin = 0, end = cases[k].outer;
    void *params[] = {ptrs.data(), symsArg.data(), &begin, &end}; // arrays by value
    const cuda::LaunchDims d =
        cases[k].launch.value_or(cuda::launchDims(end, dev.multiprocessors, pm.lanesPerPoint[k]));
    cuda::check(api.launchKernel(fn, d.grid, 1, 1, d.block, 1, 1, 0, stream, params, nullptr),
                "cuLaunchKernel");
  }
  cuda::check(api.streamSynchronize(stream), "cuStreamSynchronize");
  for (size_t k = 0; k < cases.size(); ++k) {
    for (size_t t = 0; t < cases[k].tensors.size(); ++t) {
      const KernelTensor &kt = cases[k].kernel.tensors[t];
      if (!kt.output) continue;
      const std::vector<char> &w = want[k][t];
      std::vector<char> got(w.size());
      cuda::check(api.memcpyDtoH(got.data(), buf[k][t]->ptr, got.size()), "cuMemcpyDtoH");
      for (size_t i = 0; i < got.size() / dtypeSize(kt.dtype); ++i) {
        const std::string where =
            pm.entries[k] + " tensor " + std::to_string(t) + " element " + std::to_string(i);
        if (kt.dtype == DType::i64) {
          ASSERT_EQ(elementAt<int64_t>(got, i), elementAt<int64_t>(w, i)) << where;
          continue;
        }
        const float g = elementAt<float>(got, i), r = elementAt<float>(w, i);
        if (g == r || (std::isnan(g) && std::isnan(r))) continue; // -inf: log of an empty sum
        ASSERT_NEAR(g, r, 1e-5 + 1e-5 * std::fabs(r)) << where;
      }
    }
  }
  api.streamDestroy(stream);
  api.moduleUnload(mod);
  api.devicePrimaryCtxRelease(device);
}

} // namespace
