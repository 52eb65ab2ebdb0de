// Tiered compilation: the fast tier, the switching executable, the background compile thread.
#include "jit/Tiered.h"

#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <mutex>
#include <optional>
#include <sstream>
#include <thread>

#include <llvm/Config/llvm-config.h>
#include <omp.h>

#include <rcjit/Error.h>

#include "cache/ClearHooks.h"
#include "cache/EntryFormat.h"
#include "cache/Key.h"
#include "cache/ObjectStore.h"
#include "jit/Pipeline.h"
#include "support/CompileCancel.h"
#include "support/Env.h"
#include "support/Events.h"
#include "support/Threads.h"
#include "support/WorkPool.h"
#include "targets/Target.h"
#include "targets/cpu/CpuKernels.h"
#include "tracer/GraphIO.h"

namespace rcjit {

namespace {

using Clock = std::chrono::steady_clock;

// The tiers this thread's calls ran since the last takeCallTier: bit 0 fast, bit 1 optimized.
thread_local int callTiers = 0;

double secondsBetween(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// The optimized program may replace the fast one only where a call's outputs look the same.
std::string layoutsDiffer(const Program &fast, const Program &opt) {
  if (fast.outputs.size() != opt.outputs.size()) return "a different number of outputs";
  for (size_t i = 0; i < fast.outputs.size(); ++i) {
    const Value &a = fast.values[static_cast<size_t>(fast.outputs[i])];
    const Value &b = opt.values[static_cast<size_t>(opt.outputs[i])];
    if (a.shape != b.shape || a.strides != b.strides || a.dtype != b.dtype)
      return "output " + std::to_string(i) + " has another layout";
  }
  return "";
}

// Runs the fast tier until the optimized one is installed, then the optimized one. A call
// reads the flag once: it runs wholly on one tier.
class TieredExecutable final : public Executable {
public:
  TieredExecutable(std::shared_ptr<Executable> fast, std::string moduleId, double fastSeconds)
      : fast_(std::move(fast)), moduleId_(std::move(moduleId)), fastSeconds_(fastSeconds),
        born_(Clock::now()) {}

  std::vector<Tensor> run(const Tensor *const *inputs, size_t n) const override {
    return pick().run(inputs, n);
  }
  std::vector<Tensor> runConsuming(std::vector<Tensor> &inputs) const override {
    return pick().runConsuming(inputs);
  }
  std::vector<Tensor> runInto(const Tensor *const *inputs, size_t n,
                              const std::vector<std::pair<int, int>> &into) const override {
    return pick().runInto(inputs, n, into);
  }
  const Program &program() const override { return current().program(); }
  const std::string &llvmIr() const override { return current().llvmIr(); }
  int cacheHits() const override { return fast_->cacheHits(); }
  std::string libraryNotes() const override { return current().libraryNotes(); }

  // Called once, by the background thread. False (and the fast tier stays) when the
  // optimized program's outputs differ in layout.
  bool install(std::shared_ptr<Executable> opt, double seconds,
               const std::optional<logging::CompileContext> &context) {
    std::lock_guard<std::mutex> lock(mu_);
    const std::string why = layoutsDiffer(fast_->program(), opt->program());
    const double at = secondsBetween(born_, Clock::now());
    if (!why.empty()) {
      note_ = "the optimized tier compiled in " + explainMs(seconds) + " but " + why +
              ": the fast tier stays";
    } else {
      opt_ = std::move(opt);
      switchCall_ = fastCalls_.load() + 1;
      std::ostringstream os;
      os << "switched to the optimized tier at call " << switchCall_ << ", " << explainMs(at)
         << " after the fast tier was ready (background compile " << explainMs(seconds) << ")";
      note_ = os.str();
      ready_.store(true, std::memory_order_release);
      // the output_code log shows the code that runs from now on
      if (context && !opt_->llvmIr().empty() && logging::wanted(logging::Kind::output_code)) {
        logging::emit(logging::OutputCodeEvent{.function = context->function,
                                               .name = context->name,
                                               .entry = context->entry,
                                               .llvmIr = "; " + moduleId_ + ", optimized tier\n" +
                                                         opt_->llvmIr()});
      }
    }
    logging::emit(logging::CompileStepEvent{.graph = moduleId_,
                                            .step = "tier switch",
                                            .seconds = seconds,
                                            .result = note_ + "\n",
                                            .phase = "background"});
    return why.empty();
  }

  void failed(const std::string &why) {
    std::lock_guard<std::mutex> lock(mu_);
    note_ = "the optimized tier failed to compile (" + why + "): the fast tier stays";
    logging::emit(logging::CompileStepEvent{
        .graph = moduleId_, .step = "tier switch", .result = note_ + "\n", .phase = "background"});
  }

  std::string note() const {
    std::lock_guard<std::mutex> lock(mu_);
    std::ostringstream os;
    os << "tiered: fast tier (library matmuls, quick LLVM; compiled in " << explainMs(fastSeconds_)
       << ") ran " << fastCalls_.load() << " calls";
    if (ready_.load(std::memory_order_acquire)) {
      os << ", optimized tier " << optCalls_.load() << " calls; " << note_;
    } else {
      os << "; " << (note_.empty() ? "the optimized tier is compiling in the background" : note_);
    }
    return os.str();
  }

private:
  const Executable &current() const {
    return ready_.load(std::memory_order_acquire) ? *opt_ : *fast_;
  }
  const Executable &pick() const {
    if (ready_.load(std::memory_order_acquire)) {
      optCalls_.fetch_add(1, std::memory_order_relaxed);
      callTiers |= 2;
      return *opt_;
    }
    fastCalls_.fetch_add(1, std::memory_order_relaxed);
    callTiers |= 1;
    return *fast_;
  }

  std::shared_ptr<Executable> fast_;
  std::shared_ptr<Executable> opt_; // written once before ready_ is set
  std::atomic<bool> ready_{false};
  mutable std::atomic<int64_t> fastCalls_{0}, optCalls_{0};
  const std::string moduleId_;
  const double fastSeconds_;
  const Clock::time_point born_;
  mutable std::mutex mu_; // note_, switchCall_
  std::string note_;
  int64_t switchCall_ = 0;
};

// One background compile: the optimized request, whose executable it is for, and the marker
// it records when done.
struct Job {
  CompileRequest request;
  std::weak_ptr<TieredExecutable> target;
  std::string marker;
  std::optional<logging::CompileContext> context;
  int ompThreads = 1; // OpenMP's thread count on the thread whose call queued the job
};

// The background compile thread: one job at a time, stopped and joined at exit.
class TierCompiler {
public:
  static TierCompiler &instance() {
    static TierCompiler *t = [] {
      auto *p = new TierCompiler(); // never destroyed: the atexit handler stops its thread
      // the singletons the thread uses, made here on the calling thread before the handler
      // is registered, so that their destructors run after it has joined the thread
      WorkPool::instance();
      cache::ObjectStore::instance();
      cpu::hostCodegenId();  // starts the process's JIT
      registerExitHandler(); // (also initializes OpenSSL first)
      // cache::save_artifacts() waits for the compiles in flight (up to 10 minutes), so
      // that its blob holds their optimized tiers
      cache::detail::onSaveArtifacts([p] { p->idle(600); });
      return p;
    }();
    return *t;
  }

  // Queues j, or holds it while a TierHoldScope is open on this thread.
  void submit(Job j) {
    if (holdDepth > 0) {
      heldJobs.push_back(std::move(j));
      return;
    }
    submitNow(std::move(j));
  }

  // Queues the jobs held on this thread (its outermost TierHoldScope ended).
  void release() {
    std::vector<Job> jobs = std::move(heldJobs);
    heldJobs.clear();
    for (Job &j : jobs) submitNow(std::move(j));
  }

  bool idle(double seconds) {
    std::unique_lock<std::mutex> lock(mu_);
    return done_.wait_for(lock, std::chrono::duration<double>(seconds),
                          [&] { return jobs_.empty() && !busy_; });
  }

  static inline thread_local int holdDepth = 0;
  static inline thread_local std::vector<Job> heldJobs;

private:
  void submitNow(Job j) {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopped_) return;                 // exiting: the fast tier stays
    if (!worker_ || owner_ != getpid()) { // first job, or a forked child without the thread
      worker_ = new std::thread([this] { loop(); }); // joined by shutdown()
      owner_ = getpid();
    }
    jobs_.push_back(std::move(j));
    cv_.notify_all();
  }

  // No job from now on: the queue dropped, the one in flight cancelled. The caller holds mu_.
  void stopLocked() {
    stopped_ = true;
    cancel_.store(true, std::memory_order_release);
    jobs_.clear();
    cv_.notify_all();
  }

  void shutdown() { // idempotent: registered once per job
    std::thread *w = nullptr;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopped_ && joined_) return;
      stopLocked();
      if (owner_ == getpid()) w = worker_;
    }
    if (w && w->joinable()) w->join(); // at most the rest of one step or kernel
    std::lock_guard<std::mutex> lock(mu_);
    joined_ = true;
  }

