// Logs: set_logs parsing, the graph/output_code/guards/recompiles lines, the JSON trace file.
#include <gtest/gtest.h>

#include "tests/TestUtil.h"

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include <rcjit/rcjit.h>

using namespace rcjit;

namespace {

struct LogsOff {
  ~LogsOff() { set_logs(""); }
};

TEST(Logs, UnknownKindIsAnError) {
  try {
    set_logs("graph,bogus");
    FAIL() << "no error";
  } catch (const Error &e) {
    EXPECT_NE(std::string(e.what()).find("unknown log kind 'bogus'"), std::string::npos);
  }
  set_logs("");
}

TEST(Logs, GraphOutputCodeGuardsAndRecompiles) {
  LogsOff off;
  set_logs("graph,output_code,guards,recompiles");
  testing::internal::CaptureStderr();
  auto cf = compile([](const Tensor &x) { return softmax(x, -1) * 3.0; });
  cf(Tensor::randn({4, 8}, 1));
  cf(Tensor::randn({4, 9}, 2));
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("[rcjit:graph]"), std::string::npos);
  EXPECT_NE(err.find("amax"), std::string::npos) << "the graph after the pipeline";
  EXPECT_NE(err.find("[rcjit:output_code]"), std::string::npos);
  EXPECT_NE(err.find("define"), std::string::npos) << "LLVM IR of the kernels";
  EXPECT_NE(err.find("[rcjit:guards]"), std::string::npos);
  EXPECT_NE(err.find("arg 0: f32 cpu [4, 8]"), std::string::npos) << err;
  EXPECT_NE(err.find("[rcjit:recompiles]"), std::string::npos);
  EXPECT_NE(err.find("arg 0 dim 1: expected 8, got 9"), std::string::npos) << err;
}

TEST(Logs, TrainingEntriesLogBothHalves) {
  LogsOff off;
  set_logs("graph,output_code,passes");
  testing::internal::CaptureStderr();
  Tensor w = Tensor::randn({8, 4}, 3);
  w.requires_grad_();
  CompileOptions untiered; // the logged code is the code that runs from the first call
  untiered.tiered = false;
  auto cf = compile([&](const Tensor &x) { return sum(tanh(matmul(x, w)), {}); }, untiered);
  cf(Tensor::randn({2, 8}, 1)).backward();
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("entry 0 backward"), std::string::npos) << "the passes log names the half";
  EXPECT_NE(err.find("backward graph"), std::string::npos) << err;
  EXPECT_NE(err.find("[rcjit:output_code]"), std::string::npos);
  EXPECT_NE(err.find(" backward\n"), std::string::npos) << "the backward's LLVM IR";
  EXPECT_TRUE(w.grad().defined());
}

TEST(Logs, RecompileLimitLineNamesTheLastGuard) {
  LogsOff off;
  set_logs("recompiles");
  CompileOptions o;
  o.recompile_limit = 1;
  auto cf = compile([](const Tensor &x) { return x * 2.0; }, o);
  testing::internal::CaptureStderr();
  cf(Tensor::ones({2}));
  cf(Tensor::ones({3}));
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("recompile_limit (1) reached"), std::string::npos) << err;
  EXPECT_NE(err.find("arg 0 dim 0: expected 2, got 3"), std::string::npos) << err;
}

// Two lambdas in one program: the recompiles log tells them apart by the line of their
// compile() call, and a CompileOptions::name is shown next to it; explain() and errors agree.
TEST(Logs, FunctionsAreNamedByCompileCallAndName) {
  LogsOff off;
  set_logs("recompiles");
  const int firstLine = __LINE__ + 1;
  auto a = compile([](const Tensor &x) { return x * 2.0; });
  CompileOptions o;
  o.name = "attn";
  o.stance = Stance::normal;
  auto b = compile([](const Tensor &x) { return x + 1.0; }, o);
  const int secondLine = __LINE__ - 1;
  testing::internal::CaptureStderr();
  a(Tensor::ones({2}));
  a(Tensor::ones({3}));
  b(Tensor::ones({2}));
  b(Tensor::ones({3}));
  std::string err = testing::internal::GetCapturedStderr();
  const std::string aWhere = "(logs_test.cpp:" + std::to_string(firstLine) + "): recompiling";
  const std::string bWhere =
      "(attn, logs_test.cpp:" + std::to_string(secondLine) + "): recompiling";
  EXPECT_NE(err.find(aWhere), std::string::npos) << err;
  EXPECT_NE(err.find(bWhere), std::string::npos) << err;
  EXPECT_NE(a.explain().find("logs_test.cpp:" + std::to_string(firstLine)), std::string::npos)
      << a.explain();
  EXPECT_NE(b.explain().find("(attn, logs_test.cpp:"), std::string::npos) << b.explain();

  CompileOptions strict;
  strict.name = "decoder";
  strict.stance = Stance::fail_on_recompile;
  auto c = compile([](const Tensor &x) { return x - 1.0; }, strict);
  c(Tensor::ones({2}));
  try {
    c(Tensor::ones({3}));
    FAIL() << "no error";
  } catch (const Error &e) {
    EXPECT_NE(std::string(e.what()).find("(decoder, logs_test.cpp:"), std::string::npos)
        << e.what();
  }
}

