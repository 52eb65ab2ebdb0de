// When work is worth a parallel region, and running oneDNN on one thread.
#pragma once
#include <omp.h>

namespace rcjit {

/// Below this many multiply-adds a matmul runs on the calling thread: starting a parallel
/// region costs more than such a product, and far more when another process holds the
/// other cores (measured: 0.003 ms on one thread, 8 ms on two, with a build running).
constexpr double kParallelMacs = 1 << 20;

/// OpenMP's thread count for this thread while it lives (oneDNN sizes its parallel regions
/// and the primitives it creates by it).
struct OmpThreads {
  int prev;
  explicit OmpThreads(int n) : prev(omp_get_max_threads()) { omp_set_num_threads(n); }
  ~OmpThreads() { omp_set_num_threads(prev); }
  OmpThreads(const OmpThreads &) = delete;
  OmpThreads &operator=(const OmpThreads &) = delete;
};

} // namespace rcjit
