// The one parallel-for of the library's own loops: contiguous ranges of an index space run on
// the process's WorkPool (eager ops' OpenMP loops, targets/eager/Iter.h, are not moved yet).
#pragma once
#include <algorithm>
#include <cstdint>

#include "support/WorkPool.h"

namespace rcjit {

/// Ranges per pool thread at most: more ranges than threads, so that a thread the
/// scheduler holds back delays only its own range (WorkPool's claiming order).
inline constexpr int64_t kRangesPerThread = 4;

/// Runs body(begin, end) over [0, n) as contiguous, disjoint ranges of at least `grain`
/// indices (the whole of [0, n) in one call when n < 2 * grain), on WorkPool::instance():
/// the calling thread takes part, and everything runs on it in the cases WorkPool::run
/// lists (one pool thread, nested use, a busy pool). The ranges depend on n, grain and the
/// pool's size only, so a body whose result depends on the index alone gives the same
/// result whatever the threads. `body` must be safe to call at once on disjoint ranges; the
/// first exception it throws is rethrown as by WorkPool::run. Thread-safe.
template <class F> void parallelForRanges(int64_t n, int64_t grain, F &&body) {
  if (n <= 0) return;
  WorkPool &pool = WorkPool::instance();
  const int64_t byGrain = n / std::max<int64_t>(1, grain);
  const int64_t ranges = std::min<int64_t>(byGrain, pool.threads() * kRangesPerThread);
  if (ranges <= 1) {
    body(int64_t{0}, n);
    return;
  }
  pool.run(ranges, [&](int64_t r) { body(n * r / ranges, n * (r + 1) / ranges); });
}

} // namespace rcjit
