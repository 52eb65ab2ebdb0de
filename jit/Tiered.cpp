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
#include "jit/Interpreter.h"
#include "jit/Pipeline.h"
#include "support/CompileCancel.h"
#include "support/Env.h"
#include "support/Events.h"
#include "support/Threads.h"
#include "support/WorkPool.h"
#include "targets/Target.h"
#include "targets/cpu/CpuKernels.h"
#include "tracer/GraphIO.h"
#include "tracer/TensorImpl.h"

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

// The interpreted first tier: the traced graph run node by node on the eager kernels (the
// calls an eager run of the function makes), no loop kernel compiled. Its outputs take the
// layouts of the fast program lowered from the same graph (`program`, never run), so that the
// switch to the optimized tier, and the stages and backward halves planned from those
// layouts, see the same strides from the first call on.
class InterpretedExecutable final : public Executable {
public:
  InterpretedExecutable(Graph graph, Program program)
      : graph_(std::move(graph)), program_(std::move(program)) {}

  std::vector<Tensor> run(const Tensor *const *inputs, size_t n) const override {
    std::vector<Tensor> in;
    in.reserve(n);
    for (size_t i = 0; i < n; ++i) in.push_back(*inputs[i]);
    return conform(interpretGraph(graph_, std::move(in)));
  }
  std::vector<Tensor> runConsuming(std::vector<Tensor> &inputs) const override {
    std::vector<Tensor> in(inputs.size());
    for (size_t i = 0; i < inputs.size(); ++i) in[i] = std::move(inputs[i]); // reset: handed over
    return conform(interpretGraph(graph_, std::move(in)));
  }
  const Program &program() const override { return program_; }
  const std::string &llvmIr() const override {
    static const std::string none;
    return none;
  }
  int cacheHits() const override { return 0; }

private:
  // Each output in its program value's layout: the interpreter's as it is where they agree
  // (views of inputs, contiguous results), else copied into a tensor of those strides.
  std::vector<Tensor> conform(std::vector<Tensor> outs) const {
    for (size_t i = 0; i < outs.size(); ++i) {
      const Value &v = program_.values[static_cast<size_t>(program_.outputs[i])];
      Tensor &t = outs[i];
      if (t.dtype() != v.dtype || t.shape() != v.shape) {
        throw Error("the interpreted first tier's output " + std::to_string(i) + " is " +
                    std::string(dtypeName(t.dtype())) + shapeStr(t.shape()) +
                    " where its program has " + std::string(dtypeName(v.dtype)) +
                    shapeStr(v.shape) + " (internal error)");
      }
      if (t.strides() == v.strides) continue;
      const int64_t span = detail::spannedElements(v.shape, v.strides);
      Tensor dst = detail::makeView(detail::makeTensor({span}, v.dtype), v.shape, v.strides, 0);
      dst.copy_(t);
      t = std::move(dst);
    }
    return outs;
  }

  const Graph graph_;     // as traced: the eager ops, before the graph passes
  const Program program_; // the fast lowering of it, for the output layouts and explain()
};

// Runs the fast tier until the optimized one is installed, then the optimized one. A call
// reads the flag once: it runs wholly on one tier.
class TieredExecutable final : public Executable {
public:
  TieredExecutable(std::shared_ptr<Executable> fast, std::string moduleId, double fastSeconds)
      : fast_(std::move(fast)), moduleId_(std::move(moduleId)), fastSeconds_(fastSeconds),
        interpreted_(dynamic_cast<const InterpretedExecutable *>(fast_.get()) != nullptr),
        born_(Clock::now()) {}

  std::vector<Tensor> run(const Tensor *const *inputs, size_t n) const override {
    return pick().run(inputs, n);
  }
  std::vector<Tensor> runConsuming(std::vector<Tensor> &inputs) const override {
    return pick().runConsuming(inputs);
  }
  using Executable::runInto;
  void runInto(const Tensor *const *inputs, size_t n, const std::vector<std::pair<int, int>> &into,
               std::vector<Tensor> &outs) const override {
    pick().runInto(inputs, n, into, outs);
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
    if (interpreted_) {
      // this was the graph's first compile to code: its error (an invalid RCJIT_* switch
      // read by a library step, say) is what an untiered first call would have thrown, so
      // every call from now on throws it instead of running eagerly without a word
      note_ = "the optimized tier failed to compile (" + why + ")";
      failure_ = "compiling " + moduleId_ + " (after an interpreted first call): " + why;
      failed_.store(true, std::memory_order_release);
    } else {
      note_ = "the optimized tier failed to compile (" + why + "): the fast tier stays";
    }
    logging::emit(logging::CompileStepEvent{
        .graph = moduleId_, .step = "tier switch", .result = note_ + "\n", .phase = "background"});
  }

