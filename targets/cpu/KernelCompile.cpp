// The kernels of CPU programs compiled: the process's kernel memo, the cut of a program's new
// kernels into modules (the object cache's keys) compiled concurrently on the work pool, the
// fast tier's choice of which kernels to vectorize, and KernelBatch (CpuProgram.h), which
// defers a thread's compiles to compile them together.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <unordered_map>

#include "cache/ClearHooks.h"
#include "cache/Key.h"
#include "support/CompileCancel.h"
#include "support/Env.h"
#include "support/Events.h"
#include "support/WorkPool.h"
#include "targets/LlvmOptimize.h"
#include "targets/cpu/CpuKernels.h"
#include "targets/cpu/CpuProgram.h"

namespace rcjit::cpu {

namespace {

// Compiled kernels of this process, keyed by their text with the name left out: identical
// kernels (the same layer in 64 places, the same graph compiled twice) compile once while a
// program holds them. The memo does not own the code (the programs do, CpuProgram::code_):
// a kernel whose programs are all gone is freed, and its entry dropped at the next sweep.
// cache::clear() empties it. Thread-safe; never destroyed (see ProcessMemo).
class KernelMemo {
public:
  struct Hit {
    KernelFn fn = nullptr;
    std::shared_ptr<const void> code;
  };
  static KernelMemo &instance() {
    static KernelMemo *m = [] {
      auto *memo = new KernelMemo();
      cache::detail::onClear([memo] { memo->clear(); });
      return memo;
    }();
    return *m;
  }
  Hit find(const std::string &key) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = map_.find(key);
    if (it == map_.end()) return {};
    std::shared_ptr<const void> code = it->second.code.lock();
    if (!code) return {};
    return {it->second.fn, std::move(code)};
  }
  void add(const std::string &key, KernelFn fn, const std::shared_ptr<const void> &code) {
    std::lock_guard<std::mutex> lock(mu_);
    if (map_.size() >= sweepAt_) { // drop the entries of freed code: a recompile storm's keys
      std::erase_if(map_, [](const auto &e) { return e.second.code.expired(); });
      sweepAt_ = std::max<size_t>(kFirstSweep, 2 * map_.size());
    }
    map_[key] = {fn, code};
  }
  void clear() {
    std::lock_guard<std::mutex> lock(mu_);
    map_.clear();
    sweepAt_ = kFirstSweep;
  }

private:
  static constexpr size_t kFirstSweep = 256;
  struct Entry {
    KernelFn fn = nullptr;
    std::weak_ptr<const void> code;
  };
  std::mutex mu_;
  std::map<std::string, Entry> map_;
  size_t sweepAt_ = kFirstSweep;
};

// What a fast-tier kernel's memo and module keys add when the vectorizer runs on it.
constexpr const char *kQuickVectorizeKey = "quick vectorize\n";

// The module's cache key: the same kernels on the same host give the same key in any process.
std::string moduleKey(const std::vector<LoopKernel> &todo, const CpuCompileOptions &co) {
  std::string text;
  for (size_t i = 0; i < todo.size(); ++i) {
    text += printKernel(todo[i]);
    if (co.vectorizes(i)) text += kQuickVectorizeKey;
  }
  // (the fast tier's code-generation level is part of its key: RCJIT_QUICK_CODEGEN)
  const char *kind = !co.quick                                            ? "cpu"
                     : quickCodegenLevel() == llvm::CodeGenOptLevel::None ? "cpu-quick-cg0"
                                                                          : "cpu-quick-cg1";
  return cache::contentKey({kind, text, hostCodegenId()});
}

// The fast tier runs the loop vectorizer on a kernel whose element operations over the
// program (domain points x statements x the kernels that share its code) reach this many
// (RCJIT_QUICK_VECTORIZE sets it; 0: every kernel). Below it the vectorizer's compile time
// (5-15 ms a kernel on a 2-core AVX2 host, half again the short pipeline's) outweighs what
// the vector code saves in the calls before the optimized tier is ready; above it a scalar
// kernel runs 3-6x longer than a vector one (llama-3.2-1b's attention softmax, 16 layers:
// 10 ms a call against 1.8) (docs/first-call.md, "Cheaper LLVM").
int64_t quickVectorizeWork() {
  static const int64_t work = envInteger("RCJIT_QUICK_VECTORIZE", int64_t{1} << 20, 0,
                                         std::numeric_limits<int64_t>::max(), "element operations");
  return work;
}

// A kernel's element operations in one run, about: its domain's points (each symbol counted
// as 128) times its statements, at most 2^50.
int64_t kernelWork(const LoopKernel &k) {
  int32_t symbols = 0;
  for (const SizeExpr &d : k.domain)
    for (int32_t s : d.syms) symbols = std::max(symbols, s + 1);
  const std::vector<int64_t> syms(static_cast<size_t>(symbols), 128);
  double work = static_cast<double>(k.stmts.size());
  for (const SizeExpr &d : k.domain)
    work *= std::max<double>(1.0, static_cast<double>(evalSize(d, syms.data())));
  return static_cast<int64_t>(std::min(work, std::ldexp(1.0, 50)));
}

// Whether a program's kernels compile as a module per pool thread, concurrently on the work
// pool: when the pool has two threads or more and the compile may use them (else one
// module: on one thread a module per kernel cost ~2.5 ms more each, gpt2's six 155 ms
// against 122 as one module). Not whether the pool is packed onto fewer CPUs now (a busy
// machine): the modules are the compile cache's keys, and a grouping that followed the
// machine's load made a warm start miss objects a loaded cold run had grouped otherwise
// (vit-gpt2's captioning warm start: 0 cache hits in 1 of 8 runs); packed, the modules
// take turns on the CPUs the pool has (~5 ms a module more).
bool compileInParallel() {
  const WorkPool &pool = WorkPool::instance();
  return pool.threads() > 1 && (omp_get_max_threads() > 1 || cancellableCompile());
}

std::string kernelKey(const LoopKernel &k, const std::string &features, bool quick) {
  LoopKernel anon = k;
  anon.name = "k";
  return features + (quick ? " quick\n" : "\n") + printKernel(anon);
}

// Per kernel of `p` for the fast tier: whether the loop vectorizer runs on it (the work of
// all the kernels with its key, times the program's runs in a call, against
// quickVectorizeWork()).
std::vector<bool> quickVectorized(const Program &p, const std::vector<std::string> &keys,
                                  int runsPerCall) {
  std::unordered_map<std::string, int64_t> work;
  const int64_t runs = std::clamp(runsPerCall, 1, 1 << 12);
  for (size_t i = 0; i < p.kernels.size(); ++i) // (each term at most 2^50: no overflow)
    work[keys[i]] += std::min(kernelWork(p.kernels[i]) * runs, int64_t{1} << 50);
  std::vector<bool> out(p.kernels.size());
  for (size_t i = 0; i < p.kernels.size(); ++i) out[i] = work[keys[i]] >= quickVectorizeWork();
  return out;
}

// How `todo` is cut into modules (per module: indices into todo): with `pooled`, one module
// per pool thread (at most one per kernel), else one module. A module costs 4-5 ms on top of
// its kernels here (target machine, code generation's pipeline, the object store, linking)
// even for a copy kernel, so kernels are grouped rather than compiled one module each:
// llama-3.2-1b's 17 fast-tier kernels compiled in 109-113 ms of its first call instead of
// 129-215, vit-gpt2's 13 in 105-122 instead of 209-295, gpt2's 6 in 40-52 instead of 64-71
// (docs/performance.md, "Concurrent kernel compiles"). Kernels go to the least loaded module,
// largest first, by their statements (a vectorized one counting half again) plus the
// module's cost. The modules are the object cache's keys: the cut depends on the kernels
// and the pool's size only.
std::vector<std::vector<size_t>> moduleGroups(const std::vector<LoopKernel> &todo,
                                              const CpuCompileOptions &co, bool pooled) {
  if (!pooled) {
    std::vector<std::vector<size_t>> one(1);
    for (size_t i = 0; i < todo.size(); ++i) one[0].push_back(i);
    return one;
  }
  const size_t groups = std::min<size_t>(
      todo.size(), static_cast<size_t>(std::max(1, WorkPool::instance().threads())));
  std::vector<std::vector<size_t>> members(groups);
  auto cost = [&](size_t i) {
    return static_cast<double>(todo[i].stmts.size()) * (co.vectorizes(i) ? 1.5 : 1.0) + 4.0;
  };
  std::vector<size_t> order(todo.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  // costliest first, ties in kernel order (std::stable_sort would do, but libstdc++ 12's
  // trips clang 19's deprecation warning in the fuzz build)
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const double ca = cost(a), cb = cost(b);
    return ca != cb ? ca > cb : a < b;
  });
  std::vector<double> load(groups, 0);
  for (size_t i : order) {
    const size_t g = static_cast<size_t>(std::min_element(load.begin(), load.end()) - load.begin());
    members[g].push_back(i);
    load[g] += cost(i);
  }
  return members;
}

} // namespace

