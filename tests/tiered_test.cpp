// Tiered compilation (CompileOptions::tiered): the fast tier's results (interpreted and
// compiled), the switch to the optimized tier (equal results and output layouts before and
// after, concurrent callers during it), the warm start that runs the optimized tier from the
// first call, tiered = false, and a process that exits with a background compile in flight.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include <rcjit/rcjit.h>

#include "jit/Tiered.h"
#include "support/Threads.h"
#include "tests/TestUtil.h"

extern char **environ;

using namespace rcjit;
namespace fs = std::filesystem;

namespace {

// Three small matmuls (64 wide: generated kernels in the optimized tier) with relu and tanh.
struct SmallMlp {
  Tensor w1 = Tensor::randn({64, 64}, 11), w2 = Tensor::randn({64, 64}, 12),
         w3 = Tensor::randn({64, 32}, 13), b = Tensor::randn({64}, 14);
  Tensor operator()(const Tensor &x) const {
    Tensor h = relu(matmul(x, w1) + b);
    h = tanh(matmul(h, w2) * 0.1);
    return matmul(h, w3);
  }
};

bool has(const std::string &text, const std::string &what) {
  return text.find(what) != std::string::npos;
}

// A forward program's first tier interprets the traced graph on the eager kernels (no loop
// kernel compiled before the first call); RCJIT_FIRST_TIER=compile (here the setter) compiles
// it with the quick pipeline instead. Both compute eager's values and switch alike.
TEST(Tiered, ResultsEqualBeforeAndAfterTheSwitch) {
  test::IsolatedCache cacheDir("rcjit-tiered-test");
  NoGradGuard noGrad;
  SmallMlp f;
  Tensor x = Tensor::randn({1, 16, 64}, 1);
  Tensor want = f(x);
  for (bool interpret : {true, false}) {
    SCOPED_TRACE(interpret ? "interpreted first tier" : "compiled first tier");
    const bool was = setInterpretedFirstTier(interpret);
    auto cf = compile([&](const Tensor &t) { return f(t); }); // tiered by default
    Tensor first = cf(x);
    setInterpretedFirstTier(was);
    EXPECT_TRUE(allclose(first, want, 1e-4, 1e-5));
    const std::string fast = cf.explain();
    EXPECT_EQ(has(fast, "fast tier (the traced graph interpreted on the eager kernels"), interpret)
        << fast;
    EXPECT_EQ(has(fast, "fast tier (library matmuls, quick LLVM"), !interpret) << fast;
    ASSERT_TRUE(waitForBackgroundCompiles(600));
    Tensor after = cf(x);
    const std::string ex = cf.explain();
    // the program explain() lists is the lowering the interpreted calls never ran, and says
    // so while that tier runs
    EXPECT_EQ(has(fast, "the program listed is its lowering"), interpret) << fast;
    EXPECT_FALSE(has(ex, "the program listed is its lowering")) << ex;
    EXPECT_TRUE(has(ex, "switched to the optimized tier at call 2")) << ex;
    EXPECT_TRUE(has(ex, "optimized tier 1 calls")) << ex;
    EXPECT_TRUE(allclose(after, want, 1e-4, 1e-5));
    EXPECT_TRUE(allclose(after, first, 1e-4, 1e-5));
    EXPECT_EQ(cf.stats().compiles, 1) << "both tiers are one compiled graph";
    EXPECT_EQ(cf.stats().recompiles, 0);
    cache::clear(); // (the second round compiles its fast tier again)
  }
}

TEST(Tiered, WarmStartRunsTheOptimizedTierFromTheFirstCall) {
  test::IsolatedCache cacheDir("rcjit-tiered-test");
  NoGradGuard noGrad;
  SmallMlp f;
  Tensor x = Tensor::randn({2, 8, 64}, 2);
  auto fn = [&](const Tensor &t) { return f(t); };
  {
    auto cold = compile(fn);
    cold(x);
    ASSERT_TRUE(waitForBackgroundCompiles(600));
    cold(x);
    ASSERT_TRUE(has(cold.explain(), "switched to the optimized tier")) << cold.explain();
  }
  auto warm = compile(fn); // the compile cache holds the optimized tier now
  Tensor y = warm(x);
  EXPECT_FALSE(has(warm.explain(), "tiered:")) << warm.explain();
  EXPECT_TRUE(allclose(y, f(x), 1e-4, 1e-5));
}

// save_artifacts right after a first call waits for the optimized tier's background compile,
// so a process warmed from the blob runs the optimized code from its first call.
TEST(Tiered, SavedArtifactsHoldTheOptimizedTierInFlight) {
  test::IsolatedCache cacheDir("rcjit-tiered-test");
  NoGradGuard noGrad;
  SmallMlp f;
  Tensor x = Tensor::randn({2, 8, 64}, 5);
  auto fn = [&](const Tensor &t) { return f(t); };
  std::vector<uint8_t> blob;
  {
    auto cold = compile(fn);
    cold(x);
    blob = cache::save_artifacts(); // no wait here: the background compile is in flight
  }
  cache::clear();
  ASSERT_GT(cache::load_artifacts(blob), 0u);
  auto warm = compile(fn);
  Tensor y = warm(x);
  EXPECT_FALSE(has(warm.explain(), "tiered:")) << warm.explain();
  EXPECT_TRUE(allclose(y, f(x), 1e-4, 1e-5));
}

TEST(Tiered, FalseWaitsForTheOptimizedCode) {
  test::IsolatedCache cacheDir("rcjit-tiered-test");
  NoGradGuard noGrad;
  SmallMlp f;
  Tensor x = Tensor::randn({1, 4, 64}, 3);
  CompileOptions o;
  o.tiered = false;
  auto cf = compile([&](const Tensor &t) { return f(t); }, o);
  Tensor y = cf(x);
  EXPECT_FALSE(has(cf.explain(), "tiered:")) << cf.explain();
  EXPECT_TRUE(has(cf.explain(), "kernel k0")) << "generated small matmuls\n" << cf.explain();
  EXPECT_TRUE(allclose(y, f(x), 1e-4, 1e-5));
  EXPECT_EQ(cf.stats().compiles, 1);
}

// The explain() section that says how each library step runs.
std::string libraryRuns(const std::string &explain) {
  const size_t at = explain.find("library steps run as:");
  return at == std::string::npos ? "" : explain.substr(at);
}

// The background compile makes the optimized tier's GEMMs as a compile on the calling
// thread would: for the caller's OpenMP count (oneDNN primitives keep the count they are
// made under; made under the compile thread's own 1, every large GEMM of the optimized
// tier ran on one thread).
TEST(Tiered, TheOptimizedTierIsMadeForTheCallersThreads) {
  test::IsolatedCache cacheDir("rcjit-tiered-test");
  NoGradGuard noGrad;
  OmpThreads two(2);
  Tensor w = Tensor::randn({512, 256}, 21), x = Tensor::randn({64, 256}, 22); // 2^23 MACs
  auto fn = [&](const Tensor &t) { return relu(linear(t, w, Tensor())); };
  CompileOptions untiered;
  untiered.tiered = false;
  auto direct = compile(fn, untiered);
  Tensor want = direct(x);
  const std::string wantRuns = libraryRuns(direct.explain());
  ASSERT_FALSE(wantRuns.empty()) << direct.explain();
  EXPECT_TRUE(has(wantRuns, "made for 2 threads")) << wantRuns;
  cache::clear(); // the tiered compile compiles again
  auto tiered = compile(fn);
  tiered(x);
  ASSERT_TRUE(waitForBackgroundCompiles(600));
  Tensor y = tiered(x);
  const std::string ex = tiered.explain();
  ASSERT_TRUE(has(ex, "switched to the optimized tier")) << ex;
  EXPECT_EQ(libraryRuns(ex), wantRuns) << ex;
  EXPECT_TRUE(allclose(y, want, 1e-4, 1e-4));
}

TEST(Tiered, RegionalStagesSwitchToo) {
  test::IsolatedCache cacheDir("rcjit-tiered-test");
  NoGradGuard noGrad;
  SmallMlp f, g;
  Tensor x = Tensor::randn({1, 8, 64}, 4);
  CompileOptions o;
  o.mode = Mode::regional;
  auto fn = [&](const Tensor &t) {
    Tensor h = region("a", [&] { return matmul(f(t), transpose(g.w3, 0, 1)); });
    return region("b", [&] { return f(h); });
  };
  Tensor want = fn(x);
  auto cf = compile(fn, o);
  // outputs up to ~24 after two chained MLPs: summation order differs between eager's and the
  // tiers' GEMMs by up to ~7e-5 near zero on AVX2 hosts, so the absolute tolerance is 1e-3
  EXPECT_TRUE(allclose(cf(x), want, 1e-4, 1e-3));
  ASSERT_TRUE(waitForBackgroundCompiles(600));
  EXPECT_TRUE(allclose(cf(x), want, 1e-4, 1e-3));
  EXPECT_TRUE(has(cf.explain(), "switched to the optimized tier")) << cf.explain();
}

// The interpreted first tier returns each output in the layout the compiled tiers give it
// (a transposed product, a broadcast, a slice, an input passed through, a concatenation, an
// elementwise result of a transposed input, a permuted reshape): the same shapes, strides and
// values before and after the switch. (CompileGraph.InterpretedFirstTierTakesThePrograms-
// OutputLayouts makes the two layouts differ.)
TEST(Tiered, InterpretedFirstTierKeepsTheCompiledOutputLayouts) {
  test::IsolatedCache cacheDir("rcjit-tiered-test");
  NoGradGuard noGrad;
  Tensor w = Tensor::randn({32, 48}, 10);
  auto fn = [&](const Tensor &t) {
    Tensor p = matmul(t, w), a = tanh(t);
    return std::vector<Tensor>{transpose(p, 0, 1),
                               expand(sum(t, {1}, true), {16, 32}),
                               slice(relu(p), 1, 8, 40),
                               t,
                               cat({a, t * 2.0}, 1),
                               relu(transpose(t, 0, 1)) * 3.0,
                               permute(reshape(a, {4, 4, 32}), {2, 0, 1})};
  };
  Tensor x = Tensor::randn({16, 32}, 11);
  std::vector<Tensor> want = fn(x);
  auto cf = compile(fn);
  std::vector<Tensor> first = cf(x);
  ASSERT_TRUE(has(cf.explain(), "interpreted on the eager kernels")) << cf.explain();
  ASSERT_TRUE(waitForBackgroundCompiles(600));
  std::vector<Tensor> after = cf(x);
  ASSERT_TRUE(has(cf.explain(), "switched to the optimized tier")) << cf.explain();
  ASSERT_EQ(first.size(), want.size());
  ASSERT_EQ(after.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    SCOPED_TRACE("output " + std::to_string(i));
    EXPECT_EQ(first[i].shape(), after[i].shape());
    EXPECT_EQ(first[i].strides(), after[i].strides());
    EXPECT_TRUE(allclose(first[i], want[i], 1e-4, 1e-5));
    EXPECT_TRUE(allclose(after[i], want[i], 1e-4, 1e-5));
  }
}

// The fast tier vectorizes a kernel whose work pays for the vectorizer's compile time (a
// softmax over 64 x 4096) and leaves a small one scalar; the logged fast-tier IR shows which,
// and both compute eager's values.
TEST(Tiered, FastTierVectorizesTheKernelsThatPayForIt) {
  test::IsolatedCache cacheDir("rcjit-tiered-test");
  NoGradGuard noGrad;
  auto fn = [](const Tensor &t) { return softmax(t * 0.5, -1) * tanh(t); };
  Tensor big = Tensor::randn({64, 4096}, 6), small = Tensor::randn({4, 8}, 7);
  for (const Tensor *x : {&big, &small}) {
    const bool large = x == &big;
    SCOPED_TRACE(large ? "64 x 4096" : "4 x 8");
    auto cf = compile(fn);
    set_logs("output_code");
    testing::internal::CaptureStderr();
    Tensor y = cf(*x);
    const std::string ir = testing::internal::GetCapturedStderr();
    set_logs("");
    EXPECT_TRUE(has(cf.explain(), "tiered: fast tier")) << cf.explain();
    ASSERT_TRUE(has(ir, "define void @k0")) << ir;
    EXPECT_EQ(has(ir, "x float>"), large) << ir;
    EXPECT_TRUE(allclose(y, fn(*x), 1e-4, 1e-6));
    ASSERT_TRUE(waitForBackgroundCompiles(600));
  }
}

// A regional stage that identical layers share runs once per layer in a call: the fast tier
// weighs its kernels' work by that, as a full program's identical layers add up (16 layers of
// a softmax over 16 x 1024 vectorize; the same layer alone does not).
TEST(Tiered, RegionalStagesWeighTheirKernelsByTheLayersThatShareThem) {
  test::IsolatedCache cacheDir("rcjit-tiered-test");
  NoGradGuard noGrad;
  Tensor x = Tensor::randn({16, 1024}, 8);
  for (int layers : {16, 1}) {
    SCOPED_TRACE(std::to_string(layers) + " layers");
    auto fn = [layers](const Tensor &t) {
      Tensor h = t;
      for (int i = 0; i < layers; ++i)
        h = region("layer", [&] { return softmax(h * 0.5, -1) * tanh(h) * 1.5; });
      return h;
    };
    CompileOptions o;
    o.mode = Mode::regional;
    auto cf = compile(fn, o);
    set_logs("output_code");
    testing::internal::CaptureStderr();
    Tensor y = cf(x);
    const std::string ir = testing::internal::GetCapturedStderr();
    set_logs("");
    ASSERT_TRUE(has(ir, "define void @k0")) << ir;
    EXPECT_EQ(has(ir, "x float>"), layers == 16) << ir;
    EXPECT_TRUE(allclose(y, fn(x), 1e-4, 1e-6));
    ASSERT_TRUE(waitForBackgroundCompiles(600));
    cache::clear(); // (the next compile's stage is not this one's)
  }
}

// Threads call while the optimized tier compiles and is switched in: every result equals
// eager's (scripts/sanitize.sh runs this under ThreadSanitizer).
TEST(Tiered, ConcurrentCallersDuringTheSwitch) {
  test::IsolatedCache cacheDir("rcjit-tiered-test");
  NoGradGuard noGrad;
  SmallMlp f;
  Tensor x = Tensor::randn({1, 16, 64}, 5);
  Tensor want = f(x);
  auto cf = compile([&](const Tensor &t) { return f(t); });
  cf(x); // the first call compiles; the optimized tier compiles in the background
  std::atomic<int> bad{0}, calls{0};
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < 3; ++t) {
    threads.emplace_back([&] {
      NoGradGuard ng;
      while (!stop.load()) {
        if (!allclose(cf(x), want, 1e-4, 1e-5)) ++bad;
        ++calls;
      }
    });
  }
  const bool idle = waitForBackgroundCompiles(600);
  // a few more calls after the switch
  const int at = calls.load();
  while (calls.load() < at + 30) std::this_thread::yield();
  stop = true;
  for (std::thread &t : threads) t.join();
  EXPECT_TRUE(idle);
  EXPECT_EQ(bad.load(), 0);
  EXPECT_TRUE(has(cf.explain(), "switched to the optimized tier")) << cf.explain();
}

