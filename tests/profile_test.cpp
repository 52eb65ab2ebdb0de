// The runtime profiler: a Chrome trace of compiled calls, their steps, compiles and eager
// ops; RCJIT_PROFILE; `rcjit logs` on a profile.
#include <gtest/gtest.h>

#include "tests/TestUtil.h"

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <unistd.h>

#include <rcjit/rcjit.h>

#include "models/Models.h"
#include "support/Threads.h"

using namespace rcjit;

namespace {

using rcjit::test::errorOf;

nlohmann::json readJson(const std::string &path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in); // throws on invalid JSON
}

// The names of the profile's events of `category`, in the file's order.
std::vector<std::string> eventNames(const std::string &path, const char *category) {
  std::vector<std::string> names;
  const nlohmann::json j = readJson(path);
  for (const auto &e : j["traceEvents"]) {
    if (e["cat"] == category) names.push_back(e["name"].get<std::string>());
  }
  return names;
}

TEST(Profiler, RecordsCallsStepsCompilesAndEagerOpsAsAChromeTrace) {
  const std::string path = testing::TempDir() + "rcjit_profile.json";
  Tensor w = Tensor::randn({128, 128}, 1);
  auto f = compile([&](const Tensor &x) { return softmax(relu(matmul(x, w)) * 2.0, -1); },
                   CompileOptions{.name = "profiled"});
  Tensor x = Tensor::randn({64, 128}, 2);
  f(x); // compiled before recording: the recorded calls are steady, on the optimized tier
  ASSERT_TRUE(waitForBackgroundCompiles(600));
  profiler::start(path);
  EXPECT_TRUE(profiler::enabled());
  for (int i = 0; i < 3; ++i) f(x);
  Tensor eager = tanh(x) + 1.0; // two eager ops
  auto g = compile([](const Tensor &a) { return a * 3.0; });
  g(x); // a compile while recording
  profiler::stop();
  EXPECT_FALSE(profiler::enabled());
  nlohmann::json j = readJson(path);
  ASSERT_TRUE(j["traceEvents"].is_array());
  std::set<std::string> cats;
  std::vector<nlohmann::json> calls, steps;
  for (const auto &e : j["traceEvents"]) {
    EXPECT_EQ(e["ph"], "X");
    EXPECT_GE(e["dur"].get<double>(), 0.0);
    cats.insert(e["cat"].get<std::string>());
    if (e["cat"] == "call" && e["name"].get<std::string>().find("profiled") != std::string::npos)
      calls.push_back(e);
    if (e["cat"] == "kernel" || e["cat"] == "library") steps.push_back(e);
  }
  for (const char *c : {"call", "compile", "library", "kernel", "eager op"})
    EXPECT_TRUE(cats.count(c)) << c;
  ASSERT_EQ(calls.size(), 3u);
  for (const auto &c : calls) { // each call holds its program's steps
    int inside = 0;
    for (const auto &s : steps) {
      const double ts = s["ts"], cts = c["ts"], cdur = c["dur"];
      inside += s["tid"] == c["tid"] && ts >= cts && ts <= cts + cdur;
    }
    EXPECT_GE(inside, 2) << c.dump();
  }
  // `rcjit logs` sums it
  std::string out = testing::TempDir() + "rcjit_profile_summary.txt";
  std::string cmd = std::string(RCJIT_CLI) + " logs " + path + " > " + out + " 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  std::ifstream in(out);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("compiled calls that did not compile"), std::string::npos) << text;
  EXPECT_NE(text.find("(profiled, profile_test.cpp:"), std::string::npos) << text;
  EXPECT_NE(text.find("matmul"), std::string::npos) << text;
}

