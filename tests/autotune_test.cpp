// CompileOptions::max_autotune on the CPU: the first call at each set of sizes times every
// kernel and oneDNN step on one thread and on all, keeps the faster, and stores the choice in
// the cache; results equal the default compile's. reduce_overhead is accepted everywhere.
#include <gtest/gtest.h>

#include "tests/AutogradTestUtil.h"
#include "tests/TestUtil.h"

#include <cstdint>
#include <cstdlib>
#include <span>
#include <string>
#include <vector>

#include <rcjit/rcjit.h>

#include "cache/ObjectStore.h"
#include "support/Threads.h"

using namespace rcjit;

namespace {

struct LogsOff {
  ~LogsOff() { set_logs(""); }
};

size_t count(const std::string &text, const std::string &what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// Sets RCJIT_MATMUL_KERNELS for the scope (unset after it).
struct AutotuneMatmulEnv {
  explicit AutotuneMatmulEnv(const char *value) { setenv("RCJIT_MATMUL_KERNELS", value, 1); }
  ~AutotuneMatmulEnv() { unsetenv("RCJIT_MATMUL_KERNELS"); }
};

TEST(MaxAutotune, ResultsEqualTheDefaultAndTheChoiceIsTimedOnceThenRemembered) {
  LogsOff off;
  AutotuneMatmulEnv library("never"); // the product a oneDNN step, one lowering
  cache::clear();
  Tensor w = Tensor::randn({64, 48}, 1), b = Tensor::randn({48}, 2);
  auto fn = [&](const Tensor &x) { return softmax(relu(matmul(x, w) + b) * 2.0, -1); };
  CompileOptions tuned;
  tuned.max_autotune = true;
  Tensor x = Tensor::randn({8, 64}, 3);
  Tensor want = compile(fn)(x);
  set_logs("passes");
  testing::internal::CaptureStderr();
  auto a = compile(fn, tuned);
  Tensor first = a(x), second = a(x);
  std::string log = testing::internal::GetCapturedStderr();
  EXPECT_TRUE(allclose(first, want, 1e-4, 1e-5));
  EXPECT_TRUE(allclose(second, want, 1e-4, 1e-5));
  EXPECT_EQ(count(log, "steps timed"), 1u) << "timed on the first call only:\n" << log;
  EXPECT_NE(log.find("(matmul): "), std::string::npos) << log;
  EXPECT_NE(log.find("ms on 1 thread"), std::string::npos) << log;

  // the same program compiled again (another function object): the cache has the choice
  testing::internal::CaptureStderr();
  auto again = compile(fn, tuned);
  Tensor third = again(x);
  log = testing::internal::GetCapturedStderr();
  EXPECT_TRUE(allclose(third, want, 1e-4, 1e-5));
  EXPECT_EQ(count(log, "steps timed"), 0u) << log;
  EXPECT_NE(log.find("the choices of an earlier tuning, from the cache"), std::string::npos) << log;

  // without max_autotune nothing is timed
  testing::internal::CaptureStderr();
  compile(fn)(x);
  log = testing::internal::GetCapturedStderr();
  EXPECT_EQ(log.find(": autotune ("), std::string::npos) << log;
}

// A small product: max_autotune compiles it as a generated kernel and as a oneDNN call
// (two lowerings), times both on the first call and keeps the faster; the results agree.
TEST(MaxAutotune, ChoosesBetweenAGeneratedMatmulAndTheLibraryOnTheRealShapes) {
  LogsOff off;
  cache::clear();
  Tensor w = Tensor::randn({48, 200}, 1), b = Tensor::randn({48}, 2);
  auto fn = [&](const Tensor &x) { return relu(linear(x, w, b)); };
  Tensor x = Tensor::randn({16, 200}, 3); // 153600 multiply-adds: over the default threshold
  CompileOptions tuned;
  tuned.max_autotune = true;
  set_logs("passes");
  testing::internal::CaptureStderr();
  auto f = compile(fn, tuned);
  Tensor first = f(x), second = f(x);
  std::string log = testing::internal::GetCapturedStderr();
  EXPECT_TRUE(allclose(first, fn(x), 1e-4, 1e-4));
  EXPECT_TRUE(allclose(second, fn(x), 1e-4, 1e-4));
  EXPECT_EQ(count(log, "lowering: kept "), 1u) << log;
  EXPECT_NE(log.find("library matmuls: "), std::string::npos) << log;
  EXPECT_NE(log.find("generated matmuls up to 4194304 multiply-adds: "), std::string::npos) << log;
  // a forced setting leaves one lowering
  AutotuneMatmulEnv always("always");
  testing::internal::CaptureStderr();
  auto g = compile(fn, tuned);
  EXPECT_TRUE(allclose(g(x), fn(x), 1e-4, 1e-4));
  log = testing::internal::GetCapturedStderr();
  EXPECT_EQ(count(log, "lowering: kept "), 0u) << log;
}

// The lowering kept is recorded in the compile cache: compiling the same graph again (as a
// later process would, from the disk cache) compiles only that lowering and times nothing;
// a damaged record is evicted and the candidates are timed again.
TEST(MaxAutotune, TheLoweringChoiceIsRecordedAndReusedByALaterCompile) {
  LogsOff off;
  cache::clear();
  Tensor w = Tensor::randn({48, 200}, 1), b = Tensor::randn({48}, 2);
  auto fn = [&](const Tensor &x) { return relu(linear(x, w, b)); };
  Tensor x = Tensor::randn({16, 200}, 3);
  CompileOptions tuned;
  tuned.max_autotune = true;
  set_logs("passes");
  testing::internal::CaptureStderr();
  auto f = compile(fn, tuned);
  Tensor first = f(x);
  std::string log = testing::internal::GetCapturedStderr();
  ASSERT_EQ(count(log, "lowering: kept "), 1u) << log;
  const size_t at = log.find("lowering: kept ") + 15;
  const std::string kept = log.substr(at, log.find('\n', at) - at);

  testing::internal::CaptureStderr();
  auto g = compile(fn, tuned);
  Tensor second = g(x);
  log = testing::internal::GetCapturedStderr();
  EXPECT_TRUE(allclose(second, first, 1e-5, 1e-5));
  EXPECT_EQ(count(log, "lowering: kept " + kept + " (the choice recorded in the compile cache"), 1u)
      << "kept " << kept << "\n"
      << log;
  EXPECT_EQ(log.find("library matmuls: "), std::string::npos) << "nothing timed again:\n" << log;

  // the record is evicted when it is damaged: every key the cache holds for this process
  // whose object is a lowering record gets garbage, and the next compile times again
  int damaged = 0;
  for (auto &[key, object] : cache::ObjectStore::instance().usedObjects()) {
    const std::string text(object->begin(), object->end());
    if (text.rfind("rcjit-lowering ", 0) != 0) continue;
    const std::string junk = "rcjit-lowering 1 12345\n";
    cache::ObjectStore::instance().store(
        key, std::span<const uint8_t>(reinterpret_cast<const uint8_t *>(junk.data()), junk.size()));
    ++damaged;
  }
  ASSERT_EQ(damaged, 1);
  testing::internal::CaptureStderr();
  auto h = compile(fn, tuned);
  EXPECT_TRUE(allclose(h(x), first, 1e-5, 1e-5));
  log = testing::internal::GetCapturedStderr();
  EXPECT_EQ(count(log, "lowering: kept "), 1u) << log;
  EXPECT_NE(log.find("library matmuls: "), std::string::npos) << "timed again:\n" << log;
}

// A symbolic entry is tuned per set of sizes it runs at.
TEST(MaxAutotune, EverySizeOfADynamicEntryIsTunedOnItsFirstCall) {
  LogsOff off;
  cache::clear();
  CompileOptions o;
  o.max_autotune = true;
  o.dynamic = Dynamic::always;
  auto f = compile([](const Tensor &x) { return tanh(x * 3.0) + 1.0; }, o);
  set_logs("passes");
  testing::internal::CaptureStderr();
  Tensor a = Tensor::randn({4, 32}, 1), b = Tensor::randn({4, 4096}, 2);
  Tensor ra = f(a), rb = f(b), ra2 = f(a);
  std::string log = testing::internal::GetCapturedStderr();
  EXPECT_EQ(f.stats().compiles, 1);
  EXPECT_EQ(count(log, "steps timed"), 2u) << log;
  EXPECT_TRUE(allclose(ra, tanh(a * 3.0) + 1.0, 1e-5, 1e-6));
  EXPECT_TRUE(allclose(rb, tanh(b * 3.0) + 1.0, 1e-5, 1e-6));
  EXPECT_TRUE(allclose(ra2, ra, 0, 0));
}

// Training (full and regional) with max_autotune and reduce_overhead: the same losses as
// the default compile.
TEST(MaxAutotune, TrainingWithTheModeOptionsMatchesTheDefault) {
  std::vector<int64_t> tokens;
  for (int i = 0; i < 2 * 8; ++i) tokens.push_back((i * 7 + 3) % 50);
  Tensor ids = Tensor::from_vector(tokens, {2, 8});
  Tensor targets =
      Tensor::from_vector(std::vector<int64_t>(tokens.rbegin(), tokens.rend()), {2, 8});
  auto run = [&](Mode mode, bool options) {
    auto model = test::tinyGpt2(2, 8);
    auto loss = [&](const Tensor &in, const Tensor &tg) {
      return cross_entropy(model->forward({in}), tg);
    };
    CompileOptions o;
    o.mode = mode;
    o.max_autotune = options;
    o.reduce_overhead = options;
    auto cf = compile(loss, o);
    optim::AdamW opt(model->module().parameters(), {.lr = 3e-3});
    std::vector<double> losses;
    for (int step = 0; step < 5; ++step) {
      opt.zero_grad();
      Tensor l = cf(ids, targets);
      l.backward();
      opt.step();
      losses.push_back(l.item());
    }
    return losses;
  };
  for (Mode mode : {Mode::full, Mode::regional}) {
    std::vector<double> def = run(mode, false), opt = run(mode, true);
    for (size_t i = 0; i < def.size(); ++i)
      EXPECT_NEAR(opt[i], def[i], 1e-4 * std::abs(def[i])) << "step " << i;
  }
}

// A step that writes memory it reads runs once on the tuning call: the compiled AdamW
// step writes each parameter and both moments in place, and timing its kernels (a warm-up
// and several timed runs each) applied the update a dozen times (parameters 0.21 off
// eager's after one step). Parameters equal eager's after every step, the first (tuned)
// included; two threads, so that the tuner times every step.
TEST(MaxAutotune, AStepThatWritesWhatItReadsRunsOnceWhileTimed) {
  OmpThreads two(2);
  cache::clear();
  std::vector<Tensor> pe, pc;
  for (int i = 0; i < 3; ++i) {
    pe.push_back(Tensor::randn({64, 64}, 10 + i).requires_grad_());
    pc.push_back(Tensor::randn({64, 64}, 10 + i).requires_grad_());
  }
  optim::AdamW oe(pe, {.lr = 1e-2}), oc(pc, {.lr = 1e-2});
  CompileOptions tuned;
  tuned.max_autotune = true;
  auto step = compile(
      [&]() {
        oc.step();
        return std::vector<Tensor>{};
      },
      tuned);
  for (int s = 0; s < 3; ++s) {
    for (size_t i = 0; i < pe.size(); ++i) {
      Tensor g = Tensor::randn({64, 64}, 100 * static_cast<uint64_t>(s) + i);
      sum(pe[i] * g, {}).backward();
      sum(pc[i] * g, {}).backward();
    }
    oe.step();
    step();
    oe.zero_grad();
    oc.zero_grad();
    for (size_t i = 0; i < pe.size(); ++i) {
      EXPECT_TRUE(allclose(pc[i], pe[i], 1e-5, 1e-6))
          << "step " << s << " parameter " << i << ": largest difference "
          << amax(abs(pc[i] - pe[i]), {}).item();
    }
  }
}

} // namespace