// Runs in a child process only (RCJIT_TIERED_TEST_CHILD set): compiles a function with many
// kernels and returns from main at once, with its optimized tier compiling in the background.
TEST(TieredChild, ExitsDuringABackgroundCompile) {
  if (!std::getenv("RCJIT_TIERED_TEST_CHILD")) GTEST_SKIP() << "runs in a child process only";
  NoGradGuard noGrad;
  std::vector<Tensor> ws;
  for (int i = 0; i < 24; ++i) ws.push_back(Tensor::randn({48, 48}, 100 + i));
  auto cf = compile([&](const Tensor &x) {
    Tensor h = x;
    for (size_t i = 0; i < ws.size(); ++i)
      h = i % 2 ? tanh(matmul(h, ws[i])) : gelu(matmul(h, ws[i]));
    return h;
  });
  Tensor x = Tensor::randn({2, 48}, 1);
  EXPECT_EQ(cf(x).shape(), (Shape{2, 48}));
  std::exit(0); // static destructors and atexit handlers run with the compile in flight
}

// Runs this test binary's test `test` in a child process with the cache directory `dir` and
// `extra` in its environment; returns its wait status.
int runChild(const std::string &test, const fs::path &dir, const std::vector<std::string> &extra) {
  std::vector<std::string> env;
  for (char **e = environ; *e; ++e) {
    std::string s = *e;
    if (s.rfind("RCJIT_CACHE_DIR=", 0) != 0) env.push_back(s);
  }
  env.insert(env.end(), extra.begin(), extra.end());
  env.push_back("RCJIT_CACHE_DIR=" + dir.string());
  std::vector<char *> envp;
  for (std::string &s : env) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::string exe = fs::read_symlink("/proc/self/exe").string();
  std::string filter = "--gtest_filter=" + test;
  char *argv[] = {exe.data(), filter.data(), nullptr};
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  pid_t pid = -1;
  int rc = posix_spawn(&pid, exe.c_str(), &fa, nullptr, argv, envp.data());
  posix_spawn_file_actions_destroy(&fa);
  EXPECT_EQ(rc, 0);
  if (rc != 0) return -1;
  int status = 0;
  EXPECT_EQ(::waitpid(pid, &status, 0), pid);
  return status;
}

