// The one compile path: announced steps, the passes log, the IR verifier, the fusion plan,
// and `rcjit trace` dumping the program the target really compiles.
#include <gtest/gtest.h>

#include <cstdlib>
#include <sstream>

#include <rcjit/rcjit.h>

#include "cache/ClearHooks.h"
#include "jit/CompileGraph.h"
#include "jit/Tiered.h"
#include "models/Models.h"
#include "targets/cpu/CpuProgram.h"
#include "tests/TestUtil.h"
#include "tools/Cli.h"
#include "tracer/GraphIO.h"
#include "tracer/GraphVerify.h"
#include "tracer/Tracer.h"

using namespace rcjit;
using rcjit::test::errorOf;

namespace {

CompileRequest requestFor(const TracedFn &fn, const std::vector<Tensor> &args, Target target) {
  return tools::traceRequest(traceFunction(fn, args), target);
}

std::vector<std::string> stepNames(const CompileResult &r) {
  std::vector<std::string> names;
  for (const CompileStepTime &t : r.times) names.push_back(t.step);
  return names;
}

TEST(CompileGraph, RunsTheStepsInOrder) {
  auto fn = [](const std::vector<Tensor> &v) {
    return std::vector<Tensor>{softmax(v[0] * 2.0, -1)};
  };
  CompileResult r = compileGraph(requestFor(fn, {Tensor::randn({4, 8}, 1)}, Target::cpu));
  std::vector<std::string> want = {
      "decompose",      "constant_fold", "cse",          "embedding_grad_sum",
      "linear_ce_fold", "remat",         "dce",          "fuse",
      "build kernels",  "plan buffers",  "check target", "target compile"};
  EXPECT_EQ(stepNames(r), want);
  ASSERT_TRUE(r.executable);
  Tensor x = Tensor::randn({4, 8}, 2);
  const Tensor *in[] = {&x};
  EXPECT_TRUE(allclose(r.executable->run(in, 1).at(0), softmax(x * 2.0, -1), 1e-4, 1e-5));
}

// The interpreted first tier returns each output in the layout of the program lowered
// beside it: given a program whose output is column-major, the interpreter's row-major result
// is copied into that layout, values unchanged; a program output of another shape is an
// Error, not a wrong result.
TEST(CompileGraph, InterpretedFirstTierTakesTheProgramsOutputLayouts) {
  auto fn = [](const std::vector<Tensor> &v) { return std::vector<Tensor>{relu(v[0]) * 2.0}; };
  CompileRequest r = requestFor(fn, {Tensor::randn({4, 8}, 1)}, Target::cpu);
  const Graph traced = r.samples[0].graph;
  r.stop = CompileStop::program;
  const Program lowered = compileGraph(r).program;
  ASSERT_EQ(lowered.outputs.size(), 1u);
  ASSERT_EQ(lowered.values[lowered.outputs[0]].strides, (Shape{8, 1}));
  Program columns = lowered;
  columns.values[columns.outputs[0]].strides = {1, 4};
  Tensor x = Tensor::randn({4, 8}, 2);
  const Tensor *in[] = {&x};
  Tensor y = makeInterpretedExecutable(traced, columns)->run(in, 1).at(0);
  EXPECT_EQ(y.shape(), (Shape{4, 8}));
  EXPECT_EQ(y.strides(), (Shape{1, 4}));
  EXPECT_TRUE(allclose(y, relu(x) * 2.0, 0, 0));
  Tensor same = makeInterpretedExecutable(traced, lowered)->run(in, 1).at(0);
  EXPECT_EQ(same.strides(), (Shape{8, 1}));
  Program wrong = lowered;
  wrong.values[wrong.outputs[0]].shape = {8, 4};
  const std::string msg = errorOf([&] { makeInterpretedExecutable(traced, wrong)->run(in, 1); });
  EXPECT_NE(msg.find("the interpreted first tier's output 0 is f32[4, 8]"), std::string::npos)
      << msg;
}

TEST(CompileGraph, StopsWhereAsked) {
  auto fn = [](const std::vector<Tensor> &v) { return std::vector<Tensor>{relu(v[0] + 1.0)}; };
  CompileRequest r = requestFor(fn, {Tensor::randn({4, 8}, 1)}, Target::cpu);
  r.stop = CompileStop::fused;
  CompileResult fused = compileGraph(r);
  EXPECT_EQ(fused.fusion.groups.size(), 1u);
  EXPECT_TRUE(fused.program.steps.empty());
  EXPECT_FALSE(fused.executable);
  r.stop = CompileStop::program;
  CompileResult program = compileGraph(r);
  EXPECT_EQ(program.program.kernels.size(), 1u);
  EXPECT_FALSE(program.executable);
}

TEST(CompileGraph, PassesLogShowsEveryStepWithItsTime) {
  set_logs("passes");
  testing::internal::CaptureStderr();
  auto cf =
      compile([](const Tensor &x) { return layer_norm(x, Tensor::ones({8}), Tensor(), 1e-5); });
  cf(Tensor::randn({4, 8}, 1));
  // the first call interprets the graph (its passes and lowering logged); the target
  // compile is the optimized tier's, on the background thread
  ASSERT_TRUE(waitForBackgroundCompiles(600));
  std::string err = testing::internal::GetCapturedStderr();
  set_logs("");
  for (const char *step : {": decompose (", ": cse (", ": dce (", ": fuse (", ": plan buffers (",
                           ": target compile ("}) {
    EXPECT_NE(err.find(step), std::string::npos) << step << "\n" << err;
  }
  EXPECT_NE(err.find("[rcjit:passes] function"), std::string::npos) << err;
  EXPECT_NE(err.find("opened:"), std::string::npos) << "the fusion plan after fuse";
}

// A KernelBatch defers the code of the CPU programs created in it to its finish(): their
// kernels compile together (one step in the passes log), and none runs before.
TEST(KernelBatch, ProgramsCompileTogetherAtFinish) {
  auto f = [](const std::vector<Tensor> &v) {
    return std::vector<Tensor>{tanh(v[0] * 3.25) + 0.75};
  };
  auto g = [](const std::vector<Tensor> &v) {
    return std::vector<Tensor>{relu(v[0] - 0.375) * 1.125};
  };
  Tensor x = Tensor::randn({4, 8}, 1);
  const Tensor *in[] = {&x};
  cache::clear(); // (no kernel of these from an earlier test in the memo)
  set_logs("passes");
  testing::internal::CaptureStderr();
  std::shared_ptr<Executable> a, b, c;
  {
    cpu::KernelBatch batch;
    a = compileGraph(requestFor(f, {x}, Target::cpu)).executable;
    {
      cpu::KernelBatch inner; // nested: the outer batch compiles
      b = compileGraph(requestFor(g, {x}, Target::cpu)).executable;
      inner.finish();
    }
    c = compileGraph(requestFor(f, {x}, Target::cpu)).executable; // a's kernel again
    ASSERT_TRUE(a && b && c);
    EXPECT_NE(errorOf([&] { b->run(in, 1); }).find("before the kernel batch"), std::string::npos);
    batch.finish();
  }
  std::string err = testing::internal::GetCapturedStderr();
  set_logs("");
  EXPECT_NE(err.find(": batched kernels ("), std::string::npos) << err;
  EXPECT_NE(err.find("2 kernels of 2 programs compiled together"), std::string::npos) << err;
  // (a's module may come from the disk cache of an earlier run: a hit for a, and still one
  // for c, whose kernel a's compile serves)
  EXPECT_EQ(c->cacheHits(), 1) << "c's kernel was a's, as a memo hit";
  EXPECT_TRUE(allclose(a->run(in, 1).at(0), tanh(x * 3.25) + 0.75, 1e-5, 1e-6));
  EXPECT_TRUE(allclose(b->run(in, 1).at(0), relu(x - 0.375) * 1.125, 1e-5, 1e-6));
  EXPECT_TRUE(allclose(c->run(in, 1).at(0), tanh(x * 3.25) + 0.75, 1e-5, 1e-6));
}

// cacheHits() counts each kernel of a program that its own compile did not compile, once: a
// memo hit, a kernel an earlier program of the same batch compiles, a kernel of a module
// from the disk cache; the same with and without a batch, and two identical layers' kernels
// (one key) are two.
TEST(KernelBatch, CacheHitsCountEachKernelServedOnce) {
  test::IsolatedCache cacheDir("rcjit-cache-hits");
  auto f = [](const std::vector<Tensor> &v) {
    return std::vector<Tensor>{relu(matmul(relu(matmul(v[0], v[1])), v[2]))};
  };
  const std::vector<Tensor> in = {Tensor::randn({8, 16}, 1), Tensor::randn({16, 16}, 2),
                                  Tensor::randn({16, 16}, 3)};
  auto make = [&] { return compileGraph(requestFor(f, in, Target::cpu)).executable; };
  std::shared_ptr<Executable> fresh = make();
  const auto kernels = static_cast<int>(fresh->program().kernels.size());
  ASSERT_EQ(kernels, 2) << printProgram(fresh->program());
  EXPECT_EQ(fresh->cacheHits(), 0) << "one kernel compiled, which serves both layers";
  cache::detail::runClearHooks(); // the in-process tables dropped, the disk cache kept
  EXPECT_EQ(make()->cacheHits(), kernels) << "both from the disk cache, outside a batch";
  cache::detail::runClearHooks();
  std::shared_ptr<Executable> first, second;
  {
    cpu::KernelBatch batch;
    first = make();
    second = make();
    batch.finish();
  }
  EXPECT_EQ(first->cacheHits(), kernels) << "both from the disk cache, in a batch";
  EXPECT_EQ(second->cacheHits(), kernels) << "both compiled (here loaded) by the first";
  EXPECT_EQ(make()->cacheHits(), kernels) << "both from the memo";
  const Tensor *ptrs[] = {&in[0], &in[1], &in[2]};
  EXPECT_TRUE(allclose(second->run(ptrs, 3).at(0), f(in)[0], 1e-5, 1e-6));
}

// A program whose batch ended without finish() (an exception in the plan) never runs: an
// Error, not a call through a kernel that was never compiled.
TEST(KernelBatch, AProgramOfAnUnfinishedBatchNeverRuns) {
  auto f = [](const std::vector<Tensor> &v) {
    return std::vector<Tensor>{sigmoid(v[0] * 1.875) - 0.125};
  };
  Tensor x = Tensor::randn({4, 8}, 1);
  const Tensor *in[] = {&x};
  std::shared_ptr<Executable> a;
  {
    cpu::KernelBatch batch;
    a = compileGraph(requestFor(f, {x}, Target::cpu)).executable;
  }
  ASSERT_TRUE(a);
  EXPECT_NE(errorOf([&] { a->run(in, 1); }).find("before the kernel batch"), std::string::npos);
  // the next compile of the same graph, outside a batch, compiles and runs
  auto again = compileGraph(requestFor(f, {x}, Target::cpu)).executable;
  EXPECT_TRUE(allclose(again->run(in, 1).at(0), sigmoid(x * 1.875) - 0.125, 1e-5, 1e-6));
}

// A static program's arena keeps its arena buffers bound from call to call, and a call binds
// again only its inputs, outputs and dynamic buffers: each call reads its own inputs, and an
// output an eager step makes (embedding: adopted as the output) or a kernel writes is a new
// tensor each call, never written over the outputs an earlier call handed out.
TEST(CompileGraph, CallsOfOneArenaBindTheirOwnInputsAndOutputs) {
  auto f = [](const std::vector<Tensor> &v) {
    Tensor e = embedding(v[0], v[1]);
    return std::vector<Tensor>{e, relu(matmul(e, v[2])) * 2.0, sigmoid(v[2] + 1.0)};
  };
  auto ids = [](int64_t a, int64_t b) {
    return Tensor::from_vector(std::vector<int64_t>{a, b, a}, {3});
  };
  const std::vector<Tensor> first = {Tensor::randn({5, 4}, 1), ids(0, 3), Tensor::randn({4, 4}, 2)};
  std::shared_ptr<Executable> e = compileGraph(requestFor(f, first, Target::cpu)).executable;
  ASSERT_TRUE(e);
  int eagerSteps = 0;
  for (const Step &s : e->program().steps) eagerSteps += s.kind == Step::Kind::eager;
  EXPECT_GE(eagerSteps, 1) << "embedding is expected to run as an eager step";
  std::vector<std::vector<Tensor>> calls, held;
  for (int c = 0; c < 4; ++c) {
    calls.push_back(
        {Tensor::randn({5, 4}, 10 + c), ids(c % 5, (c + 2) % 5), Tensor::randn({4, 4}, 20 + c)});
    const std::vector<Tensor> &in = calls.back();
    const Tensor *ptrs[] = {&in[0], &in[1], &in[2]};
    held.push_back(e->run(ptrs, 3));
  }
  for (size_t c = 0; c < calls.size(); ++c) {
    const std::vector<Tensor> want = f(calls[c]);
    ASSERT_EQ(held[c].size(), want.size());
    for (size_t o = 0; o < want.size(); ++o) {
      EXPECT_TRUE(allclose(held[c][o], want[o], 1e-5, 1e-6)) << "call " << c << " output " << o;
      if (c > 0) {
        EXPECT_NE(held[c][o].data_ptr(), held[c - 1][o].data_ptr());
      }
    }
  }
}

// runInto writes an output over an input that no step reads from the output's first writer
// on (a regional stage's result over the stage output it read, which dies with the stage):
// the output is in the input's storage, and is the input tensor itself where the caller's
// argument is its only handle. An input that the output's writer reads through a reduction,
// or that the program also returns, is left as it was.
TEST(RunInto, AnOutputWrittenAfterItsInputsLastReadTakesItsStorage) {
  Tensor w1 = Tensor::randn({16, 16}, 1) * 0.25, w2 = Tensor::randn({16, 16}, 2) * 0.25;
  auto layer = [](const std::vector<Tensor> &v) {
    return std::vector<Tensor>{sigmoid(matmul(relu(matmul(v[0], v[1])), v[2]))};
  };
  const Tensor x0 = Tensor::randn({8, 16}, 3);
  const Tensor ref = layer({x0, w1, w2})[0];
  std::shared_ptr<Executable> e =
      compileGraph(requestFor(layer, {x0, w1, w2}, Target::cpu)).executable;
  ASSERT_TRUE(e);
  const std::vector<std::pair<int, int>> into = {{0, 0}};
  for (int held = 1; held <= 2; ++held) {
    Tensor x = x0.clone();
    Tensor other = held == 2 ? x : Tensor();
    const detail::TensorImpl *xi = x.impl().get();
    const Tensor *in[] = {&x, &w1, &w2};
    Tensor y = e->runInto(in, 3, into).at(0);
    EXPECT_TRUE(allclose(y, ref, 1e-5, 1e-6)) << "held " << held;
    EXPECT_EQ(y.data_ptr(), x.data_ptr()) << "held " << held;
    EXPECT_EQ(y.impl().get() == xi, held == 1) << "held " << held;
  }
  // written by the kernel that reduces over the input: a block of its own
  auto one = [](const std::vector<Tensor> &v) {
    return std::vector<Tensor>{sigmoid(matmul(v[0], v[1]))};
  };
  e = compileGraph(requestFor(one, {x0, w1}, Target::cpu)).executable;
  Tensor x = x0.clone();
  const Tensor *in2[] = {&x, &w1};
  Tensor y = e->runInto(in2, 2, into).at(0);
  EXPECT_NE(y.data_ptr(), x.data_ptr());
  EXPECT_TRUE(allclose(y, one({x0, w1})[0], 1e-5, 1e-6));
  EXPECT_TRUE(allclose(x, x0, 0, 0));
  // the input returned as well: a block of its own
  auto both = [&](const std::vector<Tensor> &v) { return std::vector<Tensor>{layer(v)[0], v[0]}; };
  e = compileGraph(requestFor(both, {x0, w1, w2}, Target::cpu)).executable;
  const Tensor *in3[] = {&x, &w1, &w2};
  std::vector<Tensor> out = e->runInto(in3, 3, into);
  EXPECT_NE(out.at(0).data_ptr(), x.data_ptr());
  EXPECT_TRUE(allclose(out.at(0), ref, 1e-5, 1e-6));
  EXPECT_TRUE(allclose(out.at(1), x0, 0, 0));
}

TEST(CompileGraph, VerifierNamesTheBrokenInvariant) {
  Graph g;
  Node in;
  in.op = OpKind::input;
  in.shape = staticShape({4});
  g.add(in);
  Node bad;
  bad.op = OpKind::add;
  bad.inputs = {0, 0};
  bad.shape = staticShape({5}); // add of two [4] is [4]
  g.outputs.push_back(g.add(bad));
  std::string e = errorOf([&] { verifyGraph(g, "pass demo"); });
  EXPECT_NE(e.find("IR verifier (after pass demo): %1 add: is f32[5], but its operands give "
                   "f32[4]"),
            std::string::npos)
      << e;
  g.nodes[1].shape = staticShape({4});
  g.nodes[1].inputs = {0, 1};
  e = errorOf([&] { verifyGraph(g, "pass demo"); });
  EXPECT_NE(e.find("operand %1 does not come before its user"), std::string::npos) << e;
  g.nodes[1].inputs = {0};
  e = errorOf([&] { verifyGraph(g, "x"); });
  EXPECT_NE(e.find("has 1 operands, the op takes 2"), std::string::npos) << e;
  g.nodes[1].inputs = {0, 0};
  EXPECT_NO_THROW(verifyGraph(g, "x"));
}

// RCJIT_MATMUL_KERNELS=never for the scope: small products stay oneDNN calls, as the
// fusion-plan tests below expect (generated matmul kernels: tests/matmul_kernels_test.cpp).
struct LibraryMatmulsEnv {
  LibraryMatmulsEnv() { setenv("RCJIT_MATMUL_KERNELS", "never", 1); }
  ~LibraryMatmulsEnv() { unsetenv("RCJIT_MATMUL_KERNELS"); }
};

TEST(CompileGraph, FusionPlanSaysWhyAGroupStarts) {
  LibraryMatmulsEnv library;
  auto fn = [](const std::vector<Tensor> &v) {
    Tensor h = relu(v[0] * 2.0 + 1.0);              // one group
    Tensor y = matmul(h, v[1]);                     // a library call
    return std::vector<Tensor>{sum(y + 3.0, {-1})}; // a new group after the call
  };
  CompileRequest r =
      requestFor(fn, {Tensor::randn({4, 8}, 1), Tensor::randn({8, 8}, 2)}, Target::cpu);
  r.stop = CompileStop::fused;
  CompileResult res = compileGraph(r);
  std::string plan = printFusionPlan(res.fusion, res.graphs[0]);
  EXPECT_NE(plan.find("library matmul"), std::string::npos) << plan;
  EXPECT_NE(plan.find("no operand is in an open group"), std::string::npos) << plan;
  EXPECT_NE(plan.find("elementwise [4, 8]: {mul"), std::string::npos) << plan;
  EXPECT_EQ(res.fusion.calls.size(), 1u);
}

// Two branches that start from inputs (each opens a group) meet in one node: the later
// group merges into the earlier and the node joins it, so nothing goes through memory
// (AdamW's (1 - b1) * g + b1 * m); scalars computed from inputs alone form one tiny group
// placed before every other (so a kernel that reads them never starts before them). A
// branch that reads a value computed after the earlier group started cannot merge.
TEST(CompileGraph, BranchesFromInputsMergeWhereTheyMeet) {
  auto fn = [](const std::vector<Tensor> &v) {
    Tensor a = v[0] * 0.1;                 // opens a group
    Tensor b = exp(v[1]) * 0.9;            // opens another: no operand in an open group
    Tensor s = v[2] + 1.0, t = v[2] * 3.0; // a scalar group, and a scalar that joins it
    return std::vector<Tensor>{(a + b) * s + t};
  };
  CompileRequest r =
      requestFor(fn, {Tensor::randn({16, 16}, 1), Tensor::randn({16, 16}, 2), Tensor::randn({}, 3)},
                 Target::cpu);
  r.stop = CompileStop::fused;
  CompileResult res = compileGraph(r);
  std::string plan = printFusionPlan(res.fusion, res.graphs[0]);
  EXPECT_NE(plan.find("fusion: 2 groups"), std::string::npos) << plan; // s, t; a, b merged
  EXPECT_NE(plan.find("merged k2"), std::string::npos) << plan;
  ASSERT_NE(plan.find("k0 elementwise []: {add %"), std::string::npos) << plan;
  EXPECT_EQ(plan.find("elementwise []"), plan.rfind("elementwise []")) << "one scalar group";
  auto g = [](const std::vector<Tensor> &v) {
    Tensor a = v[0] * 0.1;
    Tensor m = matmul(v[0], v[0]); // a library call after a's group started
    Tensor b = m * 0.9;            // b's group reads m: it cannot move before the call
    return std::vector<Tensor>{a + b};
  };
  CompileRequest r2 = requestFor(g, {Tensor::randn({16, 16}, 1)}, Target::cpu);
  r2.stop = CompileStop::fused;
  CompileResult res2 = compileGraph(r2);
  std::string plan2 = printFusionPlan(res2.fusion, res2.graphs[0]);
  EXPECT_EQ(plan2.find("merged"), std::string::npos) << plan2;
  // and the compiled results equal eager
  std::vector<Tensor> in = {Tensor::randn({16, 16}, 1), Tensor::randn({16, 16}, 2),
                            Tensor::randn({}, 3)};
  auto cf = compile(fn);
  EXPECT_TRUE(allclose(cf(in)[0], fn(in)[0], 1e-5, 1e-6));
  auto cg = compile(g);
  const std::vector<Tensor> one = {in[0]};
  EXPECT_TRUE(allclose(cg(one)[0], g(one)[0], 1e-5, 1e-5));
}

// A large value that kernels of other groups read, cheap to make from what they read anyway,
// is computed again by each of them instead of stored (FusionGroup::recomputed): here a
// loss and its logits' gradient in one graph, as in a whole training step, whose kernels
// read the log-probabilities and their exp again after the row statistics. No stored
// intermediate is as large as the f32 log-probabilities (but the f32 logits, where a
// product makes them), and the results equal eager's.
TEST(CompileGraph, ALargeCheapValueIsComputedAgainByTheKernelsThatReadIt) {
  LibraryMatmulsEnv library;
  constexpr int64_t kRows = 64, kClasses = 4096; // f32 [64, 4096]: 1 MiB
  // the logits: bf16 (an input, widened), or f32 made by a product (a 1 MiB library result,
  // which the readers then read with two row statistics: those do not count against it)
  auto fn = [](const std::vector<Tensor> &v) {
    Tensor logits = v.size() > 2 ? matmul(v[2], v[3]) : v[0].to(DType::f32);
    Tensor logp = log_softmax(logits, -1);
    Tensor hit = eq(Tensor::arange(kClasses, DType::i64), unsqueeze(v[1], -1));
    Tensor picked = sum(where(hit, logp, 0.0), {-1}, true);
    Tensor seed = where(hit, -1.0 / sum(picked), 0.0); // after every row's pick: a kernel later
    Tensor grad = seed - exp(logp) * sum(seed, {-1}, true);
    return std::vector<Tensor>{picked, grad.to(DType::bf16)};
  };
  std::vector<int64_t> targets;
  for (int64_t i = 0; i < kRows; ++i) targets.push_back(i * 997 % kClasses);
  const Tensor t = Tensor::from_vector(targets, {kRows});
  for (bool f32 : {false, true}) {
    std::vector<Tensor> in = {Tensor::randn({kRows, kClasses}, 1).to(DType::bf16), t};
    if (f32) {
      in.push_back(Tensor::randn({kRows, 32}, 2));
      in.push_back(Tensor::randn({32, kClasses}, 3));
    }
    CompileRequest r = requestFor(fn, in, Target::cpu);
    r.stop = CompileStop::program;
    CompileResult res = compileGraph(r);
    const std::string plan = printFusionPlan(res.fusion, res.graphs[0]);
    EXPECT_NE(plan.find("recomputes {"), std::string::npos) << plan;
    int large = 0; // stored intermediates as large as the f32 log-probabilities
    for (const Buffer &b : res.program.buffers) {
      large += (b.kind == Buffer::Kind::arena || b.kind == Buffer::Kind::dynamic) &&
               b.bytes >= kRows * kClasses * 4;
    }
    EXPECT_EQ(large, f32 ? 1 : 0) << plan; // the f32 logits themselves
    auto cf = compile(fn);
    std::vector<Tensor> want = fn(in), got = cf(in);
    EXPECT_TRUE(allclose(got[0], want[0], 1e-4, 1e-5)) << (f32 ? "f32" : "bf16");
    EXPECT_TRUE(allclose(got[1].to(DType::f32), want[1].to(DType::f32), 1e-2, 1e-6));
  }
}

// Scalars computed from inputs alone (an optimizer's bias corrections, a chain per
// parameter) are placed before every kernel, however many there are: a kernel that reads
// them never starts before their tiny group, which used to cut an update once the tiny group
// before it was full (256 nodes) and store its intermediates.
TEST(CompileGraph, ScalarsFromInputsComeBeforeTheKernelsThatReadThem) {
  constexpr int kParams = 40;
  auto fn = [](const std::vector<Tensor> &v) {
    std::vector<Tensor> out;
    for (int p = 0; p < kParams; ++p) {
      const Tensor &step = v[static_cast<size_t>(2 * p + 1)];
      Tensor m = v[static_cast<size_t>(2 * p)] * 0.9; // the update starts
      Tensor c1 = 1.0 - pow(0.9, step), c2 = 1.0 - pow(0.999, step);
      Tensor s = sqrt(c2) / c1 * 1e-3 + step * 0.0;
      out.push_back(m * s + 1.0);
    }
    return out;
  };
  std::vector<Tensor> in;
  for (int p = 0; p < kParams; ++p) {
    in.push_back(Tensor::randn({64, 64}, static_cast<uint64_t>(p)));
    in.push_back(Tensor::full({}, 3.0 + p));
  }
  CompileRequest r = requestFor(fn, in, Target::cpu);
  r.stop = CompileStop::program;
  CompileResult res = compileGraph(r);
  const std::string plan = printFusionPlan(res.fusion, res.graphs[0]);
  int updates = 0, stored = 0;
  for (const FusionGroup &grp : res.fusion.groups) {
    if (grp.mergedInto < 0 && grp.domain == Shape{64, 64}) ++updates;
  }
  for (const Buffer &b : res.program.buffers)
    stored += b.kind == Buffer::Kind::arena && b.bytes >= 64 * 64 * 4;
  EXPECT_EQ(updates, kParams) << plan; // one kernel per update
  EXPECT_EQ(stored, 0) << plan;        // nothing of an update goes through memory
  auto cf = compile(fn);
  std::vector<Tensor> want = fn(in), got = cf(in);
  for (int p = 0; p < kParams; ++p) EXPECT_TRUE(allclose(got[p], want[p], 1e-5, 1e-6)) << p;
}

// cross_entropy: the log-softmax kernel also takes the target's one-hot compare and the
// pick of its log-probability (arange runs before every group, and the compare's group
// merges into the reduction's where the pick reads both), so the log-probabilities need
// not be stored for a second kernel.
TEST(CompileGraph, CrossEntropyPicksTheTargetInsideTheSoftmaxKernel) {
  auto fn = [](const std::vector<Tensor> &v) {
    return std::vector<Tensor>{cross_entropy(v[0], v[1])};
  };
  Tensor target = Tensor::from_vector(std::vector<int64_t>{3, 0, 7, 1}, {4});
  CompileRequest r = requestFor(fn, {Tensor::randn({4, 10}, 1), target}, Target::cpu);
  r.stop = CompileStop::fused;
  CompileResult res = compileGraph(r);
  std::string plan = printFusionPlan(res.fusion, res.graphs[0]);
  const size_t amax = plan.find("amax");
  ASSERT_NE(amax, std::string::npos) << plan;
  const std::string group = plan.substr(amax, plan.find('\n', amax) - amax);
  EXPECT_NE(group.find("eq %"), std::string::npos) << plan;
  EXPECT_NE(group.find("where %"), std::string::npos) << plan;
  auto cf = compile(fn);
  const std::vector<Tensor> in = {Tensor::randn({4, 10}, 1), target};
  EXPECT_TRUE(allclose(cf(in)[0], fn(in)[0], 1e-5, 1e-6));
}

struct CliResult {
  int code;
  std::string out, err;
};

CliResult cli(std::vector<const char *> args) {
  args.insert(args.begin(), "rcjit");
  std::ostringstream out, err;
  int code = tools::runCli(static_cast<int>(args.size()), args.data(), out, err);
  return {code, out.str(), err.str()};
}

// `rcjit trace --dump ptx/program --target cuda` shows the program Target::cuda compiles:
// the same request through the same compile path, so the linear's bias is split off its
// GEMM and no post-op is fused (the CPU's program keeps both in oneDNN).
TEST(CompileGraph, TraceDumpsTheProgramTheCudaTargetCompiles) {
  LibraryMatmulsEnv library;
  CliResult r =
      cli({"trace", "--model", "toy64", "--seq", "8", "--dump", "program", "--target", "cuda"});
  ASSERT_EQ(r.code, 0) << r.err;
  tools::ModelConfig c;
  c.seq = 8;
  std::unique_ptr<tools::Model> m = tools::findModel("toy64").build(c);
  auto fn = [&](const std::vector<Tensor> &in) { return std::vector<Tensor>{m->forward(in)}; };
  CompileRequest req = requestFor(fn, m->makeInputs(c), Target::cuda);
  req.stop = CompileStop::program;
  CompileResult cuda = compileGraph(req);
  std::string want = printProgram(cuda.program);
  EXPECT_EQ(r.out.substr(0, want.size()), want);
  int gemms = 0;
  for (const Step &s : cuda.program.steps) {
    if (s.kind != Step::Kind::library) continue;
    ++gemms;
    EXPECT_EQ(s.operands.size(), 2u) << s.note << ": the bias is its own kernel on cuda";
    EXPECT_TRUE(s.postOps.empty()) << s.note;
  }
  EXPECT_EQ(gemms, 129); // 64 layers x 2 linears + the head
  req.exec.target = Target::cpu;
  CompileResult cpu = compileGraph(req);
  EXPECT_NE(printProgram(cpu.program), want) << "the CPU fuses bias and relu into oneDNN";
  CliResult fusion = cli({"trace", "--model", "toy64", "--seq", "8", "--dump", "fusion"});
  ASSERT_EQ(fusion.code, 0) << fusion.err;
  EXPECT_NE(fusion.out.find("fusion: "), std::string::npos);
  EXPECT_NE(fusion.out.find("library linear"), std::string::npos) << fusion.out;
  EXPECT_EQ(cli({"trace", "--dump", "llvm", "--target", "cuda"}).code, 2);
  EXPECT_EQ(cli({"trace", "--target", "tpu"}).code, 2);
}

} // namespace
