// The process-wide sum of compiled collectives' blocked time (see CompiledWaits.h).
#include "dist/CompiledWaits.h"

#include <atomic>
#include <cstdint>

namespace rcjit::dist::detail {

namespace {
std::atomic<int64_t> compiledWaitNanos{0};
} // namespace

void addCompiledCollectiveWait(double seconds) {
  compiledWaitNanos.fetch_add(static_cast<int64_t>(seconds * 1e9), std::memory_order_relaxed);
}

double compiledCollectiveWaitSeconds() {
  return static_cast<double>(compiledWaitNanos.load(std::memory_order_relaxed)) * 1e-9;
}

} // namespace rcjit::dist::detail
