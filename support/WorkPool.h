// A process-wide thread pool for the compiled CPU program's parallel work: the calling
// thread takes part, work is cut into more chunks than threads and claimed one at a time,
// so a thread the scheduler has descheduled (a busy machine) holds up nobody but its own
// chunk, and idle workers spin briefly and then sleep instead of burning the time slices
// other processes need (what libgomp's spin-waiting does by default).
#pragma once
#include <cstdint>
#include <memory>
#include <type_traits>
#include <utility>

namespace rcjit {

class WorkPool {
public:
  /// A pool running each job on `threads` threads, the caller included (threads - 1
  /// workers, started on the first parallel job). `spinMicros`: how long an idle worker
  /// polls for the next job before it sleeps.
  explicit WorkPool(int threads, int spinMicros = kDefaultSpinMicros);
  ~WorkPool(); // joins the workers; no job may be running
  WorkPool(const WorkPool &) = delete;
  WorkPool &operator=(const WorkPool &) = delete;

  /// The process's pool. Its size is OpenMP's initial thread count (OMP_NUM_THREADS, else
  /// the CPUs this process may run on), read on first use; RCJIT_POOL_SPIN_US sets the
  /// spin time (default 50).
  static WorkPool &instance();

  int threads() const { return threads_; }

  /// Runs `f(chunk)` once for every chunk in [0, chunks), on the calling thread and
  /// whichever workers are running, each claiming the next unclaimed chunk; returns when
  /// all have run. Chunks run with OpenMP's thread count set to 1 on their thread, so a
  /// chunk calling an OpenMP-threaded library (oneDNN) runs it on that thread. Runs every
  /// chunk on the calling thread, in order, when the pool has one thread, the calling
  /// thread's OpenMP thread count is 1, another job is running (a concurrent caller, or a
  /// chunk using the pool: nested use), or there is a single chunk. The first exception a
  /// chunk throws is rethrown here as rcjit::Error (a non-rcjit exception becomes one
  /// naming its what()); chunks not started by then are skipped. Thread-safe.
  template <class F> void run(int64_t chunks, F &&f) {
    using Fn = std::remove_reference_t<F>;
    runErased(
        chunks, [](void *ctx, int64_t c) { (*static_cast<Fn *>(ctx))(c); },
        const_cast<void *>(static_cast<const void *>(&f)));
  }

  /// Jobs run in parallel since the pool started, and how many chunks workers (not the
  /// callers) ran; for tests.
  int64_t parallelJobs() const;
  int64_t workerChunks() const;

  static constexpr int kDefaultSpinMicros = 50;

private:
  struct State;
  void runErased(int64_t chunks, void (*fn)(void *, int64_t), void *ctx);
  int threads_;
  std::unique_ptr<State> state_;
};

} // namespace rcjit
