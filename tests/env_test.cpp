// The environment switch parsers (support/Env.h), and each RCJIT_* switch read through them:
// a bad value is an rcjit::Error naming the variable. Switches read once per process are
// checked in a child process (this binary running only EnvSwitchChild.Run).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <optional>
#include <string>

#include <rcjit/rcjit.h>

#include "TestUtil.h"
#include "support/Env.h"
#include "support/Threads.h"
#include "targets/Target.h"

using namespace rcjit;
using test::errorOf;

namespace {

// Sets (or, with nullopt, unsets) an environment variable for the scope; restores the old
// value after it.
class EnvVarScope {
public:
  EnvVarScope(const char *name, const std::optional<std::string> &value) : name_(name) {
    if (const char *old = std::getenv(name)) old_ = old;
    value ? setenv(name, value->c_str(), 1) : unsetenv(name);
  }
  ~EnvVarScope() { old_ ? setenv(name_.c_str(), old_->c_str(), 1) : unsetenv(name_.c_str()); }
  EnvVarScope(const EnvVarScope &) = delete;
  EnvVarScope &operator=(const EnvVarScope &) = delete;

private:
  std::string name_;
  std::optional<std::string> old_;
};

bool envTextHas(const std::string &s, const std::string &part) {
  return s.find(part) != std::string::npos;
}

constexpr const char *kEnvTestVar = "RCJIT_ENV_TEST_SWITCH";

} // namespace

TEST(EnvSwitch, ChoiceUnsetOrEmptyIsTheDefault) {
  {
    EnvVarScope unset(kEnvTestVar, std::nullopt);
    EXPECT_EQ(envChoice(kEnvTestVar, {"a", "b", "c"}, 1), 1);
    EXPECT_EQ(envChoice(kEnvTestVar, {"a", "b"}, -1), -1);
  }
  EnvVarScope empty(kEnvTestVar, "");
  EXPECT_EQ(envChoice(kEnvTestVar, {"a", "b", "c"}, 2), 2);
  EXPECT_FALSE(envValue(kEnvTestVar).has_value());
}

TEST(EnvSwitch, ChoiceEveryWord) {
  const char *words[] = {"never", "small", "always"};
  for (int i = 0; i < 3; ++i) {
    EnvVarScope set(kEnvTestVar, words[i]);
    EXPECT_EQ(envChoice(kEnvTestVar, {"never", "small", "always"}, 1), i) << words[i];
  }
}

TEST(EnvSwitch, ChoiceBadWordNamesTheVariableTheValueAndTheWords) {
  EnvVarScope set(kEnvTestVar, "Small");
  EXPECT_EQ(errorOf([] {
              envChoice(kEnvTestVar, {"never", "small", "always"}, 1);
            }),
            "RCJIT_ENV_TEST_SWITCH='Small': expected never, small or always");
  EXPECT_EQ(errorOf([] {
              envChoice(kEnvTestVar, {"f32", "native"}, -1, "or unset");
            }),
            "RCJIT_ENV_TEST_SWITCH='Small': expected f32 or native (or unset)");
  EXPECT_EQ(errorOf([] { parseEnvChoice("X", std::string("small "), {"small"}, 0); }),
            "X='small ': expected small");
}

TEST(EnvSwitch, IntegerDefaultRangeAndJunk) {
  {
    EnvVarScope unset(kEnvTestVar, std::nullopt);
    EXPECT_EQ(envInteger(kEnvTestVar, 50, 0, 100), 50);
  }
  {
    EnvVarScope empty(kEnvTestVar, "");
    EXPECT_EQ(envInteger(kEnvTestVar, 50, 0, 100), 50);
  }
  for (const char *v : {"0", "7", "100"}) {
    EnvVarScope set(kEnvTestVar, v);
    EXPECT_EQ(envInteger(kEnvTestVar, 50, 0, 100), std::stoll(v));
  }
  for (const char *v : {"-1", "101", "abc", "12x", "1.5", "99999999999999999999999"}) {
    EnvVarScope set(kEnvTestVar, v);
    EXPECT_EQ(errorOf([] { envInteger(kEnvTestVar, 50, 0, 100, "microseconds"); }),
              std::string("RCJIT_ENV_TEST_SWITCH='") + v +
                  "': expected an integer from 0 to 100 (microseconds)");
  }
  const int64_t big = std::numeric_limits<int64_t>::max();
  EXPECT_EQ(parseEnvInteger("X", std::to_string(big), 1, 1, big), big);
}

TEST(EnvSwitch, FlagIsZeroOrOne) {
  {
    EnvVarScope unset(kEnvTestVar, std::nullopt);
    EXPECT_TRUE(envFlag(kEnvTestVar, true));
    EXPECT_FALSE(envFlag(kEnvTestVar, false));
  }
  EXPECT_FALSE(parseEnvFlag("X", std::string("0"), true));
  EXPECT_TRUE(parseEnvFlag("X", std::string("1"), false));
  EXPECT_FALSE(parseEnvFlag("X", std::nullopt, false));
  EXPECT_EQ(errorOf([] { parseEnvFlag("X", std::string("on"), false); }),
            "X='on': expected 0 or 1");
}