// One compile's distinct kernels (named k0, k1, ... in order) with its options, cut into
// modules (cut); once compileAll has compiled them, collect() fills each kernel's function,
// the module that owns it and whether that came from the object cache. Outside the anonymous
// namespace: KernelBatch::State holds these, and a member of a named class must not have an
// internal type (GCC's -Wsubobject-linkage, an error where a unity build includes this file).
struct KernelCompile {
  std::vector<LoopKernel> todo;
  CpuCompileOptions co;
  std::vector<std::vector<size_t>> groups; // moduleGroups
  std::vector<CpuCompiledKernels> modules; // per group, once compiled
  std::vector<KernelFn> fns;
  std::vector<std::shared_ptr<const void>> owners;
  std::vector<char> cached;

  // `pooled`: the kernels may compile as pool modules (no IR or assembly to keep as one text)
  void cut(bool pooled) {
    groups = moduleGroups(todo, co, pooled && todo.size() > 1 && compileInParallel());
    modules.assign(groups.size(), {});
  }
  void compileModule(size_t g) {
    std::vector<LoopKernel> ks;
    CpuCompileOptions gco = co;
    gco.quickVectorize.clear();
    for (size_t j : groups[g]) {
      ks.push_back(todo[j]);
      ks.back().name = "k" + std::to_string(ks.size() - 1);
      gco.quickVectorize.push_back(co.vectorizes(j));
    }
    modules[g] = compileKernels(ks, moduleKey(ks, gco), gco);
  }
  void collect() {
    fns.assign(todo.size(), nullptr);
    owners.assign(todo.size(), nullptr);
    cached.assign(todo.size(), 0);
    for (size_t g = 0; g < groups.size(); ++g) {
      for (size_t k = 0; k < groups[g].size(); ++k) {
        fns[groups[g][k]] = modules[g].functions.at(k);
        owners[groups[g][k]] = modules[g].code;
        cached[groups[g][k]] = modules[g].fromCache;
      }
    }
  }
};

