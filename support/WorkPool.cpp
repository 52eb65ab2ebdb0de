// The work pool (WorkPool.h): a job is a shared counter of chunks; the caller publishes it,
// wakes sleeping workers, claims chunks itself, and waits only for chunks already claimed.
#include "support/WorkPool.h"

#include <fcntl.h>
#include <omp.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <mutex>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include <rcjit/Error.h>

#include "support/Env.h"
#include "support/Events.h"

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
thread_local bool tlOwnWorkers = false; // useOwnWorkersOnThisThread()

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

// Packing's sampling (WorkPool.h): at most one sample per this many milliseconds, each
// weighing this much in the running average of the other runnable tasks; a packed team
// spreads again only once that average is this many tasks below what packs it.
constexpr int kPackSampleMillis = 10;
constexpr double kPackSampleWeight = 0.1;
constexpr double kUnpackMargin = 0.5;
// A packed job runs on its caller alone for this long before a worker is woken.
constexpr int kPackedSoloMicros = 200;

// The machine's runnable tasks now (the fourth field of /proc/loadavg, "R/TOTAL"), -1 when
// it cannot be read.
int runnableTasks(int fd) {
  char buf[128];
  const ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
  if (n <= 0) return -1;
  buf[n] = 0;
  const char *p = buf; // "0.61 0.52 0.45 2/345 6789"
  for (int field = 0; field < 3; ++field) {
    p = std::strchr(p, ' ');
    if (!p) return -1;
    ++p;
  }
  char *end = nullptr;
  const long r = std::strtol(p, &end, 10);
  if (end == p || *end != '/' || r < 0) return -1;
  return static_cast<int>(std::min<long>(r, 1 << 20));
}

pid_t currentTid() { return static_cast<pid_t>(syscall(SYS_gettid)); }

