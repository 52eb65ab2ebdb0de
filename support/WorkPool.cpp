// The work pool (WorkPool.h): a job is a shared counter of chunks; the caller publishes it,
// wakes sleeping workers, claims chunks itself, and waits only for chunks already claimed.
#include "support/WorkPool.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include <rcjit/Error.h>

#include "support/Env.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define RCJIT_POOL_PAUSE() _mm_pause()
#else
#define RCJIT_POOL_PAUSE() std::this_thread::yield()
#endif

namespace rcjit {

namespace {

// Set on pool workers for their life and on a caller while its job runs: a pool used from
// inside a chunk runs inline.
thread_local bool tlInsideWorkPool = false;

// OpenMP's thread count for this thread while it lives (as support/Threads.h's OmpThreads,
// which this bottom-layer file does not include to stay free of the kParallelMacs policy).
struct PoolOmpOne {
  int prev;
  PoolOmpOne() : prev(omp_get_max_threads()) {
    if (prev != 1) omp_set_num_threads(1);
  }
  ~PoolOmpOne() {
    if (prev != 1) omp_set_num_threads(prev);
  }
};

// OpenMP's initial thread count: the first value of OMP_NUM_THREADS, else the CPUs this
// process may run on (what libgomp uses), whatever the calling thread has set since.
int poolInitialThreads() {
  if (const char *env = std::getenv("OMP_NUM_THREADS")) {
    char *end = nullptr;
    long n = std::strtol(env, &end, 10);
    if (end != env && n >= 1) return static_cast<int>(std::min<long>(n, 1024));
  }
  return std::max(1, omp_get_num_procs());
}

int poolSpinMicros() {
  return static_cast<int>(
      envInteger("RCJIT_POOL_SPIN_US", WorkPool::kDefaultSpinMicros, 0, 1000000, "microseconds"));
}

// Polls `done()` for about `micros` microseconds; true once it holds.
template <class F> bool spinUntil(int micros, F &&done) {
  if (done()) return true;
  if (micros <= 0) return false;
  const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(micros);
  for (;;) {
    for (int i = 0; i < 64; ++i) {
      RCJIT_POOL_PAUSE();
      if (done()) return true;
    }
    if (std::chrono::steady_clock::now() >= until) return false;
  }
}

} // namespace

struct WorkPool::State {
  struct Job {
    void (*fn)(void *, int64_t) = nullptr;
    void *ctx = nullptr;
    int64_t chunks = 0;
    std::atomic<int64_t> next{0};
    std::atomic<int64_t> left{0}; // chunks claimed or not, not yet finished
    std::atomic<bool> failed{false};
    std::atomic<bool> callerSleeps{false};
    std::mutex mu; // the first error; the caller's sleep
    std::condition_variable cv;
    std::exception_ptr error;
  };

  int spinMicros;
  std::atomic<bool> busy{false}; // a job is running
  std::mutex jobMu;
  std::shared_ptr<Job> job; // the running job, or null
  std::atomic<uint64_t> generation{0};
  std::atomic<bool> stop{false};
  std::mutex sleepMu;
  std::condition_variable sleepCv;
  std::atomic<int> sleepers{0};
  std::mutex startMu;
  std::vector<std::thread> workers;
  std::atomic<bool> started{false};
  std::atomic<int64_t> parallelJobs{0}, workerChunks{0};

  // Claims and runs chunks of `j` until none is left; returns how many it ran.
  static int64_t work(Job &j) {
    int64_t ran = 0;
    for (;;) {
      const int64_t c = j.next.fetch_add(1, std::memory_order_relaxed);
      if (c >= j.chunks) break;
      if (!j.failed.load(std::memory_order_relaxed)) {
        try {
          j.fn(j.ctx, c);
        } catch (...) {
          std::lock_guard<std::mutex> lock(j.mu);
          if (!j.error) j.error = std::current_exception();
          j.failed.store(true, std::memory_order_relaxed);
        }
      }
      ++ran;
      if (j.left.fetch_sub(1, std::memory_order_seq_cst) == 1 &&
          j.callerSleeps.load(std::memory_order_seq_cst)) {
        std::lock_guard<std::mutex> lock(j.mu);
        j.cv.notify_all();
      }
    }
    return ran;
  }

