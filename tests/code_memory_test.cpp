// Compiled code is freed: the machine code (one ORC JITDylib per module) of a function that
// is gone, and everything on cache::clear(). Measured as resident memory (/proc/self/statm)
// over many distinct compiled functions, created, called, destroyed, then cache::clear().
#include <gtest/gtest.h>

#include <malloc.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <rcjit/rcjit.h>

#include "jit/Tiered.h"

using namespace rcjit;

namespace {

// Resident bytes of this process, after giving freed heap back to the system (what the
// allocator only caches is not kept by rcjit).
int64_t residentBytes() {
  malloc_trim(0);
  std::ifstream statm("/proc/self/statm");
  int64_t size = 0, resident = 0;
  statm >> size >> resident;
  return resident * static_cast<int64_t>(sysconf(_SC_PAGESIZE));
}

// The disk cache off while a test runs (cache::clear() empties the directory in use).
struct NoDiskCache {
  std::string before = cache::dir();
  NoDiskCache() { cache::set_dir("off"); }
  ~NoDiskCache() { cache::set_dir(before); }
};

struct Chain {
  double c;
  Tensor operator()(const Tensor &t) const { return tanh(t * c) + c; }
};

// `n` distinct compiled functions (each its own constants, so its own kernels and module),
// in batches of 50: each compiled and called, the batch destroyed; then cache::clear().
void compileDistinct(int first, int n) {
  Tensor x = Tensor::randn({16}, 1);
  for (int b = first; b < first + n; b += 50) {
    std::vector<CompiledFunction<Chain>> batch;
    for (int v = b; v < b + 50 && v < first + n; ++v) {
      const double c = 1.0 + 1e-3 * v;
      auto fn = compile(Chain{c});
      Tensor got = fn(x);
      EXPECT_TRUE(allclose(got, tanh(x * c) + c, 1e-5, 1e-6)) << "function " << v;
      batch.push_back(std::move(fn));
    }
  }
  waitForBackgroundCompiles(600); // (the optimized tiers of the last batch's functions)
  cache::clear();
}

// Growth of resident memory per function over `n` functions, after a warm-up of 100.
double bytesPerFunction(int n, int64_t *growth) {
  NoDiskCache off;
  compileDistinct(0, 100); // LLVM's and the allocator's one-time state
  const int64_t before = residentBytes();
  compileDistinct(100, n);
  *growth = residentBytes() - before;
  std::printf("%d distinct compiled functions, destroyed, then cache::clear(): resident memory "
              "%+.2f MiB (%.0f bytes a function)\n",
              n, *growth / 1048576.0, static_cast<double>(*growth) / n);
  return static_cast<double>(*growth) / n;
}

// Fast: 400 functions (~50 KB each was kept before: +20 MiB); the bound allows 10 KB each.
TEST(CodeMemory, DestroyedFunctionsAndClearFreeTheirCode) {
  int64_t growth = 0;
  EXPECT_LE(bytesPerFunction(400, &growth), 10 * 1024.0) << growth << " bytes";
}

// The acceptance, labelled `slow` (tests/CMakeLists.txt): 2000 functions grow
// resident memory by at most 20 MiB (before the fix: +85 MiB).
TEST(SlowCodeMemory, TwoThousandFunctionsGrowResidentMemoryByAtMost20MiB) {
  int64_t growth = 0;
  bytesPerFunction(2000, &growth);
  EXPECT_LE(growth, int64_t{20} << 20);
}

} // namespace