// A packed job's caller on its CPU for the job (State::joinTeam); its CPUs restored after.
struct CallerHome {
  cpu_set_t saved;
  bool on = false;
  CallerHome() = default;
  CallerHome(const CallerHome &) = delete;
  CallerHome &operator=(const CallerHome &) = delete;
  ~CallerHome() {
    if (on) sched_setaffinity(0, sizeof saved, &saved);
  }
};

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
  bool ompTeam = false; // unpacked jobs run on OpenMP's team (WorkPool.h)
  // spinMicros, or 0 while packed: threads sharing a CPU must not spin waiting for each
  // other, the one waited for cannot run meanwhile (toy64 4 x 128 under a build, packed:
  // 2.6 ms a call spinning, 1.8 ms not, before packed jobs started solo)
  std::atomic<int> spinNow{0};
  std::atomic<bool> busy{false}; // a job is running
  std::mutex jobMu;
  std::shared_ptr<Job> job; // the running job, or null
  std::atomic<uint64_t> generation{0};
  std::atomic<bool> stop{false};
  std::mutex sleepMu;
  std::condition_variable sleepCv;
  std::atomic<int> sleepers{0};
  // Workers blocked on sleepCv and not yet woken (a woken worker is runnable before it
  // runs and leaves the wait): what packing's samples do not count as runnable.
  std::atomic<int> blocked{0};
  std::mutex startMu;
  std::vector<std::thread> workers;
  std::atomic<bool> started{false};
  std::atomic<int64_t> parallelJobs{0}, workerChunks{0}, pooledJobs{0}, packedJobs{0};

  // Packing (WorkPool.h). `team`, `nextSample` are the running job's owner's alone.
  int loadavgFd = -1; // open when the pool packs: the process may run on every online CPU
  bool packable() const { return loadavgFd >= 0; }
  cpu_set_t allowed;                          // the process's CPUs when the pool was made
  std::vector<int> cpus;                      // the same, in order
  std::unique_ptr<std::atomic<pid_t>[]> tids; // the workers' thread ids, 0 until known
  std::vector<int> team; // the CPUs packed onto, the caller's first; empty: not packed
  std::chrono::steady_clock::time_point nextSample{};
  std::atomic<int> packed{0};
  std::atomic<double> othersAvg{-1.0};

  // Samples the machine's runnable tasks (at most every kPackSampleMillis) and packs or
  // spreads the pool's threads as packTo says. Called by a job's owner after start().
  void adapt() {
    const auto now = std::chrono::steady_clock::now();
    if (now < nextSample) return;
    nextSample = now + std::chrono::milliseconds(kPackSampleMillis);
    const int running = runnableTasks(loadavgFd);
    if (running < 0) return;
    // this thread, and the workers not blocked (spinning, running or woken: runnable)
    const int threads = 1 + static_cast<int>(workers.size());
    const int ours = threads - blocked.load(std::memory_order_relaxed);
    const double others = std::max(0, running - ours);
    // from 0: a moment's burst (a library's threads spinning after a parallel region) does
    // not pack; two other busy tasks do after ~90 ms
    double avg = std::max(0.0, othersAvg.load(std::memory_order_relaxed));
    avg += kPackSampleWeight * (others - avg);
    othersAvg.store(avg, std::memory_order_relaxed);
    const int k =
        packTo(static_cast<int>(cpus.size()), threads, team.empty() ? avg : avg + kUnpackMargin);
    if (k != static_cast<int>(team.size())) pin(k);
  }

  // Moves the team to the CPU the calling thread is on (rather than the caller to the
  // team's, where it would queue for the core whenever the scheduler had moved it) and
  // keeps the caller there, unless its thread is kept to CPUs of its own, until `home` ends.
  void joinTeam(CallerHome &home) {
    const int here = sched_getcpu();
    if (here != team[0]) pin(static_cast<int>(team.size()));
    if (!team.empty() && here == team[0] &&
        sched_getaffinity(0, sizeof home.saved, &home.saved) == 0 &&
        CPU_EQUAL(&home.saved, &allowed)) {
      cpu_set_t one;
      CPU_ZERO(&one);
      CPU_SET(here, &one);
      home.on = sched_setaffinity(0, sizeof one, &one) == 0;
    }
  }

  // Sets each worker's CPU: team[(w + 1) % k] of the k CPUs from the one this thread is on,
  // or the process's CPUs when k is 0. A worker not started yet leaves it to the next call.
  void pin(int k) {
    std::vector<int> next;
    if (k > 0) {
      const auto home = std::find(cpus.begin(), cpus.end(), sched_getcpu());
      if (home == cpus.end()) return;
      const size_t h = static_cast<size_t>(home - cpus.begin());
      for (int i = 0; i < k; ++i) next.push_back(cpus[(h + static_cast<size_t>(i)) % cpus.size()]);
    }
    for (size_t w = 0; w < workers.size(); ++w) {
      const pid_t tid = tids[w].load(std::memory_order_acquire);
      if (tid == 0) return;
      cpu_set_t set = allowed;
      if (!next.empty()) {
        CPU_ZERO(&set);
        CPU_SET(next[(w + 1) % next.size()], &set);
      }
      if (sched_setaffinity(tid, sizeof set, &set) != 0) return;
    }
    const bool wasPacked = !team.empty();
    team = std::move(next);
    packed.store(static_cast<int>(team.size()), std::memory_order_relaxed);
    spinNow.store(team.empty() ? spinMicros : 0, std::memory_order_relaxed);
    if (wasPacked != !team.empty() && logging::wanted(logging::Kind::perf_hints))
      logging::emit(logging::PerfHintEvent{.hint = packingHint()});
  }

  // What the perf_hints log says when the pool packs or spreads its threads.
  std::string packingHint() const {
    char avg[32];
    std::snprintf(avg, sizeof avg, "%.1f", othersAvg.load(std::memory_order_relaxed));
    const std::string threads = std::to_string(1 + workers.size()) + " threads";
    const std::string machine = std::to_string(cpus.size()) + " CPUs";
    if (team.empty())
      return "work pool: " + std::string(avg) + " other tasks runnable on average now; its " +
             threads + " spread over the " + machine + " again";
    std::string onto;
    for (int c : team) onto += (onto.empty() ? "" : ", ") + std::to_string(c);
    return "work pool: " + std::string(avg) + " other tasks runnable on average beside its " +
           threads + " on " + machine + ": its threads now share CPU " + onto +
           " and take turns there instead of waiting for each other across busy CPUs "
           "(RCJIT_POOL_PACK=off keeps them spread)";
  }

  // Claims and runs chunks of `j` until none is left, or until `until` has passed (checked
  // after each chunk; the epoch: no limit); returns how many it ran.
  static int64_t work(Job &j, std::chrono::steady_clock::time_point until = {}) {
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
      if (until.time_since_epoch().count() != 0 && std::chrono::steady_clock::now() >= until) break;
    }
    return ran;
  }

  void workerLoop(size_t index) {
    tlInsideWorkPool = true;
    tids[index].store(currentTid(), std::memory_order_release);
    omp_set_num_threads(1); // oneDNN called from a chunk: no team of its own
    uint64_t seen = 0;
    for (;;) {
      auto fresh = [&] {
        return generation.load(std::memory_order_acquire) != seen ||
               stop.load(std::memory_order_relaxed);
      };
      if (!spinUntil(spinNow.load(std::memory_order_relaxed), fresh)) {
        std::unique_lock<std::mutex> lock(sleepMu);
        sleepers.fetch_add(1, std::memory_order_seq_cst);
        if (!fresh()) {
          blocked.fetch_add(1, std::memory_order_relaxed);
          do sleepCv.wait(lock);
          while (!fresh());
        }
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
      {
        std::lock_guard<std::mutex> lock(sleepMu);
        blocked.store(0, std::memory_order_relaxed); // each now runnable
      }
      sleepCv.notify_all();
    }
  }

  // Starts the workers once; false when none could be started (the job then runs inline).
  bool start(int count) {
    if (started.load(std::memory_order_acquire)) return !workers.empty();
    std::lock_guard<std::mutex> lock(startMu);
    if (!started.load(std::memory_order_relaxed)) {
      tids = std::make_unique<std::atomic<pid_t>[]>(static_cast<size_t>(std::max(count, 0)));
      for (int i = 0; i < count; ++i) tids[static_cast<size_t>(i)].store(0);
      try {
        for (int i = 0; i < count; ++i)
          workers.emplace_back([this, i] { workerLoop(static_cast<size_t>(i)); });
      } catch (const std::system_error &) {
        // fewer workers than asked: the ones started share the work
      }
      started.store(true, std::memory_order_release);
    }
    return !workers.empty();
  }
};