struct Fc : nn::Module<Fc> {
  nn::Linear fc{64, 64};
  Fc() { register_module("fc", fc); }
  Tensor forward(const Tensor &x) { return relu(fc(x)); }
};
struct Stack : nn::Module<Stack> {
  nn::ModuleList<Fc> blocks;
  Stack() {
    for (int i = 0; i < 2; ++i) blocks.emplace_back();
    register_module("blocks", blocks);
  }
  Tensor forward(Tensor x) {
    for (auto &b : blocks) x = b(x);
    return x;
  }
};

// An op error inside a module names the innermost module, eagerly and while compiling.
TEST(Logs, AnOpErrorInsideAModuleNamesTheModule) {
  Stack net;
  Tensor bad = Tensor::randn({4, 64}, 1, DType::f64);
  const std::string where = "(in module blocks.0.fc, rcjit::nn::Linear)";
  std::string eager = rcjit::test::errorOf([&] { net(bad); });
  EXPECT_NE(eager.find("linear: expected operands of one dtype"), std::string::npos) << eager;
  EXPECT_NE(eager.find(where), std::string::npos) << eager;
  EXPECT_EQ(eager.find(where), eager.rfind("(in module")) << "named once: " << eager;
  auto cf = compile(net);
  std::string compiled = rcjit::test::errorOf([&] { cf(bad); });
  EXPECT_NE(compiled.find(where), std::string::npos) << compiled;
}

TEST(Logs, EveryLineOfAMultiLineMessageHasThePrefix) {
  LogsOff off;
  set_logs("guards,graph,recompiles_verbose");
  testing::internal::CaptureStderr();
  auto cf = compile([](const Tensor &x, const Tensor &y) { return softmax(x, -1) + y; });
  cf(Tensor::randn({4, 8}, 1), Tensor::randn({4, 8}, 2));
  cf(Tensor::randn({4, 9}, 1), Tensor::randn({4, 9}, 2));
  std::string err = testing::internal::GetCapturedStderr();
  int lines = 0;
  std::istringstream in(err);
  for (std::string line; std::getline(in, line); ++lines) {
    EXPECT_EQ(line.rfind("[rcjit:", 0), 0u) << "line " << lines << ": '" << line << "' in\n" << err;
  }
  EXPECT_GT(lines, 10) << err; // guards of two entries and two graphs, several lines each
  EXPECT_NE(err.find("[rcjit:guards] arg 1: f32 cpu [4, 8]"), std::string::npos) << err;
  EXPECT_NE(err.find("[rcjit:recompiles_verbose]   entry 0: "), std::string::npos) << err;
}

TEST(Logs, TraceFileGetsOneJsonLinePerEvent) {
  std::string file = testing::TempDir() + "rcjit_trace_test.jsonl";
  std::remove(file.c_str());
  std::string cmd = "RCJIT_TRACE_FILE=" + file + " " + RCJIT_CLI +
                    " bench --model toy64 --modes full --batch 1 --seq 4 --reps 1 >/dev/null 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  std::ifstream in(file);
  int compiles = 0, lines = 0;
  for (std::string line; std::getline(in, line);) {
    nlohmann::json j = nlohmann::json::parse(line); // throws on a malformed line
    ++lines;
    EXPECT_EQ(j["v"], 1) << line;
    EXPECT_TRUE(j.contains("kind") && j.contains("message") && j.contains("pid")) << line;
    if (j["event"] == "compile") {
      ++compiles;
      EXPECT_TRUE(j.contains("seconds"));
      EXPECT_TRUE(j.contains("function"));
      EXPECT_NE(j.value("name", "").find(".cpp:"), std::string::npos)
          << "the compile() call's file:line: " << line;
    }
  }
  EXPECT_GE(lines, 1);
  EXPECT_EQ(compiles, 1);
}

} // namespace
