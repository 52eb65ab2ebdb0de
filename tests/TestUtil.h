// Helpers shared by the test files.
#pragma once
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>

#include <rcjit/rcjit.h>

#include "jit/TierControl.h"
#include "targets/cpu/CpuKernels.h"

#include <cmath>
#include <vector>

namespace rcjit::test {

/// The CPU feature sets among avx2 and avx512 that this CPU runs (each tried with
/// cpu::setCpuFeatures, which refuses a set the CPU lacks); the selection is "native" after.
inline std::vector<std::string> runnableFeatureSets() {
  std::vector<std::string> sets;
  for (const char *set : {"avx2", "avx512"}) {
    try {
      cpu::setCpuFeatures(set);
      sets.push_back(set);
    } catch (const Error &) { // this CPU lacks the set
    }
  }
  cpu::setCpuFeatures("native");
  return sets;
}

/// A compile cache of the test's own (an empty directory under the temp dir, named by
/// `prefix`, the process and a counter) for the scope's life: cleared when made and when
/// dropped, after the background compiles have finished.
struct IsolatedCache {
  std::filesystem::path dir;
  explicit IsolatedCache(const std::string &prefix = "rcjit-test-cache") {
    static int n = 0;
    dir = std::filesystem::temp_directory_path() /
          (prefix + "-" + std::to_string(::getpid()) + "-" + std::to_string(n++));
    std::filesystem::remove_all(dir);
    cache::set_dir(dir.string());
    cache::clear();
  }
  ~IsolatedCache() {
    EXPECT_TRUE(waitForBackgroundCompiles(600));
    cache::clear();
    std::filesystem::remove_all(dir);
  }
  IsolatedCache(const IsolatedCache &) = delete;
  IsolatedCache &operator=(const IsolatedCache &) = delete;
};

/// A fresh file path under the test temp dir ("rcjit_<tag>_<pid>_<name>"), removed at scope
/// exit.
struct TempFile {
  std::string path;
  TempFile(const std::string &tag, const std::string &name)
      : path((std::filesystem::temp_directory_path() /
              ("rcjit_" + tag + "_" + std::to_string(::getpid()) + "_" + name))
                 .string()) {}
  ~TempFile() { std::filesystem::remove(path); }
  TempFile(const TempFile &) = delete;
  TempFile &operator=(const TempFile &) = delete;
};

/// The message of the rcjit::Error `f` throws; "(no error)" and a test failure when it
/// throws none.
inline std::string errorOf(const std::function<void()> &f) {
  try {
    f();
  } catch (const rcjit::Error &e) {
    return e.what();
  }
  ADD_FAILURE() << "expected an rcjit::Error";
  return "(no error)";
}

/// Runs f, expecting an rcjit::Error whose message contains every one of `parts`.
inline void expectError(const std::function<void()> &f, const std::vector<std::string> &parts) {
  try {
    f();
    ADD_FAILURE() << "no rcjit::Error thrown; expected one naming " << parts.front();
  } catch (const rcjit::Error &e) {
    const std::string msg = e.what();
    for (const auto &p : parts) EXPECT_NE(msg.find(p), std::string::npos) << msg << " lacks " << p;
  }
}

/// Expected values of a reference computation, in row-major order, and their shape.
struct Ref {
  std::vector<double> data;
  rcjit::Shape shape;
};

/// A tensor's values as a reference.
inline Ref refOf(const rcjit::Tensor &t) { return {t.to_vector<double>(), t.shape()}; }

/// got equals want elementwise within atol + rtol * |want|.
inline void expectClose(const rcjit::Tensor &got, const Ref &want, double rtol, double atol) {
  ASSERT_EQ(got.shape(), want.shape);
  std::vector<double> g = got.to_vector<double>();
  ASSERT_EQ(g.size(), want.data.size());
  for (size_t i = 0; i < g.size(); ++i) {
    ASSERT_NEAR(g[i], want.data[i], atol + rtol * std::abs(want.data[i])) << "element " << i;
  }
}

inline int64_t numelOf(const rcjit::Shape &s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

/// f32 values as a tensor of dtype dt.
inline rcjit::Tensor make(const std::vector<float> &v, const rcjit::Shape &s,
                          rcjit::DType dt = rcjit::DType::f32) {
  return Tensor::from_vector(v, s).to(dt);
}

/// Sets an environment variable for the life of the object, then restores what it was (unset
/// stays unset): a test never takes away a setting the run was started with (the GPU check
/// points the tests at its cuBLAS and libdevice that way).
class ScopedEnv {
public:
  ScopedEnv(const char *name, const std::string &value) : name_(name) {
    if (const char *old = std::getenv(name)) old_ = old;
    setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() {
    if (old_) {
      setenv(name_.c_str(), old_->c_str(), 1);
    } else {
      unsetenv(name_.c_str());
    }
  }
  ScopedEnv(const ScopedEnv &) = delete;
  ScopedEnv &operator=(const ScopedEnv &) = delete;

private:
  std::string name_;
  std::optional<std::string> old_;
};

// Within its scope a tiered forward program compiles its first tier with the quick LLVM
// pipeline instead of interpreting it (tests of that compile: its log, its kernel batch).
struct CompiledFirstTier {
  bool was = rcjit::setInterpretedFirstTier(false);
  ~CompiledFirstTier() { rcjit::setInterpretedFirstTier(was); }
  CompiledFirstTier() = default;
  CompiledFirstTier(const CompiledFirstTier &) = delete;
  CompiledFirstTier &operator=(const CompiledFirstTier &) = delete;
};

} // namespace rcjit::test