TEST(EnvSwitch, PositiveNumber) {
  EXPECT_EQ(parseEnvPositive("X", std::nullopt, 600), 600);
  EXPECT_EQ(parseEnvPositive("X", std::string("2.5"), 600), 2.5);
  EXPECT_EQ(parseEnvPositive("X", std::string("1e3"), 600), 1000);
  for (const char *v : {"0", "-3", "abc", "3s", "nan"}) {
    EXPECT_EQ(errorOf([&] { parseEnvPositive("X", std::string(v), 600, "seconds"); }),
              std::string("X='") + v + "': expected a positive number of seconds");
  }
}

// The switches read on every use, in this process.

TEST(EnvSwitch, MatmulKernelsValuesAndBadValue) {
  {
    EnvVarScope unset("RCJIT_MATMUL_KERNELS", std::nullopt);
    EXPECT_EQ(smallMatmulMacsFor(Target::cpu), kCpuSmallMatmulMacs);
  }
  {
    EnvVarScope small("RCJIT_MATMUL_KERNELS", "small");
    EXPECT_EQ(smallMatmulMacsFor(Target::cpu), kCpuSmallMatmulMacs);
  }
  {
    EnvVarScope never("RCJIT_MATMUL_KERNELS", "never");
    EXPECT_EQ(smallMatmulMacsFor(Target::cpu), 0);
  }
  {
    EnvVarScope always("RCJIT_MATMUL_KERNELS", "always");
    EXPECT_EQ(smallMatmulMacsFor(Target::cpu), std::numeric_limits<int64_t>::max());
  }
  EnvVarScope bad("RCJIT_MATMUL_KERNELS", "some");
  const std::string msg = errorOf([] { smallMatmulMacsFor(Target::cpu); });
  EXPECT_TRUE(envTextHas(msg, "RCJIT_MATMUL_KERNELS='some': expected never, small or always"))
      << msg;
}

// The switches read once per process: a child process with the variable set compiles and
// runs a linear large enough for a packed oneDNN step, and prints the error it met.

namespace {

// What EnvSwitchChild.Run printed (stdout and stderr) with `name`=`value` set.
std::string envChildOutput(const std::string &name, const std::string &value) {
  const std::string exe = std::filesystem::read_symlink("/proc/self/exe").string();
  // no disk cache: a cold compile every time (a warm one never reads RCJIT_FIRST_TIER)
  const std::string cmd = "RCJIT_ENV_TEST_CHILD=1 RCJIT_CACHE_DIR=off RCJIT_MATMUL_KERNELS=never " +
                          name + "='" + value + "' '" + exe +
                          "' --gtest_filter=EnvSwitchChild.Run 2>&1";
  std::string out;
  if (FILE *p = popen(cmd.c_str(), "r")) {
    char buf[4096];
    for (size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
    pclose(p);
  }
  return out;
}

} // namespace

TEST(EnvSwitchChild, Run) {
  if (!std::getenv("RCJIT_ENV_TEST_CHILD")) GTEST_SKIP() << "runs in a child process only";
  try {
    // the GEMMs are not split: a weight is packed on the second call (the linear's where
    // the cost model packs, the [K, N] matmul's where weights run in [N, K] order: AVX2)
    OmpThreads one(1);
    Tensor w = Tensor::randn({512, 512}, 1), x = Tensor::randn({128, 512}, 2);
    Tensor wkn = Tensor::randn({512, 512}, 3);
    auto f = compile([&](const Tensor &in) { return linear(in, w) + matmul(in, wkn); });
    f(x);
    // the first call interprets the graph; the compile that reads the switches runs in the
    // background, and its error is thrown by the calls after it
    waitForBackgroundCompiles(600);
    for (int i = 0; i < 2; ++i) f(x);
    std::printf("child: ran\n");
  } catch (const Error &e) {
    std::printf("child error: %s\n", e.what());
  }
}

TEST(EnvSwitch, SwitchesReadOnceNameTheVariableOfABadValue) {
  // a valid value runs
  EXPECT_TRUE(envTextHas(envChildOutput("RCJIT_GEMM_SPLIT", "off"), "child: ran"));
  const struct {
    const char *name, *value, *expected;
  } cases[] = {
      {"RCJIT_GEMM_SPLIT", "diagonal", "expected auto, off, batch, rows or cols"},
      {"RCJIT_PACK_WEIGHTS", "yes", "expected 0 or 1"},
      {"RCJIT_PACK_WEIGHTS_MAX_MB", "1G", "expected an integer from 0 to 1099511627776 (MiB)"},
      {"RCJIT_POOL_SPIN_US", "-5", "expected an integer from 0 to 1000000 (microseconds)"},
      {"RCJIT_POOL_PACK", "on", "expected off or auto"},
      {"RCJIT_TIERED", "yes", "expected 0 or 1"},
      {"RCJIT_FIRST_TIER", "jit", "expected compile or interpret"},
#ifdef NDEBUG // (debug builds verify whatever the variable says)
      {"RCJIT_VERIFY_IR", "yes", "expected 0 or 1"},
#endif
      {"RCJIT_CPU_FEATURES", "sse9", "expected native, x86-64-v2, avx2, avx512"},
  };
  for (const auto &c : cases) {
    const std::string out = envChildOutput(c.name, c.value);
    // (a switch the optimized compile reads comes after "compiling <module> (after an
    // interpreted first call): ")
    const size_t error = out.find("child error: ");
    EXPECT_TRUE(
        error != std::string::npos &&
        envTextHas(out.substr(error), std::string(c.name) + "='" + c.value + "': " + c.expected))
        << c.name << ":\n"
        << out;
  }
}
