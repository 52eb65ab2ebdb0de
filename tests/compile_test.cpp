// rcjit::compile in full mode: one compile, no re-tracing, equal results, guards,
// recompiles, stances, the recompile limit, bad input, explain().
#include <gtest/gtest.h>

#include "tests/TestUtil.h"

#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <thread>

#include <rcjit/rcjit.h>

#include "cache/ClearHooks.h"
#include "models/Models.h"
#include "support/Threads.h"
#include "support/WorkPool.h"

using namespace rcjit;

namespace {

using rcjit::test::errorOf;

TEST(Compile, ToyModelCompilesOnceAndMatchesEager) {
  rcjit::NoGradGuard noGrad; // inference: the parameters require grad
  tools::ModelConfig c;
  c.batch = 4;
  c.seq = 16;
  auto m = tools::findModel("toy64").build(c);
  std::vector<Tensor> in = m->makeInputs(c);
  Tensor ref = m->forward(in);
  int traced = 0;
  auto cf = compile([&](const Tensor &x) {
    ++traced;
    return m->forward({x});
  });
  Tensor y1 = cf(in[0]);
  Tensor y2 = cf(in[0]);
  Tensor y3 = cf(in[0]);
  EXPECT_EQ(traced, 1); // later calls run compiled code, not the lambda
  EXPECT_EQ(cf.stats().compiles, 1);
  EXPECT_EQ(cf.stats().recompiles, 0);
  EXPECT_TRUE(allclose(y1, ref, 1e-4, 1e-5));
  EXPECT_TRUE(allclose(y2, ref, 1e-4, 1e-5));
  EXPECT_TRUE(allclose(y3, ref, 1e-4, 1e-5));
  EXPECT_GT(cf.stats().compile_seconds, 0.0);
}

TEST(Compile, ModuleCompileReadsCurrentParameters) {
  rcjit::NoGradGuard noGrad; // inference: the parameters require grad
  nn::Linear fc(8, 4, true, 3);
  auto cm = compile(fc);
  Tensor x = Tensor::randn({2, 8}, 1);
  EXPECT_TRUE(allclose(cm(x), fc(x), 1e-4, 1e-5));
  // in-place update of a parameter is seen by the compiled code
  fc.weight.copy_(Tensor::randn({4, 8}, 9));
  EXPECT_TRUE(allclose(cm(x), fc(x), 1e-4, 1e-5));
  EXPECT_EQ(cm.stats().compiles, 1);
  // a parameter replaced by a new tensor of the same shape and layout passes its guard
  fc.weight = Tensor::randn({4, 8}, 10);
  EXPECT_TRUE(allclose(cm(x), fc(x), 1e-4, 1e-5));
  EXPECT_EQ(cm.stats().compiles, 1);
  // ... and by one of another layout fails it and recompiles
  fc.weight = transpose(Tensor::randn({8, 4}, 11), 0, 1);
  EXPECT_TRUE(allclose(cm(x), fc(x), 1e-4, 1e-5));
  EXPECT_EQ(cm.stats().recompiles, 1);
  EXPECT_NE(cm.explain().find("weight"), std::string::npos);
}

TEST(Compile, NewShapeRecompilesAndOldEntryStays) {
  int traced = 0;
  CompileOptions o;
  o.dynamic = Dynamic::never; // static entries (dynamic_test covers automatic)
  auto cf = compile(
      [&](const Tensor &x) {
        ++traced;
        return softmax(x * 2.0, -1) + 1.0;
      },
      o);
  Tensor a = Tensor::randn({4, 16}, 1), b = Tensor::randn({4, 32}, 2);
  EXPECT_TRUE(allclose(cf(a), softmax(a * 2.0, -1) + 1.0, 1e-4, 1e-5));
  EXPECT_TRUE(allclose(cf(b), softmax(b * 2.0, -1) + 1.0, 1e-4, 1e-5));
  EXPECT_TRUE(allclose(cf(a), softmax(a * 2.0, -1) + 1.0, 1e-4, 1e-5));
  EXPECT_EQ(traced, 2);
  EXPECT_EQ(cf.stats().recompiles, 1);
  std::string ex = cf.explain();
  EXPECT_NE(ex.find("arg 0 dim 1: expected 16, got 32"), std::string::npos) << ex;
  // a dtype change is a guard failure too
  EXPECT_TRUE(allclose(cf(a.to(DType::f64)), softmax(a.to(DType::f64) * 2.0, -1) + 1.0));
  EXPECT_EQ(cf.stats().recompiles, 2);
  // a non-contiguous input fails the stride guard and gets its own entry
  Tensor t = transpose(Tensor::randn({16, 4}, 3), 0, 1);
  EXPECT_TRUE(allclose(cf(t), softmax(t * 2.0, -1) + 1.0, 1e-4, 1e-5));
  EXPECT_EQ(cf.stats().recompiles, 3);
}

TEST(Compile, RecompileLimitFallsBackEagerly) {
  CompileOptions o;
  o.dynamic = Dynamic::never;
  o.recompile_limit = 3;
  auto cf = compile([](const Tensor &x) { return relu(x) * 3.0; }, o);
  for (int n = 1; n <= 6; ++n) {
    Tensor x = Tensor::randn({n}, static_cast<uint64_t>(n));
    EXPECT_TRUE(allclose(cf(x), relu(x) * 3.0));
  }
  EXPECT_EQ(cf.stats().compiles, 3);
  EXPECT_EQ(cf.stats().fallbacks, 3);
}

TEST(Compile, Stances) {
  CompileOptions o;
  o.stance = Stance::fail_on_recompile;
  auto cf = compile([](const Tensor &x) { return exp(x); }, o);
  cf(Tensor::ones({3}));
  std::string msg = errorOf([&] { cf(Tensor::ones({4})); });
  EXPECT_NE(msg.find("fail_on_recompile"), std::string::npos) << msg;
  EXPECT_NE(msg.find("arg 0 dim 0: expected 3, got 4"), std::string::npos) << msg;
  EXPECT_TRUE(allclose(cf(Tensor::ones({3})), exp(Tensor::ones({3})))); // still usable

  o.stance = Stance::eager_on_recompile;
  auto ce = compile([](const Tensor &x) { return exp(x); }, o);
  ce(Tensor::ones({3}));
  EXPECT_TRUE(allclose(ce(Tensor::ones({5})), exp(Tensor::ones({5}))));
  EXPECT_EQ(ce.stats().compiles, 1);
  EXPECT_EQ(ce.stats().fallbacks, 1);

  o.stance = Stance::force_eager;
  int traced = 0;
  auto cn = compile(
      [&](const Tensor &x) {
        ++traced;
        return exp(x);
      },
      o);
  cn(Tensor::ones({3}));
  cn(Tensor::ones({3}));
  EXPECT_EQ(traced, 2);
  EXPECT_EQ(cn.stats().compiles, 0);
}

TEST(Compile, BadInputGivesTheEagerErrorAndStaysUsable) {
  Tensor w = Tensor::randn({8, 4}, 1);
  auto cf = compile([&](const Tensor &x) { return matmul(x, w); });
  Tensor good = Tensor::randn({2, 8}, 2);
  EXPECT_TRUE(allclose(cf(good), matmul(good, w), 1e-4, 1e-5));
  std::string eagerMsg = errorOf([&] { matmul(Tensor::ones({2, 5}), w); });
  std::string compiledMsg = errorOf([&] { cf(Tensor::ones({2, 5})); });
  EXPECT_EQ(compiledMsg, eagerMsg);
  EXPECT_NE(compiledMsg.find("matmul"), std::string::npos);
  EXPECT_TRUE(allclose(cf(good), matmul(good, w), 1e-4, 1e-5));
}

TEST(Compile, VectorArgumentsAndResults) {
  auto cf = compile([](const std::vector<Tensor> &v) {
    return std::vector<Tensor>{v[0] + v[1], v[0] * v[1]};
  });
  Tensor a = Tensor::randn({5}, 1), b = Tensor::randn({5}, 2);
  for (int i = 0; i < 2; ++i) {
    std::vector<Tensor> r = cf(std::vector<Tensor>{a, b});
    ASSERT_EQ(r.size(), 2u);
    EXPECT_TRUE(allclose(r[0], a + b));
    EXPECT_TRUE(allclose(r[1], a * b));
  }
  auto two = compile([](const Tensor &x, const Tensor &y) { return maximum(x, y); });
  EXPECT_TRUE(allclose(two(a, b), maximum(a, b)));
  EXPECT_TRUE(allclose(two(a, b), maximum(a, b)));
}

TEST(Compile, ConcurrentCalls) {
  Tensor w = Tensor::randn({16, 16}, 1);
  auto cf = compile([&](const Tensor &x) { return softmax(linear(x, w), -1); });
  Tensor x = Tensor::randn({32, 16}, 2);
  Tensor ref = softmax(linear(x, w), -1);
  cf(x);
  std::atomic<int> bad{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 50; ++i) {
        if (!allclose(cf(x), ref, 1e-4, 1e-5)) ++bad;
      }
    });
  }
  for (auto &th : threads) th.join();
  EXPECT_EQ(bad.load(), 0);
  EXPECT_EQ(cf.stats().compiles, 1);
}