// A small product (under 2^20 multiply-adds, above the generated-kernel size) runs on the
// calling thread, by a primitive made for one thread, in a static program and in one
// specialized per size alike; the profile says so. With two threads.
TEST(Profiler, SmallProductsRunOnTheCallingThreadStaticAndSymbolic) {
  OmpThreads two(2);
  Tensor w = Tensor::randn({128, 64}, 3);
  auto body = [&](const Tensor &x) { return relu(matmul(x, w)); };
  // untiered: the optimized programs' steps (a fast tier's run first)
  auto fixed = compile(body, CompileOptions{.name = "small_static", .tiered = false});
  CompileOptions o{.name = "small_symbolic", .tiered = false};
  o.dynamic = Dynamic::always;
  auto symbolic = compile(body, o);
  Tensor x = Tensor::randn({24, 128}, 4); // 24 x 128 x 64: 196608 multiply-adds
  fixed(x);
  symbolic(x);
  const std::string path = testing::TempDir() + "rcjit_profile_small.json";
  profiler::start(path);
  Tensor a = fixed(x), b = symbolic(x);
  profiler::stop();
  EXPECT_TRUE(allclose(a, relu(matmul(x, w)), 1e-4, 1e-4));
  EXPECT_TRUE(allclose(b, relu(matmul(x, w)), 1e-4, 1e-4));
  const std::vector<std::string> library = eventNames(path, "library");
  const auto serial = std::count_if(library.begin(), library.end(), [](const std::string &n) {
    return n.find("(on the calling thread)") != std::string::npos;
  });
  EXPECT_EQ(library.size(), 2u) << "expected one library step per program";
  EXPECT_EQ(serial, 2) << "expected both programs' products on the calling thread";
}

// An embedding reads the rows its ids name, not its table: a small lookup from a big table
// (an eager step of a compiled program) runs on the calling thread, a big one in OpenMP's
// threads; the profile says which.
TEST(Profiler, SmallLookupInABigTableRunsOnTheCallingThread) {
  OmpThreads two(2);
  Tensor table = Tensor::randn({4096, 512}, 5); // 2M elements
  auto lookup = compile([&](const Tensor &ids) { return embedding(table, ids) * 2.0; },
                        CompileOptions{.name = "lookup"});
  std::vector<int64_t> few(16), many(4096); // 16 x 512 and 4096 x 512 elements read
  for (size_t i = 0; i < few.size(); ++i) few[i] = static_cast<int64_t>(i * 7 % 4096);
  for (size_t i = 0; i < many.size(); ++i) many[i] = static_cast<int64_t>(i * 13 % 4096);
  Tensor small = Tensor::from_vector(few, {16}), big = Tensor::from_vector(many, {4096});
  lookup(small);
  lookup(big);
  ASSERT_TRUE(waitForBackgroundCompiles(600)); // the recorded calls run the optimized tiers
  const std::string path = testing::TempDir() + "rcjit_profile_lookup.json";
  profiler::start(path);
  Tensor a = lookup(small), b = lookup(big);
  profiler::stop();
  EXPECT_TRUE(allclose(a, embedding(table, small) * 2.0, 1e-6, 1e-6));
  EXPECT_TRUE(allclose(b, embedding(table, big) * 2.0, 1e-6, 1e-6));
  const std::vector<std::string> names = eventNames(path, "eager step");
  ASSERT_EQ(names.size(), 2u) << "expected one eager step (the lookup) per call";
  EXPECT_EQ(names[0], "embedding (on the calling thread)");
  EXPECT_EQ(names[1], "embedding");
}

TEST(Profiler, BadUseIsAClearError) {
  profiler::stop(); // not recording: nothing happens
  EXPECT_NE(errorOf([] { profiler::start(""); }).find("start needs a file path"),
            std::string::npos);
  profiler::start("/no/such/dir/p.json");
  std::string err = errorOf([] { profiler::stop(); });
  EXPECT_NE(err.find("cannot write /no/such/dir/p.json"), std::string::npos) << err;
  EXPECT_FALSE(profiler::enabled());
}

// A profile that does not reach the file (a full disk) is an Error with the path and the
// reason, not a silently empty file: what is still buffered at the end is checked too.
TEST(Profiler, AFullDiskIsAnErrorNamingThePathAndTheReason) {
  profiler::start("/dev/full");
  Tensor x = Tensor::randn({4, 4}, 1);
  Tensor y = tanh(x) + 1.0; // a few events: all of them fit in the stream's buffer
  std::string err = errorOf([] { profiler::stop(); });
  EXPECT_NE(err.find("/dev/full"), std::string::npos) << err;
  EXPECT_NE(err.find("No space left on device"), std::string::npos) << err;
  EXPECT_FALSE(profiler::enabled());
}

