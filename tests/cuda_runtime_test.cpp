// The CUDA runtime without a GPU: clear Errors where a device is needed, the lowering the
// GPU gets (checked by running it on the CPU), GEMM layouts, the PTX cache, allocator classes.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>

#include <random>
#include <set>
#include <string>
#include <vector>

#include <rcjit/rcjit.h>

#include "jit/CompileGraph.h"
#include "jit/Dynamic.h"
#include "jit/Pipeline.h"
#include "models/ModelLlama.h"
#include "models/Models.h"
#include "targets/Lower.h"
#include "targets/MatmulLayout.h"
#include "targets/cpu/CpuProgram.h"
#include "targets/cuda/CudaProgram.h"
#include "targets/cuda/CudaRuntime.h"
#include "tests/AutogradTestUtil.h"
#include "tests/Ptxas.h"
#include "tests/TestUtil.h"
#include "tests/conformance/Conformance.h"
#include "tests/conformance/OpCases.h"
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

// The fused LM head (off by default) is an eager op the GPU has no kernel for.
TEST(CudaLowering, UnsupportedStepsAreNamed) {
  const Tensor w = Tensor::randn({4100, 8}, 2);
  const Tensor target = Tensor::from_vector(std::vector<int64_t>{1, 4099, 7}, {3});
  const bool was = rcjit::detail::setFusedLinearCe(true);
  Lowered l = lowerFor(Target::cuda,
                       [&](const std::vector<Tensor> &v) {
                         return std::vector<Tensor>{cross_entropy(linear(v[0], w, Tensor()), v[1])};
                       },
                       {Tensor::randn({3, 8}, 1), target});
  rcjit::detail::setFusedLinearCe(was);
  std::string why;
  for (const Step &s : l.program.steps) why += cuda::unsupportedStep(l.program, s);
  EXPECT_NE(why.find("linear_ce_pick"), std::string::npos) << why;
  EXPECT_NE(why.find("no GPU implementation"), std::string::npos) << why;
}

// Runs the cuda lowering of fn on the CPU executor.
std::vector<Tensor> runGpuLowering(const TracedFn &fn, const std::vector<Tensor> &args,
                                   Program *program = nullptr) {
  Lowered l = lowerFor(Target::cuda, fn, args);
  for (const Step &s : l.program.steps)
    EXPECT_EQ(cuda::unsupportedStep(l.program, s), "") << s.note;
  if (program) *program = l.program;
  std::vector<const Tensor *> in;
  for (const Tensor &t : l.inputs) in.push_back(&t);
  return cpu::CpuProgram::create(l.program, "cuda_lowering_on_cpu")->run(in.data(), in.size());
}

// The GPU has no eager steps: embedding is a gather kernel and its gradient a kernel that
// starts the table and one that scatter-adds the rows (atomically: ids repeat), summing in f32
// for a bf16 gradient like the CPU. Run on the CPU, they compute what eager does.
TEST(CudaLowering, EmbeddingIsAGatherKernelAndItsGradientAScatterAdd) {
  const Tensor w = Tensor::randn({10, 6}, 1);
  const Tensor ids = Tensor::from_vector(std::vector<int64_t>{3, 0, 9, 3, 3, 7}, {2, 3});
  const Tensor g = Tensor::randn({2, 3, 6}, 2), base = Tensor::randn({10, 6}, 3);
  TracedFn fn = [](const std::vector<Tensor> &v) {
    return std::vector<Tensor>{embedding(v[0], v[1]) * 2.0,
                               embedding(transpose(transpose(v[0], 0, 1).contiguous(), 0, 1), v[1]),
                               embedding_backward(v[2], v[1], 10),
                               embedding_backward(v[2], v[1], 10, v[3])};
  };
  for (DType dt : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(dtypeName(dt));
    for (DType it : {DType::i64, DType::i32}) {
      std::vector<Tensor> args = {w.to(dt), ids.to(it), g.to(dt), base.to(dt)};
      Program p;
      std::vector<Tensor> got = runGpuLowering(fn, args, &p);
      std::vector<Tensor> want = fn(args);
      ASSERT_EQ(got.size(), want.size());
      for (size_t i = 0; i < got.size(); ++i) {
        EXPECT_EQ(got[i].dtype(), dt);
        EXPECT_TRUE(allclose(got[i].to(DType::f32), want[i].to(DType::f32), 1e-5, 1e-6))
            << "output " << i << "\n"
            << printProgram(p);
      }
      int gathers = 0, scatters = 0;
      for (const LoopKernel &k : p.kernels) {
        for (const KernelStmt &st : k.stmts) {
          gathers += st.kind == KernelStmt::Kind::gather;
          scatters += st.kind == KernelStmt::Kind::scatterAdd;
          if (st.kind == KernelStmt::Kind::scatterAdd) {
            EXPECT_EQ(k.tensors[st.tensor].dtype, DType::f32) << "bf16 sums in f32";
          }
        }
      }
      EXPECT_EQ(gathers, 2) << printProgram(p);
      EXPECT_EQ(scatters, 2) << printProgram(p);
      for (const Step &s : p.steps) EXPECT_NE(s.kind, Step::Kind::eager) << s.note;
    }
  }
}