TEST(Compile, ModeEagerNeverCompiles) {
  CompileOptions o;
  o.mode = Mode::eager;
  auto cf = compile([](const Tensor &x) { return x + 1.0; }, o);
  EXPECT_TRUE(allclose(cf(Tensor::ones({2})), Tensor::full({2}, 2.0)));
  EXPECT_EQ(cf.stats().compiles, 0);
}

TEST(Compile, GraphBreakIsAnErrorWithFullgraph) {
  CompileOptions o;
  o.fullgraph = true;
  auto cf = compile([](const Tensor &x) { return sum(x).item() > 0 ? x : -x; }, o);
  std::string msg = errorOf([&] { cf(Tensor::ones({3})); });
  EXPECT_NE(msg.find("graph break"), std::string::npos) << msg;
  EXPECT_NE(msg.find("item"), std::string::npos) << msg;
  o.fullgraph = false;
  auto cb = compile([](const Tensor &x) { return sum(x).item() > 0 ? x * 2.0 : x * 3.0; }, o);
  EXPECT_TRUE(allclose(cb(Tensor::ones({3})), Tensor::full({3}, 2.0)));
  EXPECT_TRUE(allclose(cb(-Tensor::ones({3})), Tensor::full({3}, -3.0))); // C++ re-runs
  EXPECT_EQ(cb.stats().graph_breaks, 1);
}

