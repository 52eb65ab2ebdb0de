// Test helper: assembles PTX text with the CUDA toolkit's ptxas (no GPU needed).
#pragma once
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "support/Regex.h"

#ifndef RCJIT_CUDA_ROOT
#define RCJIT_CUDA_ROOT "/usr/local/cuda"
#endif

namespace rcjit::test {

/// The ptxas the tests run: $RCJIT_PTXAS, else the build's CUDA toolkit's bin/ptxas.
inline std::string ptxasPath() {
  const char *env = std::getenv("RCJIT_PTXAS");
  return env && *env ? env : RCJIT_CUDA_ROOT "/bin/ptxas";
}

inline bool havePtxas() { return access(ptxasPath().c_str(), X_OK) == 0; }

/// Skips the calling test when ptxas is not installed.
#define RCJIT_SKIP_WITHOUT_PTXAS()                                                                 \
  if (!::rcjit::test::havePtxas())                                                                 \
  GTEST_SKIP() << "ptxas not found at " << ::rcjit::test::ptxasPath()                              \
               << " (install the CUDA toolkit, or set RCJIT_PTXAS)"

struct PtxasResult {
  int code = -1;   // ptxas's exit status
  std::string log; // its stdout and stderr
};

/// Writes `ptx` to a fresh temporary directory and runs `ptxas -arch=<arch> <flags>` on it.
inline PtxasResult runPtxas(const std::string &ptx, const std::string &arch,
                            const std::string &flags = "") {
  static std::atomic<int> counter{0};
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(testing::TempDir()) / ("rcjit_ptxas_" + std::to_string(getpid()) +
                                                       "_" + std::to_string(counter++));
  fs::create_directories(dir);
  std::ofstream(dir / "kernels.ptx") << ptx;
  const std::string cmd =
      "'" + ptxasPath() + "' -arch=" + arch + " " + flags + " '" + (dir / "kernels.ptx").string() +
      "' -o '" + (dir / "kernels.cubin").string() + "' > '" + (dir / "log").string() + "' 2>&1";
  const int status = std::system(cmd.c_str());
  PtxasResult r;
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::stringstream log;
  log << std::ifstream(dir / "log").rdbuf();
  r.log = log.str();
  std::error_code ec;
  fs::remove_all(dir, ec);
  return r;
}

/// Success when ptxas accepts `ptx` for `arch`; else the ptxas log, and the PTX lines it
/// complains about, as the failure message. `flags` are extra ptxas options ("-O0" checks
/// the PTX the same way in a third of the time: only optimization is skipped).
inline ::testing::AssertionResult assembles(const std::string &ptx, const std::string &arch,
                                            const std::string &flags = "") {
  PtxasResult r = runPtxas(ptx, arch, flags);
  if (r.code == 0) return ::testing::AssertionSuccess();
  ::testing::AssertionResult fail = ::testing::AssertionFailure();
  fail << "ptxas -arch=" << arch << " " << flags << " exited with " << r.code << ":\n" << r.log;
  std::vector<std::string> lines;
  std::istringstream in(ptx);
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  std::smatch m;
  std::string rest = r.log;
  for (int shown = 0; shown < 8 && std::regex_search(rest, m, std::regex("line ([0-9]+)"));
       ++shown) {
    const size_t n = std::stoul(m[1].str());
    if (n >= 1 && n <= lines.size()) fail << "  PTX line " << n << ": " << lines[n - 1] << "\n";
    rest = m.suffix();
  }
  return fail;
}

} // namespace rcjit::test