TEST(Tiered, ProcessExitsDuringABackgroundCompile) {
  test::IsolatedCache cacheDir("rcjit-tiered-test");
  const int status = runChild("TieredChild.ExitsDuringABackgroundCompile", cacheDir.dir,
                              {"RCJIT_TIERED_TEST_CHILD=1"});
  EXPECT_TRUE(WIFEXITED(status)) << "the child died of signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

// Runs in a child process only (RCJIT_TIERED_TEST_CHILD set): a regional function of three
// distinct stages (glue, a layer used twice, glue), its optimized tier compiled in the
// background and cached. With RCJIT_TIERED_TEST_WARM set, the process starts on the cache a
// cold one left: it runs the optimized tier from the first call, and every lookup hits (the
// stages' kernels, compiled together as a KernelBatch, keep the modules, and so the object
// cache's keys, that the cold process's background compiles made one stage at a time).
TEST(TieredChild, RegionalPlanOnTheDiskCache) {
  if (!std::getenv("RCJIT_TIERED_TEST_CHILD")) GTEST_SKIP() << "runs in a child process only";
  const bool warm = std::getenv("RCJIT_TIERED_TEST_WARM") != nullptr;
  NoGradGuard noGrad;
  SmallMlp f;
  auto fn = [&](const Tensor &t) {
    Tensor h = tanh(t * 1.5) + softmax(t, -1); // glue
    for (int i = 0; i < 2; ++i)
      h = region("layer", [&] { return matmul(f(h), transpose(f.w3, 0, 1)) * 0.01 + gelu(h); });
    return sigmoid(h) * 2.0 - relu(h); // glue
  };
  Tensor x = Tensor::randn({2, 8, 64}, 9);
  CompileOptions o;
  o.mode = Mode::regional;
  auto cf = compile(fn, o);
  cache::reset_stats();
  EXPECT_TRUE(allclose(cf(x), fn(x), 1e-4, 1e-4));
  ASSERT_TRUE(waitForBackgroundCompiles(600));
  if (!warm) return;
  EXPECT_FALSE(has(cf.explain(), "tiered:")) << cf.explain();
  const cache::Stats st = cache::stats();
  EXPECT_GT(st.disk_hits, 0u);
  EXPECT_EQ(st.misses, 0u) << "a warm start compiled something the cold one had cached";
}

TEST(Tiered, RegionalWarmStartFindsEveryKernelOnDisk) {
  test::IsolatedCache cacheDir("rcjit-tiered-test");
  for (const bool warm : {false, true}) {
    SCOPED_TRACE(warm ? "warm" : "cold");
    std::vector<std::string> env = {"RCJIT_TIERED_TEST_CHILD=1"};
    if (warm) env.push_back("RCJIT_TIERED_TEST_WARM=1");
    const int status = runChild("TieredChild.RegionalPlanOnTheDiskCache", cacheDir.dir, env);
    ASSERT_TRUE(WIFEXITED(status)) << "the child died of signal " << WTERMSIG(status);
    EXPECT_EQ(WEXITSTATUS(status), 0) << "the child's test failed (run it with "
                                         "RCJIT_TIERED_TEST_CHILD=1 to see why)";
  }
}

} // namespace