TEST(Compile, GraphBreakSegmentsRunCompiledCodeInBothDirections) {
  // data-dependent C++ control flow: the path taken depends on a value read on the host
  int calls = 0;
  Tensor w = Tensor::full({16}, 1.5);
  auto fn = [&](const Tensor &x) {
    ++calls;
    Tensor h = softmax(x * w, -1);
    double top = amax(h).item(); // graph break
    Tensor y = top > 0.5 ? log_softmax(h * 4.0, -1) : exp(h) - 1.0;
    return y + sum(h, {-1}, true);
  };
  auto cf = compile(fn);
  std::vector<float> v(16, 0.0f);
  v[3] = 40.0f;
  Tensor sharp = Tensor::from_vector(v, {16}), flat = Tensor::ones({16}); // top ~1 vs 1/16
  for (int i = 0; i < 3; ++i) {
    for (const Tensor &x : {sharp, flat}) {
      Tensor got = cf(x), want = fn(x);
      EXPECT_TRUE(allclose(got, want, 1e-4, 1e-5)) << "iteration " << i;
    }
  }
  CompileStats st = cf.stats();
  EXPECT_EQ(st.graph_breaks, 1);
  // segments: before the break, and after it for each of the two paths
  EXPECT_EQ(st.compiles, 3) << cf.explain();
  EXPECT_GE(st.cache_hits, 6);
  EXPECT_NE(cf.explain().find("segment programs compiled"), std::string::npos);
  // explain() gives stats()' figures (it used to say "0 compiles" here), in words
  const std::string ex = cf.explain();
  EXPECT_NE(ex.find(": 1 entry, 3 compiles (" + std::to_string(st.cache_hits) +
                    " cache hits), 0 recompiles, 0 eager fallbacks, 1 graph break, "),
            std::string::npos)
      << ex;
  EXPECT_NE(ex.find("0 for the entries, 3 for their segments"), std::string::npos) << ex;
  EXPECT_NE(ex.find(" has 1 graph break: "), std::string::npos) << ex;
}

TEST(Compile, UnavailableOptionsAreClearErrors) {
  CompileOptions o;
  o.target = Target::cuda;
  EXPECT_NE(errorOf([&] { compile([](const Tensor &x) { return x; }, o); }).find("cuda"),
            std::string::npos);
  CompileOptions bad;
  bad.recompile_limit = 0;
  EXPECT_NE(
      errorOf([&] { compile([](const Tensor &x) { return x; }, bad); }).find("recompile_limit"),
      std::string::npos);
}

} // namespace