namespace {

// Compiles the modules of `compiles` (each cut already): concurrently on the work pool where
// there are several and the compile may use the pool, else one after another here. A
// background compile (jit/Tiered.h) groups kernels as a compile on a caller's thread would
// (the same cache keys), one after another on its own thread, stopping between modules when
// the process exits.
void compileAll(std::vector<KernelCompile *> compiles) {
  std::vector<std::pair<KernelCompile *, size_t>> modules;
  for (KernelCompile *c : compiles)
    for (size_t g = 0; g < c->groups.size(); ++g) modules.push_back({c, g});
  if (modules.size() > 1 && compileInParallel()) {
    const logging::CompileContext *context = logging::CompileScope::current();
    WorkPool::instance().run(static_cast<int64_t>(modules.size()), [&](int64_t m) {
      std::optional<logging::CompileScope> scope; // the compile's entry on this thread too
      if (context) scope.emplace(*context);
      throwIfCompileCancelled();
      modules[static_cast<size_t>(m)].first->compileModule(modules[static_cast<size_t>(m)].second);
    });
  } else {
    for (auto &[c, g] : modules) c->compileModule(g);
  }
  for (KernelCompile *c : compiles) c->collect();
}

// The open KernelBatch of this thread (its outermost), or null.
thread_local KernelBatch::State *openBatch = nullptr;

} // namespace