  // The exit handler must run before the static destructors of whatever a compile uses:
  // atexit handlers run in reverse order of registration, interleaved with the destructors
  // of statics constructed before them, so the worker makes the singletons it uses first and
  // registers the handler again before each job (every job after the statics it needs).
  // A compile in flight when the process exits may be inside LLVM code generation, far from
  // its next cancellation check, while exit() destroys statics that the compile first used
  // after this handler was registered (so their destructors ran before it). Such a process
  // ends here at once, with its exit status and flushed stdio, without running the remaining
  // exit handlers and destructors under the compile; an idle thread is joined as usual.
  static void registerExitHandler() {
    cache::initCrypto(); // (the entries' signatures: OpenSSL frees its state at exit)
    on_exit([](int status, void *) { instance().atExit(status); }, nullptr);
  }

  void atExit(int status) {
    bool compiling = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      compiling = busy_ && owner_ == getpid();
      // idle: stopped under the same lock as the check, so the thread cannot take a queued
      // job between the check and the join (it would be joined inside a compile)
      if (!compiling) stopLocked();
    }
    if (!compiling) return shutdown();
    cancel_.store(true, std::memory_order_release);
    std::fflush(nullptr);
    _exit(status);
  }

  void loop() {
    omp_set_num_threads(1); // between jobs; run() sets each job's calling thread's count
    CancelScope cancel(cancel_);
    for (;;) {
      Job j;
      {
        std::unique_lock<std::mutex> lock(mu_);
        busy_ = false;
        done_.notify_all();
        cv_.wait(lock, [&] { return stopped_ || !jobs_.empty(); });
        if (stopped_) return;
        j = std::move(jobs_.front());
        jobs_.pop_front();
        busy_ = true;
      }
      if (j.target.expired()) continue;
      registerExitHandler();
      run(j);
    }
  }

  void run(Job &j) {
    std::optional<logging::CompileScope> scope;
    if (j.context) scope.emplace(*j.context);
    const auto t0 = Clock::now();
    try {
      // compiled as if on the calling thread: oneDNN primitives keep the OpenMP count they
      // are made under, and the GEMM splits, one-thread library steps and cache keys read
      // it (made under this thread's 1, the optimized tier ran every large GEMM on one
      // thread: gpt2's LM head, 512 x 768 x 50257, at half speed)
      OmpThreads calls(j.ompThreads);
      CompileResult res = compileGraph(j.request);
      std::shared_ptr<TieredExecutable> target = j.target.lock();
      if (!target) return;
      if (target->install(std::move(res.executable), secondsBetween(t0, Clock::now()), j.context)) {
        static const uint8_t yes[] = {'1'};
        cache::ObjectStore::instance().store(j.marker, yes, j.request.moduleId + " optimized tier");
      }
    } catch (const std::exception &e) {
      if (cancel_.load(std::memory_order_acquire)) return;
      if (std::shared_ptr<TieredExecutable> target = j.target.lock()) target->failed(e.what());
    }
  }

  std::mutex mu_;
  std::condition_variable cv_, done_;
  std::deque<Job> jobs_;
  std::thread *worker_ = nullptr;
  pid_t owner_ = 0;
  bool stopped_ = false, busy_ = false, joined_ = false;
  std::atomic<bool> cancel_{false};
};