namespace {

TEST(CompileRegional, Toy64CompilesOneLayerAndReusesIt) {
  rcjit::NoGradGuard noGrad; // inference: the parameters require grad
  tools::ModelConfig c;
  c.batch = 2;
  c.seq = 8;
  c.seed = 777; // a size no other test uses, so the process-wide stage table is cold
  auto m = tools::findModel("toy64").build(c);
  std::vector<Tensor> in = m->makeInputs(c);
  Tensor x = Tensor::randn({2, 7, 10}, 5);
  Tensor ref = m->forward({x});
  CompileOptions o;
  o.mode = Mode::regional;
  int traced = 0;
  auto cf = compile(
      [&](const Tensor &t) {
        ++traced;
        return m->forward({t});
      },
      o);
  EXPECT_TRUE(allclose(cf(x), ref, 1e-4, 1e-5));
  EXPECT_TRUE(allclose(cf(x), ref, 1e-4, 1e-5));
  EXPECT_EQ(traced, 1);
  CompileStats st = cf.stats();
  EXPECT_EQ(st.compiles, 2); // one layer region and the glue (the first linear)
  EXPECT_GE(st.cache_hits, 63);
  EXPECT_NE(cf.explain().find("reused"), std::string::npos);
}

// A regional plan's stages are planned one after another (a stage's output strides key the
// next), but their kernels compile together once all are planned (cpu::KernelBatch): one
// batched step in the passes log after every stage's own steps, no stage's module alone.
TEST(CompileRegional, StagesCompileTheirKernelsTogether) {
  test::CompiledFirstTier compiled; // (an interpreted first tier compiles no kernel)
  cache::clear();
  NoGradGuard noGrad;
  Tensor w = Tensor::randn({32, 32}, 3) * 0.2;
  auto body = [&](const Tensor &x) {
    Tensor h = tanh(x * 2.5) + 1.0; // glue
    for (int i = 0; i < 2; ++i)
      h = region("layer", [&] { return softmax(matmul(h, w), -1) * 3.0 + h; });
    return sigmoid(h) * 0.5; // glue
  };
  CompileOptions o;
  o.mode = Mode::regional;
  auto cf = compile(body, o);
  Tensor x = Tensor::randn({8, 32}, 4);
  set_logs("passes");
  testing::internal::CaptureStderr();
  Tensor y = cf(x);
  const std::string err = testing::internal::GetCapturedStderr();
  set_logs("");
  EXPECT_TRUE(allclose(y, body(x), 1e-4, 1e-5));
  const size_t batched = err.find(": batched kernels (");
  ASSERT_NE(batched, std::string::npos) << err;
  EXPECT_EQ(err.find(": batched kernels (", batched + 1), std::string::npos) << "one batch";
  EXPECT_NE(err.find("of 3 programs compiled together"), std::string::npos) << err;
  EXPECT_EQ(err.find(": target compile (", batched), std::string::npos)
      << "every stage's target compile comes before the batch\n"
      << err;
  EXPECT_EQ(cf.stats().compiles, 3); // glue, layer (twice: one compile), glue
  EXPECT_NE(cf.explain().find("new loop kernels compiled together in"), std::string::npos)
      << cf.explain();
}

// A regional call holds a stage's output until its last reader has run, not to the end of
// the call, and a stage writes its output over the stage output it read last (runInto): the
// peak of a call over 32 layers is the first layer's output and one intermediate (the
// product before tanh), not 32 outputs, nor each layer's input and output side by side.
TEST(CompileRegional, StageOutputsAreFreedAfterTheirLastUse) {
  constexpr int kLayers = 32, kWidth = 64, kRows = 512; // an output: 128 KiB
  std::vector<Tensor> ws;
  for (int i = 0; i < kLayers; ++i) ws.push_back(Tensor::randn({kWidth, kWidth}, 10 + i) * 0.1);
  auto body = [&](const Tensor &x) {
    Tensor h = x;
    for (int i = 0; i < kLayers; ++i)
      h = region("layer", [&] { return tanh(linear(h, ws[static_cast<size_t>(i)])); });
    return h;
  };
  CompileOptions o;
  o.mode = Mode::regional;
  auto cf = compile(body, o);
  Tensor x = Tensor::randn({kRows, kWidth}, 3);
  Tensor ref = body(x);
  EXPECT_TRUE(allclose(cf(x), ref, 1e-4, 1e-5)); // compiles
  // the optimized tier's stages (an interpreted first tier writes each output anew)
  ASSERT_TRUE(waitForBackgroundCompiles(600));
  const int64_t before = memory_stats().current_bytes;
  reset_peak_memory_stats();
  Tensor y = cf(x);
  const int64_t output = kRows * kWidth * 4;
  const int64_t peak = memory_stats().peak_bytes - before;
  EXPECT_TRUE(allclose(y, ref, 1e-4, 1e-5));
  EXPECT_LE(peak, 2 * output + (16 << 10))
      << "peak " << peak << " bytes over the call: " << peak / output
      << " layer outputs alive at once";
}

// Two calls of `cf` on `args`: the first (which compiles) and its result as it was, then
// the second and its peak above what was held before it (memory_stats).
struct TwoCalls {
  Tensor first, firstCopy, second;
  int64_t peak = 0;
};
template <class F, class... A> TwoCalls twoCalls(F &cf, const A &...args) {
  TwoCalls r;
  r.first = cf(args...);
  r.firstCopy = r.first.clone();
  EXPECT_TRUE(waitForBackgroundCompiles(600)); // the second call runs the optimized tier
  const int64_t before = memory_stats().current_bytes;
  reset_peak_memory_stats();
  r.second = cf(args...);
  r.peak = memory_stats().peak_bytes - before;
  return r;
}

// A large intermediate holds memory only from the step that makes it to its last reader,
// not for the whole call in an arena: y and t (4 MiB each, oneDNN products) are live at
// once, the output (4 MiB) after y is gone and written over t, which dies as it is read.
// An arena held for the call had both products in it beside the output: 12 MiB.
TEST(Compile, LargeIntermediatesAreHeldOnlyWhileLive) {
  constexpr int64_t kN = 1024, kBytes = kN * kN * 4;
  Tensor w = Tensor::randn({kN, kN}, 1) * 0.03;
  auto fn = [&](const Tensor &a) {
    Tensor y = matmul(a, w);
    Tensor t = matmul(y, w);
    return t + a;
  };
  auto cf = compile(fn);
  Tensor a = Tensor::randn({kN, kN}, 2);
  const Tensor ref = fn(a);
  const TwoCalls c = twoCalls(cf, a);
  EXPECT_TRUE(allclose(c.first, ref, 1e-4, 1e-4));
  EXPECT_TRUE(allclose(c.second, ref, 1e-4, 1e-4));
  EXPECT_LE(c.peak, 2 * kBytes + (256 << 10)) << "peak " << c.peak << " bytes over the call";
  // the output is a block of its own: the next call leaves it as it was
  EXPECT_NE(c.first.data_ptr(), c.second.data_ptr());
  EXPECT_TRUE(allclose(c.first, c.firstCopy, 0, 0));
}

// An output whose kernel reads a large intermediate for the last time is written over it:
// the call's peak is one 4 MiB block, not the product and the output side by side.
TEST(Compile, AnOutputIsWrittenOverTheIntermediateItReadsLast) {
  constexpr int64_t kN = 1024, kBytes = kN * kN * 4;
  Tensor w = Tensor::randn({kN, kN}, 1) * 0.03;
  auto fn = [&](const Tensor &a) { return matmul(a, w) + a; };
  auto cf = compile(fn);
  Tensor a = Tensor::randn({kN, kN}, 2);
  const Tensor ref = fn(a);
  const TwoCalls c = twoCalls(cf, a);
  EXPECT_TRUE(allclose(c.second, ref, 1e-4, 1e-4));
  EXPECT_LE(c.peak, kBytes + (256 << 10)) << "peak " << c.peak << " bytes over the call";
  EXPECT_TRUE(allclose(c.first, c.firstCopy, 0, 0));
  EXPECT_EQ(c.second.shape(), (Shape{kN, kN}));
  EXPECT_TRUE(c.second.is_contiguous());
}

// A tied weight's gradient sum (jit/passes/EmbeddingGradSum.h) scattered into the other
// gradient's block where that block dies: the call's peak is one [num, dim] table, not
// the product, the embedding gradient and their sum. Values equal eager; an id out of
// range is the embedding's Error, before anything is written.
TEST(Compile, AnEmbeddingGradientIsSummedIntoTheBlockOfTheOther) {
  constexpr int64_t kNum = 1024, kDim = 1024, kBytes = kNum * kDim * 4;
  Tensor w = Tensor::randn({kDim, kDim}, 1) * 0.03;
  auto fn = [&](const Tensor &x, const Tensor &g, const Tensor &ids) {
    return matmul(x, w) + embedding_backward(g, ids, kNum);
  };
  auto cf = compile(fn);
  Tensor x = Tensor::randn({kNum, kDim}, 2), g = Tensor::randn({4, 16, kDim}, 3);
  std::vector<int64_t> idv;
  for (int i = 0; i < 64; ++i) idv.push_back((i * 37) % kNum);
  idv[5] = idv[9]; // a repeated id accumulates
  Tensor ids = Tensor::from_vector(idv, {4, 16});
  const Tensor ref = fn(x, g, ids);
  const TwoCalls c = twoCalls(cf, x, g, ids);
  EXPECT_TRUE(allclose(c.first, ref, 1e-4, 1e-4));
  EXPECT_TRUE(allclose(c.second, ref, 1e-4, 1e-4));
  EXPECT_LE(c.peak, kBytes + (256 << 10)) << "peak " << c.peak << " bytes over the call";
  EXPECT_TRUE(allclose(c.first, c.firstCopy, 0, 0));
  // bf16 gradients (a bf16 model's): summed the ordinary way, as eager does
  Tensor xb = x.to(DType::bf16), gb = g.to(DType::bf16);
  auto fb = [&](const Tensor &x16, const Tensor &g16, const Tensor &i) {
    return matmul(x16, w.to(DType::bf16)) + embedding_backward(g16, i, kNum);
  };
  EXPECT_TRUE(allclose(compile(fb)(xb, gb, ids).to(DType::f32), fb(xb, gb, ids).to(DType::f32),
                       2e-2, 2e-2));
  idv[0] = kNum; // out of range
  const std::string err = test::errorOf([&] { cf(x, g, Tensor::from_vector(idv, {4, 16})); });
  EXPECT_NE(err.find("out of range"), std::string::npos) << err;
}

TEST(CompileRegional, ExplicitRegionsAndParametersAsArguments) {
  Tensor w1 = Tensor::randn({6, 6}, 1), w2 = Tensor::randn({6, 6}, 2);
  auto body = [&](const Tensor &x) {
    Tensor h = region("block", [&] { return relu(linear(x, w1)); });
    return region("block", [&] { return relu(linear(h, w2)); }) * 2.0;
  };
  CompileOptions o;
  o.mode = Mode::regional;
  auto cf = compile(body, o);
  Tensor x = Tensor::randn({3, 6}, 3);
  EXPECT_TRUE(allclose(cf(x), body(x), 1e-4, 1e-5));
  EXPECT_TRUE(allclose(cf(x), body(x), 1e-4, 1e-5));
  // both regions share one compiled program, yet read different weights
  EXPECT_GE(cf.stats().cache_hits, 1);
  w2.copy_(Tensor::randn({6, 6}, 4));
  EXPECT_TRUE(allclose(cf(x), body(x), 1e-4, 1e-5));
}

} // namespace