// A batch's deferred compiles (one per program that had kernels to compile, cut into modules
// as that program's compile alone would be, so the object cache's keys are the same), and the
// programs' kernels waiting on them.
struct KernelBatch::State {
  struct Wait {
    std::shared_ptr<CpuProgram> program;
    size_t kernel;  // in program->kernels_
    size_t compile; // in compiles
    size_t at;      // in compiles[compile].todo
    // counted in program->cacheHits_ already: an earlier program of the batch compiles it,
    // which serves this one as the memo would (finish() does not count it again when the
    // module also came from the disk cache)
    bool counted = false;
  };
  std::vector<std::unique_ptr<KernelCompile>> compiles;
  std::unordered_map<std::string, std::pair<size_t, size_t>> index; // memo key -> (compile, at)
  std::vector<Wait> waits;
};

KernelBatch::KernelBatch() {
  if (openBatch) return; // inner: the outermost batch compiles
  state_ = new State();
  openBatch = state_;
}

KernelBatch::~KernelBatch() {
  if (!state_) return;
  if (openBatch == state_) openBatch = nullptr;
  delete state_; // not finished: its programs keep awaitingBatch_ and never run
}

std::pair<size_t, double> KernelBatch::finish() {
  if (!state_) return {0, 0.0};
  openBatch = nullptr; // (what the compile below creates is not deferred)
  std::unique_ptr<State> s(state_);
  state_ = nullptr;
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<KernelCompile *> compiles;
  size_t kernels = 0, modules = 0;
  for (const auto &c : s->compiles) {
    compiles.push_back(c.get());
    kernels += c->todo.size();
    modules += c->groups.size();
  }
  compileAll(compiles);
  KernelMemo &memo = KernelMemo::instance();
  for (const auto &[key, at] : s->index) {
    const KernelCompile &c = *s->compiles[at.first];
    memo.add(key, c.fns[at.second], c.owners[at.second]);
  }
  for (const State::Wait &w : s->waits) {
    CpuProgram &cp = *w.program;
    const KernelCompile &c = *s->compiles[w.compile];
    cp.kernels_[w.kernel] = c.fns.at(w.at);
    const std::shared_ptr<const void> &owner = c.owners.at(w.at);
    if (std::find(cp.code_.begin(), cp.code_.end(), owner) == cp.code_.end())
      cp.code_.push_back(owner);
    if (!w.counted && c.cached.at(w.at)) ++cp.cacheHits_;
    cp.awaitingBatch_ = false;
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (logging::wanted(logging::Kind::passes) && !compiles.empty()) {
    logging::emit(logging::CompileStepEvent{
        .graph = compiles.front()->co.name,
        .step = "batched kernels",
        .seconds = seconds,
        .result = std::to_string(kernels) + " kernels of " + std::to_string(compiles.size()) +
                  " programs compiled together, " + std::to_string(modules) + " modules\n",
        .phase = "target"});
  }
  return {kernels, seconds};
}

void CpuProgram::compileKernelsOf(const std::shared_ptr<CpuProgram> &cp, const Program &p,
                                  const std::string &moduleId, const CpuProgramOptions &opts) {
  // Compile each distinct kernel not compiled before (all of them when dumps are wanted).
  bool dumps = opts.keepLlvmIr || opts.keepAssembly;
  KernelMemo &memo = KernelMemo::instance();
  std::vector<std::string> keys;
  std::unordered_map<std::string, size_t> fresh; // key -> index in compile->todo
  cp->kernels_.assign(p.kernels.size(), nullptr);
  const std::string features = cpuFeatures(); // code for one feature set never serves another
  for (size_t i = 0; i < p.kernels.size(); ++i) {
    keys.push_back(kernelKey(p.kernels[i], features, opts.quick));
  }
  std::vector<bool> vectorize; // per kernel, for the fast tier
  if (opts.quick) {
    vectorize = quickVectorized(p, keys, opts.runsPerCall);
    for (size_t i = 0; i < keys.size(); ++i) {
      if (vectorize[i]) keys[i] += kQuickVectorizeKey;
    }
  }
  // (in an open batch: a kernel an earlier program of the batch compiles is waited for and
  // counts as a hit, as the memo's would; the rest compile at the batch's finish())
  KernelBatch::State *batch = dumps ? nullptr : openBatch;
  std::vector<std::pair<size_t, size_t>> own; // (kernel, its index in compile->todo)
  auto compile = std::make_unique<KernelCompile>();
  std::vector<bool> todoVectorize;
  for (size_t i = 0; i < p.kernels.size(); ++i) {
    if (!dumps) {
      KernelMemo::Hit hit = memo.find(keys[i]);
      cp->kernels_[i] = hit.fn;
      if (hit.code) cp->code_.push_back(std::move(hit.code));
    }
    if (cp->kernels_[i]) {
      ++cp->cacheHits_;
      continue;
    }
    if (batch) {
      if (auto at = batch->index.find(keys[i]); at != batch->index.end()) {
        ++cp->cacheHits_;
        batch->waits.push_back({cp, i, at->second.first, at->second.second, true});
        cp->awaitingBatch_ = true;
        continue;
      }
    }
    if (!fresh.count(keys[i])) {
      fresh[keys[i]] = compile->todo.size();
      compile->todo.push_back(p.kernels[i]);
      compile->todo.back().name = "k" + std::to_string(compile->todo.size() - 1);
      todoVectorize.push_back(opts.quick && vectorize[i]);
    }
    own.push_back({i, fresh.at(keys[i])});
  }
  if (!compile->todo.empty()) {
    KernelCompile &c = *compile;
    c.co.wantLlvmIr = opts.keepLlvmIr;
    c.co.wantAssembly = opts.keepAssembly;
    c.co.name = moduleId;
    c.co.quick = opts.quick;
    c.co.quickVectorize = std::move(todoVectorize);
    c.cut(!dumps);
    if (batch) {
      const size_t at = batch->compiles.size();
      for (const auto &[key, idx] : fresh) batch->index[key] = {at, idx};
      for (const auto &[kernel, idx] : own) batch->waits.push_back({cp, kernel, at, idx});
      batch->compiles.push_back(std::move(compile));
      cp->awaitingBatch_ = true;
    } else {
      compileAll({&c});
      if (c.groups.size() == 1) {
        cp->llvmIr_ = std::move(c.modules[0].llvmIr);
        cp->assembly_ = std::move(c.modules[0].assembly);
      }
      // a hit per kernel of the program whose module came from the disk cache (as in a
      // batch's finish(): two kernels of one program sharing a key are two hits)
      for (const auto &[kernel, idx] : own) {
        cp->kernels_[kernel] = c.fns[idx];
        cp->cacheHits_ += c.cached[idx] ? 1 : 0;
      }
      for (const auto &[key, idx] : fresh) memo.add(key, c.fns[idx], c.owners[idx]);
      for (const auto &o : c.owners) {
        if (cp->code_.empty() || cp->code_.back() != o) cp->code_.push_back(o);
      }
    }
  }
}

} // namespace rcjit::cpu
