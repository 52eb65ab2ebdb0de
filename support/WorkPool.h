// A process-wide thread pool for the compiled CPU program's parallel work: the calling
// thread takes part, work is cut into more chunks than threads and claimed one at a time,
// so a thread the scheduler has descheduled (a busy machine) holds up nobody but its own
// chunk, and idle workers spin briefly and then sleep instead of burning the time slices
// other processes need (what libgomp's spin-waiting does by default). On a machine busier
// than its CPUs the pool packs its threads onto fewer CPUs, where they take turns instead
// of waiting for each other (`packTo`).
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
  /// polls for the next job before it sleeps. `pack`: whether the pool may pack its
  /// threads onto fewer CPUs while other tasks keep the machine's CPUs busy (packTo).
  /// `ompTeam`: a job that is not packed runs on OpenMP's team instead (an OpenMP parallel
  /// region of `threads` threads, the caller its first; see instance()).
  explicit WorkPool(int threads, int spinMicros = kDefaultSpinMicros, bool pack = true,
                    bool ompTeam = false);
  ~WorkPool(); // joins the workers; no job may be running
  WorkPool(const WorkPool &) = delete;
  WorkPool &operator=(const WorkPool &) = delete;

  /// The process's pool. Its size is OpenMP's initial thread count (OMP_NUM_THREADS, else
  /// the CPUs this process may run on), read on first use; RCJIT_POOL_SPIN_US sets the
  /// spin time (default 50), RCJIT_POOL_PACK=off turns packing off (default auto).
  /// Its jobs run on OpenMP's team unless packed (RCJIT_POOL_TEAM=own: on the pool's own
  /// workers): the team oneDNN's GEMMs run on spin-waits after each call (libgomp's
  /// GOMP_SPINCOUNT, ~300 000 pauses), and the pool's own workers then shared the cores
  /// with it. gpt2's 12-layer whole training step (2-core AMD EPYC Zen 4): its kernels
  /// 249 -> 149 ms a step, the step 2119-2124 -> 1944-1954 ms (docs/performance.md).
  static WorkPool &instance();

  int threads() const { return threads_; }

  /// Jobs this thread runs from now on use the pool's own workers, never OpenMP's team (a
  /// pool made with `ompTeam`): for a thread that ends while the process goes on (the
  /// background compile thread, jit/Tiered.cpp). libgomp gives each thread that opens a
  /// parallel region a team of its own, whose workers exit detached after their thread
  /// ends; one still exiting when exit() ran OpenSSL's cleanup lost the error state OpenSSL
  /// keeps per thread (904 bytes, a leak LeakSanitizer reported in CI), and the team's
  /// spinning workers would compete with the main thread's. Such a thread's compiles gain
  /// nothing from sharing oneDNN's team.
  static void useOwnWorkersOnThisThread();

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
  /// Jobs given to the pool's threads (not run inline for having one chunk, a busy pool,
  /// nesting or one thread) since it started, and of those the ones run while its threads
  /// were packed onto fewer CPUs (packTo): a benchmark's sign of a busy machine.
  int64_t pooledJobs() const;
  int64_t packedJobs() const;

  /// Packing. A job's threads meet at its end, so a thread the scheduler holds back stalls
  /// the others: two threads spread over two CPUs that each share with a busy process
  /// spend much of their time waiting for each other (each runs half the time, at phases
  /// of its own), while on one CPU, the other CPU left to the busy processes, they take
  /// turns and waste nothing (gpt2, 2 threads beside two busy processes on 2 CPUs: 413-424
  /// ms a call spread, 345-363 on one CPU; 172-184 idle). So when the process may run on
  /// every online CPU, the pool samples the machine's runnable tasks (/proc/loadavg) at
  /// most every 10 ms at the start of a job, averages those not its own (from 0, each
  /// sample weighing 0.1: a moment's burst does not pack), and packs its
  /// threads onto packTo(...) CPUs (each worker's affinity set, and the calling thread's
  /// for the length of each job, restored after) while the others would leave the team
  /// fewer CPUs than threads; it spreads them again when the others go away. A packed job
  /// runs on its caller alone for its first 200 us, and packed threads do not spin.

  /// CPUs a team of `threads` threads should be packed onto on a machine of `cpus` CPUs
  /// with `others` other runnable tasks (an average): the CPUs a fair scheduler gives the
  /// team, cpus * threads / (threads + others), rounded up once past a quarter, when that
  /// is at most half of `threads` (and fewer than `cpus`); 0 (not packed) otherwise.
  static int packTo(int cpus, int threads, double others);
  /// The CPUs the pool's threads are packed onto now, 0 when not packed.
  int packedCpus() const;
  /// Other runnable tasks beside the pool's threads, averaged over the recent samples;
  /// -1 before the first sample or when the pool does not pack.
  double othersRunnable() const;

  static constexpr int kDefaultSpinMicros = 50;

private:
  struct State;
  void runErased(int64_t chunks, void (*fn)(void *, int64_t), void *ctx);
  int threads_;
  std::unique_ptr<State> state_;
};

} // namespace rcjit