// The marker of a graph's optimized tier in the compile cache: its samples' structure and
// layouts, the lowering and pass schedule, and the host's code generation.
std::string markerKey(const CompileRequest &r) {
  std::ostringstream os;
  for (const GraphSample &s : r.samples) {
    os << hashGraph(s.graph).hex() << (s.optimized ? "+opt" : "");
    for (const Shape &st : s.strides) os << "|" << shapeStr(st);
    for (int64_t v : s.syms) os << "," << v;
    os << "/";
  }
  os << (r.exec.autotune ? "autotune" : "") << "/mm" << r.smallMatmulMacs << ","
     << smallMatmulMacsFor(Target::cpu) << "/" << scheduleKey();
  // the CPU feature set and LLVM version, not hostCodegenId(): that starts the JIT, which a
  // fast tier without loop kernels never needs (a stale marker only costs a compile)
  const std::string text = os.str(), host = cpu::cpuFeatures() + "; llvm " LLVM_VERSION_STRING,
                    threads = std::to_string(omp_get_max_threads());
  return cache::contentKey({"cpu-tier-optimized-1", text, host, threads});
}

} // namespace

bool tieredEnabled(const CompileOptions &o) {
  static const bool env = envFlag("RCJIT_TIERED", true);
  // A rank under mpirun compiles untiered: a process that exits inside a background compile
  // ends at once (see atExit), which would skip MPI_Finalize and fail the whole job.
  static const bool launched = std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMIX_RANK");
  // max_autotune asks for the fastest code, timed on the first call: not tiered
  return o.tiered && env && !launched && o.target == Target::cpu && !o.max_autotune;
}