// RCJIT_PROFILE=FILE profiles a whole process and writes FILE at exit.
TEST(Profiler, EnvironmentVariableProfilesAProcess) {
  const std::string path = testing::TempDir() + "rcjit_profile_env.json";
  std::remove(path.c_str());
  std::string cmd = "RCJIT_PROFILE=" + path + " " + RCJIT_CLI +
                    " bench --model toy64 --modes full --batch 1 --seq 4 --reps 2 --layers 2 "
                    ">/dev/null 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  nlohmann::json j = readJson(path);
  int calls = 0;
  for (const auto &e : j["traceEvents"]) calls += e["cat"] == "call";
  EXPECT_EQ(calls, 3) << "the first call and two timed ones";
}

// A profile of a built-in model's compiled forward: valid Chrome trace JSON, and the steps
// recorded inside a steady call add up to that call's time within 10 % (what is left is
// guards, dispatch and output allocation). Only ratios of recorded spans are compared.
void expectStepsCoverCalls(const std::string &model, tools::ModelConfig c) {
  SCOPED_TRACE(model);
  std::unique_ptr<tools::Model> m = tools::findModel(model).build(c);
  std::vector<Tensor> in = m->makeInputs(c);
  NoGradGuard noGrad;
  auto f = compile([&m](const std::vector<Tensor> &x) { return m->forward(x); },
                   CompileOptions{.name = model});
  f(in);
  // the recorded calls on the optimized tier: without the wait, a compile still in flight
  // (a cold cache and a busy background thread: after other tests in one process) left them
  // on the interpreted first tier, which records no steps (0 % covered)
  ASSERT_TRUE(waitForBackgroundCompiles(600));
  f(in); // switches to it and warms it
  const std::string path =
      testing::TempDir() + "rcjit_profile_" + model + "_" + std::to_string(getpid()) + ".json";
  profiler::start(path);
  for (int i = 0; i < 9; ++i) f(in);
  profiler::stop();
  nlohmann::json j = readJson(path);
  ASSERT_TRUE(j.is_object() && j["traceEvents"].is_array());
  std::vector<nlohmann::json> calls, steps;
  for (const auto &e : j["traceEvents"]) {
    ASSERT_TRUE(e["name"].is_string() && e["cat"].is_string() && e["ts"].is_number() &&
                e["dur"].is_number() && e["pid"].is_number_integer() &&
                e["tid"].is_number_integer())
        << e.dump();
    EXPECT_EQ(e["ph"], "X");
    const std::string cat = e["cat"];
    if (cat == "call") calls.push_back(e);
    if (cat == "kernel" || cat == "library" || cat == "eager step") steps.push_back(e);
  }
  ASSERT_EQ(calls.size(), 9u);
  // per call, the share of its time its steps account for; the median call is compared (a
  // call preempted between two steps on a busy machine is one outlier, not the profile)
  std::vector<double> coverage;
  for (const auto &c : calls) {
    const double cts = c["ts"], cdur = c["dur"];
    double stepUs = 0;
    for (const auto &st : steps) {
      const double ts = st["ts"], dur = st["dur"];
      if (st["tid"] == c["tid"] && ts >= cts && ts + dur <= cts + cdur + 1e-3) stepUs += dur;
    }
    ASSERT_GT(cdur, 0);
    EXPECT_LE(stepUs / cdur, 1.0 + 1e-9) << "steps overlap: " << c.dump();
    coverage.push_back(stepUs / cdur);
  }
  std::sort(coverage.begin(), coverage.end());
  EXPECT_GE(coverage[coverage.size() / 2], 0.90)
      << "the median call's steps cover " << 100 * coverage[coverage.size() / 2] << " %";
}

TEST(Profiler, Toy64StepsAddUpToTheCallTime) {
  expectStepsCoverCalls("toy64", {.batch = 16, .seq = 512, .layers = 2});
}

TEST(Profiler, Gpt2StepsAddUpToTheCallTime) {
  expectStepsCoverCalls("gpt2", {.batch = 1, .seq = 32, .layers = 2});
}

} // namespace