namespace {
TEST(Compile, MarkDynamicRangeIsEnforced) {
  auto cf = compile([](const Tensor &x) { return x * 2.0; });
  Tensor x = Tensor::ones({2, 8});
  mark_dynamic(x, 1, 5, 256);
  EXPECT_TRUE(allclose(cf(x), x * 2.0));
  Tensor big = Tensor::ones({2, 300});
  mark_dynamic(big, -1, 5, 256);
  std::string msg = errorOf([&] { cf(big); });
  EXPECT_NE(msg.find("arg 0 dim 1: size 300 is outside its mark_dynamic range [5, 256]"),
            std::string::npos)
      << msg;
  EXPECT_NE(errorOf([&] { mark_dynamic(x, 2); }).find("mark_dynamic"), std::string::npos);
  EXPECT_NE(errorOf([&] { mark_dynamic(x, 0, 9, 3); }).find("bad range"), std::string::npos);
}
} // namespace

namespace {

// A captured Tensor variable that is reassigned (not updated in place) used to stay stale in
// the compiled function: it held the tensor it saw when traced.
TEST(CompileCaptured, ReassignedReferenceCapturesAreSeen) {
  const Tensor x = Tensor::randn({4, 8}, 1);
  Tensor w = Tensor::ones({8});
  auto f = compile([&w](const Tensor &a) { return a * w + 1.0; });
  EXPECT_TRUE(allclose(f(x), x * w + 1.0));
  w = Tensor::full({8}, 3.0); // same layout: the same compiled code, reading the new tensor
  EXPECT_TRUE(allclose(f(x), x * 3.0 + 1.0));
  EXPECT_EQ(f.stats().compiles, 1);
  w = Tensor::full({4, 8}, 2.0); // another shape: the guard fails and it recompiles
  EXPECT_TRUE(allclose(f(x), x * 2.0 + 1.0));
  EXPECT_EQ(f.stats().compiles, 2);

  Tensor b = Tensor::zeros({8}); // a default capture by reference, [&]
  auto g = compile([&](const Tensor &a) { return relu(a) - b; });
  EXPECT_TRUE(allclose(g(x), relu(x)));
  b = Tensor::full({8}, 0.5);
  EXPECT_TRUE(allclose(g(x), relu(x) - 0.5));
  EXPECT_EQ(g.stats().compiles, 1);
}

// A by-value capture is the lambda's own copy: reassigning the outer variable changes
// neither the lambda nor the compiled function (both keep the old tensor).
TEST(CompileCaptured, ByValueCapturesFollowTheLambdasOwnCopy) {
  const Tensor x = Tensor::randn({3, 5}, 2);
  Tensor v = Tensor::ones({5});
  auto lambda = [v](const Tensor &a) { return a + v; };
  auto f = compile(lambda);
  EXPECT_TRUE(allclose(f(x), x + 1.0));
  v = Tensor::full({5}, 7.0);
  EXPECT_TRUE(allclose(f(x), lambda(x))); // x + 1 in both
  EXPECT_TRUE(allclose(f(x), x + 1.0));
}

// A program of several kernels compiled with two threads: a module per pool thread (at most
// one per kernel), compiled concurrently on the work pool, each its own cache entry keyed by
// its kernels' text; with one thread, one module. A later compile (the in-process tables
// dropped) finds each module, and so every kernel.
TEST(CompileCpu, KernelsCompileAsAModulePerPoolThreadWithTwoThreads) {
  if (WorkPool::instance().threads() < 2)
    GTEST_SKIP() << "the work pool has one thread (OMP_NUM_THREADS=1)";
  namespace fs = std::filesystem;
  const fs::path root =
      fs::temp_directory_path() / ("rcjit-module-each-" + std::to_string(::getpid()));
  fs::remove_all(root);
  fs::create_directories(root);
  const std::string previousDir = cache::dir();
  cache::set_key_file((root / "cache.key").string());
  cache::set_dir((root / "cache").string());
  cache::detail::runClearHooks();
  auto fn = [](const Tensor &x) { return sum(softmax(x, -1) * 3.0, {0}) + 1.0; };
  CompileOptions untiered; // the modules of one compile (no fast tier beside it)
  untiered.tiered = false;
  const Tensor x = Tensor::randn({16, 32}, 1);
  const Tensor want = fn(x);
  auto compiledModules = [&](int threads) { // modules compiled (cache misses) by a compile
    OmpThreads t(threads);
    const uint64_t before = cache::stats().misses;
    auto cf = compile(fn, untiered);
    EXPECT_TRUE(allclose(cf(x), want, 1e-4, 1e-5)) << threads << " threads";
    return cache::stats().misses - before;
  };
  EXPECT_EQ(compiledModules(1), 1u);
  cache::detail::runClearHooks();
  const uint64_t modules = compiledModules(2);
  if (WorkPool::instance().packedCpus() == 0) { // (a busy machine compiles one module)
    EXPECT_GE(modules, 2u);
    EXPECT_LE(modules, static_cast<uint64_t>(WorkPool::instance().threads()));
    cache::detail::runClearHooks();
    OmpThreads two(2);
    const cache::Stats before = cache::stats();
    auto cf = compile(fn, untiered);
    EXPECT_TRUE(allclose(cf(x), want, 1e-4, 1e-5));
    const cache::Stats after = cache::stats();
    EXPECT_EQ(after.misses, before.misses);
    EXPECT_EQ(after.disk_hits + after.memory_hits - before.disk_hits - before.memory_hits, modules);
    EXPECT_GE(cf.stats().cache_hits, static_cast<int>(modules)); // one per kernel
  }
  cache::set_dir(previousDir);
  cache::detail::runClearHooks();
  fs::remove_all(root);
}

} // namespace