  void workerLoop() {
    tlInsideWorkPool = true;
    omp_set_num_threads(1); // oneDNN called from a chunk: no team of its own
    uint64_t seen = 0;
    for (;;) {
      auto fresh = [&] {
        return generation.load(std::memory_order_acquire) != seen ||
               stop.load(std::memory_order_relaxed);
      };
      if (!spinUntil(spinMicros, fresh)) {
        std::unique_lock<std::mutex> lock(sleepMu);
        sleepers.fetch_add(1, std::memory_order_seq_cst);
        while (!fresh()) sleepCv.wait(lock);
        sleepers.fetch_sub(1, std::memory_order_relaxed);
      }
      if (stop.load(std::memory_order_relaxed)) return;
      seen = generation.load(std::memory_order_acquire);
      std::shared_ptr<Job> j;
      {
        std::lock_guard<std::mutex> lock(jobMu);
        j = job;
      }
      if (j) workerChunks.fetch_add(work(*j), std::memory_order_relaxed);
    }
  }

  void wake() {
    generation.fetch_add(1, std::memory_order_seq_cst);
    if (sleepers.load(std::memory_order_seq_cst) > 0) {
      { std::lock_guard<std::mutex> lock(sleepMu); }
      sleepCv.notify_all();
    }
  }

  // Starts the workers once; false when none could be started (the job then runs inline).
  bool start(int count) {
    if (started.load(std::memory_order_acquire)) return !workers.empty();
    std::lock_guard<std::mutex> lock(startMu);
    if (!started.load(std::memory_order_relaxed)) {
      try {
        for (int i = 0; i < count; ++i) workers.emplace_back([this] { workerLoop(); });
      } catch (const std::system_error &) {
        // fewer workers than asked: the ones started share the work
      }
      started.store(true, std::memory_order_release);
    }
    return !workers.empty();
  }
};

WorkPool::WorkPool(int threads, int spinMicros)
    : threads_(std::max(1, threads)), state_(std::make_unique<State>()) {
  state_->spinMicros = std::max(0, spinMicros);
}

WorkPool::~WorkPool() {
  state_->stop.store(true, std::memory_order_seq_cst);
  state_->wake();
  {
    std::lock_guard<std::mutex> lock(state_->sleepMu);
  }
  state_->sleepCv.notify_all();
  for (std::thread &t : state_->workers) t.join();
}

WorkPool &WorkPool::instance() {
  // never destroyed: compiled functions may run during static destruction
  static WorkPool *pool = new WorkPool(poolInitialThreads(), poolSpinMicros());
  return *pool;
}

int64_t WorkPool::parallelJobs() const {
  return state_->parallelJobs.load(std::memory_order_relaxed);
}
int64_t WorkPool::workerChunks() const {
  return state_->workerChunks.load(std::memory_order_relaxed);
}

namespace {
[[noreturn]] void rethrowAsRcjitError(std::exception_ptr e) {
  try {
    std::rethrow_exception(e);
  } catch (const Error &) {
    throw;
  } catch (const std::exception &x) {
    throw Error(std::string("a parallel chunk failed: ") + x.what());
  } catch (...) {
    throw Error("a parallel chunk failed with an exception that is not a std::exception");
  }
}
} // namespace

void WorkPool::runErased(int64_t chunks, void (*fn)(void *, int64_t), void *ctx) {
  if (chunks <= 0) return;
  State &s = *state_;
  PoolOmpOne one;
  const bool parallel = threads_ > 1 && chunks > 1 && one.prev > 1 && !tlInsideWorkPool &&
                        !s.busy.exchange(true, std::memory_order_acquire);
  if (!parallel) {
    for (int64_t c = 0; c < chunks; ++c) {
      try {
        fn(ctx, c);
      } catch (...) {
        rethrowAsRcjitError(std::current_exception());
      }
    }
    return;
  }
  struct Done { // the job's end, also when starting it throws
    State &s;
    ~Done() {
      {
        std::lock_guard<std::mutex> lock(s.jobMu);
        s.job.reset();
      }
      tlInsideWorkPool = false;
      s.busy.store(false, std::memory_order_release);
    }
  } done{s};
  tlInsideWorkPool = true;
  auto j = std::make_shared<State::Job>();
  j->fn = fn;
  j->ctx = ctx;
  j->chunks = chunks;
  j->left.store(chunks, std::memory_order_relaxed);
  if (s.start(threads_ - 1)) {
    {
      std::lock_guard<std::mutex> lock(s.jobMu);
      s.job = j;
    }
    s.wake();
    s.parallelJobs.fetch_add(1, std::memory_order_relaxed);
  }
  State::work(*j);
  // wait for chunks that workers claimed: spin, then sleep until the last one ends
  auto finished = [&] { return j->left.load(std::memory_order_acquire) == 0; };
  if (!spinUntil(s.spinMicros, finished)) {
    std::unique_lock<std::mutex> lock(j->mu);
    j->callerSleeps.store(true, std::memory_order_seq_cst);
    while (!finished()) j->cv.wait(lock);
  }
  if (j->error) rethrowAsRcjitError(j->error);
}

} // namespace rcjit