bool tiersRequest(const CompileRequest &r) {
  return r.exec.tiered && !r.exec.quick && r.exec.target == Target::cpu &&
         r.stop == CompileStop::executable && !r.exec.keepAssembly && r.sharding.empty() &&
         scheduleKey().empty(); // (the background thread has no schedule)
}

CompileResult compileTiered(const CompileRequest &r) {
  CompileRequest opt = r;
  opt.exec.tiered = false;
  const std::string marker = markerKey(r);
  if (cache::ObjectStore::instance().lookup(marker, r.moduleId + " optimized tier")) {
    return compileGraph(std::move(opt)); // compiled before: from the caches
  }
  CompileRequest fast = r;
  fast.exec.tiered = false;
  fast.exec.quick = true;
  fast.exec.autotune = false;
  // RCJIT_TIER_MATMULS=kernels: the fast tier keeps the cost model's generated small matmuls
  // (through the quick pipeline) instead of oneDNN calls (measurements, docs/first-call.md)
  static const int kernels = envChoice("RCJIT_TIER_MATMULS", {"library", "kernels"}, 0);
  fast.smallMatmulMacs = kernels == 1 ? r.smallMatmulMacs : 0;
  fast.moduleId = r.moduleId + "_t0";
  const auto t0 = Clock::now();
  CompileResult res = compileGraph(std::move(fast));
  auto tiered = std::make_shared<TieredExecutable>(std::move(res.executable), r.moduleId,
                                                   secondsBetween(t0, Clock::now()));
  res.executable = tiered;
  Job j{std::move(opt), tiered, marker, std::nullopt, omp_get_max_threads()};
  if (const logging::CompileContext *c = logging::CompileScope::current()) j.context = *c;
  TierCompiler::instance().submit(std::move(j));
  return res;
}

TierHoldScope::TierHoldScope() { ++TierCompiler::holdDepth; }

TierHoldScope::~TierHoldScope() {
  // (a call that queued nothing never makes the background thread)
  if (--TierCompiler::holdDepth != 0 || TierCompiler::heldJobs.empty()) return;
  try {
    TierCompiler::instance().release();
  } catch (...) { // (out of memory while queueing: those executables keep their fast tier)
    TierCompiler::heldJobs.clear();
  }
}

std::string explainMs(double seconds) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f ms", seconds * 1e3);
  return buf;
}

std::string tierNote(const Executable &e) {
  const auto *t = dynamic_cast<const TieredExecutable *>(&e);
  return t ? t->note() : "";
}

const char *takeCallTier() {
  const int t = callTiers;
  callTiers = 0;
  return t & 1 ? "fast" : t & 2 ? "optimized" : nullptr;
}

bool waitForBackgroundCompiles(double seconds) { return TierCompiler::instance().idle(seconds); }

} // namespace rcjit
