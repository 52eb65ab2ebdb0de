// The runtime profiler: a Chrome trace of compiled calls, their steps, compiles and eager
// ops; RCJIT_PROFILE; `rcjit logs` on a profile.
#include <gtest/gtest.h>

#include "tests/TestUtil.h"

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include <rcjit/rcjit.h>

using namespace rcjit;

namespace {

using rcjit::test::errorOf;

nlohmann::json readJson(const std::string &path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in); // throws on invalid JSON
}

TEST(Profiler, RecordsCallsStepsCompilesAndEagerOpsAsAChromeTrace) {
  const std::string path = testing::TempDir() + "rcjit_profile.json";
  Tensor w = Tensor::randn({128, 128}, 1);
  auto f = compile([&](const Tensor &x) { return softmax(relu(matmul(x, w)) * 2.0, -1); },
                   CompileOptions{.name = "profiled"});
  Tensor x = Tensor::randn({64, 128}, 2);
  f(x); // compiled before recording: the recorded calls are steady
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

TEST(Profiler, BadUseIsAClearError) {
  profiler::stop(); // not recording: nothing happens
  EXPECT_NE(errorOf([] { profiler::start(""); }).find("start needs a file path"),
            std::string::npos);
  profiler::start("/no/such/dir/p.json");
  std::string err = errorOf([] { profiler::stop(); });
  EXPECT_NE(err.find("cannot write /no/such/dir/p.json"), std::string::npos) << err;
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

} // namespace