WorkPool::WorkPool(int threads, int spinMicros, bool pack, bool ompTeam)
    : threads_(std::max(1, threads)), state_(std::make_unique<State>()) {
  State &s = *state_;
  s.spinMicros = std::max(0, spinMicros);
  s.ompTeam = ompTeam;
  s.spinNow.store(s.spinMicros, std::memory_order_relaxed);
  CPU_ZERO(&s.allowed);
  if (!pack || threads_ < 2 || sched_getaffinity(0, sizeof s.allowed, &s.allowed) != 0) return;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &s.allowed)) s.cpus.push_back(c);
  // a process kept to some of the CPUs (a cpuset, taskset) does not pack: /proc/loadavg
  // counts the tasks of every CPU
  if (s.cpus.size() < 2 || static_cast<long>(s.cpus.size()) != sysconf(_SC_NPROCESSORS_ONLN))
    return;
  s.loadavgFd = open("/proc/loadavg", O_RDONLY | O_CLOEXEC);
}

WorkPool::~WorkPool() {
  state_->stop.store(true, std::memory_order_seq_cst);
  state_->wake();
  { std::lock_guard<std::mutex> lock(state_->sleepMu); }
  state_->sleepCv.notify_all();
  for (std::thread &t : state_->workers) t.join();
  if (state_->loadavgFd >= 0) close(state_->loadavgFd);
}

void WorkPool::useOwnWorkersOnThisThread() { tlOwnWorkers = true; }