  std::string note() const {
    std::lock_guard<std::mutex> lock(mu_);
    std::ostringstream os;
    os << "tiered: fast tier ("
       << (interpreted_ ? "the traced graph interpreted on the eager kernels; lowered in "
                        : "library matmuls, quick LLVM; compiled in ")
       << explainMs(fastSeconds_) << ") ran " << fastCalls_.load() << " calls";
    if (ready_.load(std::memory_order_acquire)) {
      os << ", optimized tier " << optCalls_.load() << " calls; " << note_;
    } else {
      os << "; " << (note_.empty() ? "the optimized tier is compiling in the background" : note_);
      // explain() lists the program after this note: on this tier, one that sets the
      // interpreted outputs' layouts and is never run
      if (interpreted_)
        os << "; until it is ready, calls run the traced graph, and the program listed is its "
              "lowering (the layouts the interpreted outputs take), not code that runs";
    }
    return os.str();
  }

private:
  const Executable &current() const {
    return ready_.load(std::memory_order_acquire) ? *opt_ : *fast_;
  }
  const Executable &pick() const {
    if (failed_.load(std::memory_order_acquire)) {
      std::lock_guard<std::mutex> lock(mu_);
      throw Error(failure_);
    }
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
  std::atomic<bool> failed_{false}; // an interpreted tier's optimized compile threw: failure_
  mutable std::atomic<int64_t> fastCalls_{0}, optCalls_{0};
  const std::string moduleId_;
  const double fastSeconds_;
  const bool interpreted_; // the fast tier is an InterpretedExecutable (from fast_)
  const Clock::time_point born_;
  mutable std::mutex mu_; // note_, switchCall_, failure_
  std::string note_, failure_;
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
    guardMainThread();
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
  // Stops and joins the thread when the main thread exits (returns from main or calls exit):
  // glibc's exit() runs the exiting thread's thread_local destructors before any atexit
  // handler or static destructor, so there the compile in flight still has every static it
  // uses, and it stops at its next cancellation check. (The on_exit handler below is the
  // fallback for exit() on another thread: there a static the job first made after the
  // handler's registration, a oneDNN or LLVM table say, is destroyed before the handler
  // runs. An interpreted first tier leaves the first such statics to the background
  // compile, and a conformance test's process crashed so in its exit.)
  struct MainThreadExit {
    ~MainThreadExit() { instance().shutdown(); }
  };
  static void guardMainThread() {
    if (::gettid() != ::getpid()) return;
    static thread_local MainThreadExit guard;
    (void)guard;
  }

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
    // its parallel compiles on the pool's own workers: an OpenMP team of this thread's would
    // outlive it at exit (WorkPool.h)
    WorkPool::useOwnWorkersOnThisThread();
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

// -1: not set, RCJIT_FIRST_TIER decides; 0 compile; 1 interpret
std::atomic<int> firstTierSetting{-1};

// Whether r's first tier interprets its traced graph (interpretedFirstTier()): a request that
// asks for it, one graph as traced (not a symbolic program, not one the passes already
// rewrote), no collective (a rank's collectives run in its compiled program's order), and
// no LLVM IR kept (the output_code log shows the fast tier's code at the entry).
bool interpretsFirstTier(const CompileRequest &r) {
  if (!r.interpretFirst || !interpretedFirstTier() || r.samples.size() != 1 ||
      r.samples[0].optimized || r.exec.keepLlvmIr || !r.sharding.empty())
    return false;
  for (const Node &n : r.samples[0].graph.nodes) {
    if (opInfo(n.op).category == OpCategory::Collective) return false;
  }
  return true;
}

} // namespace

bool interpretedFirstTier() {
  const int set = firstTierSetting.load(std::memory_order_relaxed);
  if (set >= 0) return set == 1;
  static const bool env = envChoice("RCJIT_FIRST_TIER", {"compile", "interpret"}, 1) == 1;
  return env;
}

bool setInterpretedFirstTier(bool on) {
  const bool was = interpretedFirstTier();
  firstTierSetting.store(on ? 1 : 0, std::memory_order_relaxed);
  return was;
}

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
  const bool interpret = interpretsFirstTier(r);
  CompileResult res;
  if (interpret) {
    // the graph passes and the lowering (the program's output layouts), no target compile
    res = lowerGraphs(fast);
    if (!res.notSymbolic.empty()) return res; // (one sample: does not happen)
    res.executable = makeInterpretedExecutable(r.samples[0].graph, std::move(res.program));
    res.program = Program{};
  } else {
    res = compileGraph(std::move(fast));
  }
  auto tiered = std::make_shared<TieredExecutable>(std::move(res.executable), r.moduleId,
                                                   secondsBetween(t0, Clock::now()));
  res.executable = tiered;
  Job j{std::move(opt), tiered, marker, std::nullopt, omp_get_max_threads()};
  if (const logging::CompileContext *c = logging::CompileScope::current()) j.context = *c;
  TierCompiler::instance().submit(std::move(j));
  return res;
}

std::shared_ptr<Executable> makeInterpretedExecutable(Graph traced, Program lowered) {
  return std::make_shared<InterpretedExecutable>(std::move(traced), std::move(lowered));
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