// No data-dependent Error can leave a GPU kernel: an id out of range reads NaN (the loss
// shows it, as for a bad cross_entropy target) and adds nothing to the gradient.
TEST(CudaLowering, AnEmbeddingIdOutOfRangeIsNaNNotAnotherRow) {
  const Tensor w = Tensor::randn({5, 4}, 1), g = Tensor::ones({3, 4});
  TracedFn fn = [](const std::vector<Tensor> &v) {
    return std::vector<Tensor>{embedding(v[0], v[1]), embedding_backward(v[2], v[1], 5)};
  };
  const Tensor good = Tensor::from_vector(std::vector<int64_t>{2, 0, 2}, {3});
  Lowered l = lowerFor(Target::cuda, fn, {w, good, g});
  auto program = cpu::CpuProgram::create(l.program, "cuda_lowering_on_cpu");
  for (int64_t bad : {int64_t{5}, int64_t{-1}, int64_t{1} << 40}) {
    SCOPED_TRACE(bad);
    Tensor ids = Tensor::from_vector(std::vector<int64_t>{2, bad, 2}, {3});
    std::vector<const Tensor *> in = {&w, &ids, &g};
    std::vector<Tensor> got = program->run(in.data(), in.size());
    std::vector<float> rows = got[0].to_vector<float>(), grad = got[1].to_vector<float>();
    for (int j = 0; j < 4; ++j) {
      EXPECT_EQ(rows[j], w.to_vector<float>()[8 + j]);
      EXPECT_TRUE(std::isnan(rows[4 + j])) << rows[4 + j];
      EXPECT_EQ(grad[2 * 4 + j], 2.0f) << "row 2 got both its rows";
    }
    EXPECT_EQ(sum(got[1]).item(), 8.0) << "the bad id's row went nowhere";
  }
  // the CPU target checks every id
  std::string e = errorOf([&] {
    compile(fn)(std::vector<Tensor>{w, Tensor::from_vector(std::vector<int64_t>{2, 5, 2}, {3}), g});
  });
  EXPECT_NE(e.find("out of range"), std::string::npos) << e;
}

// The conformance suite through the cuda lowering, run on the CPU executor, against eager:
// what GpuCompile.ConformanceSuiteMatchesTheCpu checks on a GPU, minus the PTX and cuBLAS.
// Every step is one the GPU has, but the fused LM head's (off by default; named in the Error).
TEST(CudaLowering, ConformanceSuiteLowersToGpuStepsThatComputeTheSame) {
  using namespace rcjit::conformance;
  int cases = 0;
  std::set<std::string> unsupported;
  forEachEagerCase([&](const OpCase &c, DType dt, const std::string &what,
                       const std::vector<Tensor> &in, const std::vector<Tensor> &want) {
    Lowered l = lowerFor(Target::cuda, c.fn, in);
    std::string why;
    for (const Step &s : l.program.steps) {
      if (std::string w = cuda::unsupportedStep(l.program, s); !w.empty() && why.empty()) why = w;
    }
    if (!why.empty()) {
      unsupported.insert(c.name);
      EXPECT_NE(why.find("no GPU implementation yet"), std::string::npos) << why;
      return;
    }
    std::vector<const Tensor *> ptrs;
    for (const Tensor &t : l.inputs) ptrs.push_back(&t);
    std::vector<Tensor> got =
        cpu::CpuProgram::create(l.program, "cuda_conformance")->run(ptrs.data(), ptrs.size());
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_TRUE(sameResult(got[i], want[i], gpuTolScale(c, dt)))
          << what << " output " << i << "\n"
          << printProgram(l.program);
    }
    ++cases;
  });
  EXPECT_GT(cases, 450);
  for (const std::string &name : unsupported) EXPECT_TRUE(noGpuStepYet(name)) << name;
}