WorkPool &WorkPool::instance() {
  // never destroyed: compiled functions may run during static destruction
  static WorkPool *pool = new WorkPool(poolInitialThreads(), poolSpinMicros(),
                                       envChoice("RCJIT_POOL_PACK", {"off", "auto"}, 1) == 1,
                                       envChoice("RCJIT_POOL_TEAM", {"own", "openmp"}, 1) == 1);
  return *pool;
}

int WorkPool::packTo(int cpus, int threads, double others) {
  if (cpus < 2 || threads < 2 || !(others > 0)) return 0;
  const double share = static_cast<double>(cpus) * threads / (threads + others);
  const int k = std::max(1, static_cast<int>(std::ceil(share - 0.25)));
  // at most half a CPU per thread: what was measured (two threads on one of two CPUs); a
  // team one CPU short of its threads gains nothing from being pinned
  return 2 * k <= threads && k < cpus ? k : 0;
}

int WorkPool::packedCpus() const { return state_->packed.load(std::memory_order_relaxed); }

double WorkPool::othersRunnable() const {
  return state_->packable() ? state_->othersAvg.load(std::memory_order_relaxed) : -1.0;
}

int64_t WorkPool::parallelJobs() const {
  return state_->parallelJobs.load(std::memory_order_relaxed);
}
int64_t WorkPool::pooledJobs() const { return state_->pooledJobs.load(std::memory_order_relaxed); }
int64_t WorkPool::packedJobs() const { return state_->packedJobs.load(std::memory_order_relaxed); }
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
  CallerHome home; // declared after `done`: the caller's CPUs restored before the next job
  if (s.start(threads_ - 1)) {
    if (s.packable()) s.adapt();
    s.pooledJobs.fetch_add(1, std::memory_order_relaxed);
    if (s.ompTeam && s.team.empty() && !tlOwnWorkers) {
      // on OpenMP's team (its threads keep nthreads-var 1, as the caller's is now; a
      // oneDNN call in a chunk runs on its own thread, as in a parallel region); the
      // pool's own workers stay asleep
      s.parallelJobs.fetch_add(1, std::memory_order_relaxed);
#pragma omp parallel num_threads(threads_)
      {
        const bool worker = omp_get_thread_num() != 0;
        if (worker) tlInsideWorkPool = true; // a chunk's own job runs inline
        const int64_t ran = State::work(*j);
        if (worker) {
          tlInsideWorkPool = false;
          s.workerChunks.fetch_add(ran, std::memory_order_relaxed);
        }
      }
      if (j->error) rethrowAsRcjitError(j->error);
      return;
    }
    // packed (adapt): the pool's threads share CPUs, so waking a worker buys no parallel
    // time, only the worker's turns on the shared CPU, for two thread switches per job:
    // the caller runs the chunks alone until they have taken kPackedSoloMicros (toy64
    // 4 x 128, ~7 us jobs, ran ~3x slower under a build with every job shared)
    if (!s.team.empty()) {
      s.packedJobs.fetch_add(1, std::memory_order_relaxed);
      State::work(*j,
                  std::chrono::steady_clock::now() + std::chrono::microseconds(kPackedSoloMicros));
    }
    if (j->next.load(std::memory_order_relaxed) < chunks) {
      if (!s.team.empty()) s.joinTeam(home);
      {
        std::lock_guard<std::mutex> lock(s.jobMu);
        s.job = j;
      }
      s.wake();
      s.parallelJobs.fetch_add(1, std::memory_order_relaxed);
    }
  }
  State::work(*j);
  // wait for chunks that workers claimed: spin, then sleep until the last one ends
  auto finished = [&] { return j->left.load(std::memory_order_acquire) == 0; };
  if (!spinUntil(s.spinNow.load(std::memory_order_relaxed), finished)) {
    std::unique_lock<std::mutex> lock(j->mu);
    j->callerSleeps.store(true, std::memory_order_seq_cst);
    while (!finished()) j->cv.wait(lock);
  }
  if (j->error) rethrowAsRcjitError(j->error);
}

} // namespace rcjit