// Dynamic shapes on cuda: a symbolic program's gather and scatter kernels follow the ids'
// length while their tables' rows stay fixed; run on the CPU at a length it was not traced at.
TEST(CudaLowering, EmbeddingKernelsFollowASymbolicLength) {
  const Tensor w = Tensor::randn({10, 6}, 1);
  TracedFn fn = [&](const std::vector<Tensor> &v) {
    return std::vector<Tensor>{embedding(w, v[0]) * 2.0, embedding_backward(v[1], v[0], 10)};
  };
  auto argsOf = [](int64_t n) {
    std::vector<int64_t> ids(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) ids[static_cast<size_t>(i)] = (i * 7 + 3) % 10;
    return std::vector<Tensor>{Tensor::from_vector(ids, {n}), Tensor::randn({n, 6}, n)};
  };
  const std::vector<Tensor> args = argsOf(6);
  Trace t = traceFunction(fn, args, /*meta=*/false);
  std::vector<Tensor> inputs = t.args;
  inputs.insert(inputs.end(), t.captured.begin(), t.captured.end());
  std::vector<Shape> strides;
  for (const Tensor &in : inputs) strides.push_back(in.strides());
  detail::DynSymbol n;
  n.sources = {{0, 0}, {1, 0}};
  n.range = {2, 1000};
  n.why = "test";
  detail::SymbolicResult s = detail::makeSymbolic(fn, t, strides, {n}, Target::cuda);
  ASSERT_EQ(s.symbols.size(), 1u);
  s.request.stop = CompileStop::program;
  Program p = compileGraph(s.request).program;
  int tables = 0;
  for (const LoopKernel &k : p.kernels) {
    for (const KernelTensor &kt : k.tensors) {
      if (!kt.indexed) continue;
      ++tables;
      EXPECT_EQ(kt.rows, SizeExpr::constant(10)) << printKernel(k);
      EXPECT_FALSE(k.domain[0].isConstant()) << "the ids' length\n" << printKernel(k);
    }
  }
  EXPECT_EQ(tables, 2) << printProgram(p);
  auto cpu = cpu::CpuProgram::create(p, "cuda_symbolic_on_cpu");
  for (int64_t len : {int64_t{9}, int64_t{23}}) {
    std::vector<Tensor> at = argsOf(len);
    std::vector<Tensor> in = at;
    in.insert(in.end(), t.captured.begin(), t.captured.end());
    std::vector<const Tensor *> ptrs;
    for (const Tensor &x : in) ptrs.push_back(&x);
    std::vector<Tensor> got = cpu->run(ptrs.data(), ptrs.size()), want = fn(at);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i)
      EXPECT_TRUE(allclose(got[i], want[i], 1e-5, 1e-6)) << "length " << len << " output " << i;
  }
}

// GPT-2 (token and position embeddings, the tied head) lowers to GPU steps alone.
TEST(CudaLowering, Gpt2LowersToGpuSteps) {
  auto model = test::tinyGpt2(2, 8);
  std::vector<int64_t> tokens(16);
  for (int i = 0; i < 16; ++i) tokens[i] = (i * 7 + 3) % 50;
  checkGpuLowering(
      "gpt2", [&](const std::vector<Tensor> &v) { return std::vector<Tensor>{model->forward(v)}; },
      {Tensor::from_vector(tokens, {2, 8})});
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
