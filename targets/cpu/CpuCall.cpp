// CpuProgram's call frame: one call's buffers bound, its steps run in order (kernels, oneDNN
// calls, eager ops, collectives), its outputs collected; and max_autotune's first call.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>

#include "cache/ObjectStore.h"
#include "dist/CompiledWaits.h"
#include "dist/IrCollectives.h"
#include "support/Events.h"
#include "support/Profiler.h"
#include "support/Threads.h"
#include "targets/ProgramRun.h"
#include "targets/cpu/CpuCall.h"
#include "targets/cpu/CpuProgram.h"
#include "targets/eager/Eager.h"
#include "tracer/TensorImpl.h"

namespace rcjit::cpu {

namespace {
// An eager step (an op with no compiled form, as embedding) whose operands and result each
// have fewer elements than this runs on the calling thread.
constexpr int64_t kSerialEagerElems = 1 << 20;

// Whether eager step `s` runs on the calling thread (OpenMP's count at 1): when it touches
// fewer than kSerialEagerElems elements of each operand and of its result. An OpenMP region
// would leave libgomp's threads spin-waiting for milliseconds afterwards, taking the cores
// from the work pool (and, on a busy machine, from everyone). embedding reads only the
// table rows its ids name (as many as it writes), not the table: gpt2's 38.6M-element table
// made its 98K-element lookup such a region, whose thread then spun ~20 ms of every call.
bool eagerOnCallingThread(const Program &p, const Step &s) {
  auto numel = [&](int v) {
    int64_t n = 1;
    for (int64_t d : p.values[v].shape) n *= d;
    return n;
  };
  int64_t elems = numel(s.result);
  for (size_t j = 0; j < s.operands.size(); ++j) {
    if (s.op == OpKind::embedding && j == 0) continue;
    elems = std::max(elems, numel(s.operands[j]));
  }
  return elems < kSerialEagerElems;
}

// A tensor viewing external memory (arena or another tensor's storage) without owning it.
Tensor viewOf(char *base, const Value &v, const std::shared_ptr<detail::Storage> &owner) {
  auto impl = std::make_shared<detail::TensorImpl>();
  if (owner) {
    impl->storage = owner;
    impl->offset =
        (base - static_cast<char *>(owner->data)) / static_cast<int64_t>(dtypeSize(v.dtype)) +
        v.offset;
  } else {
    impl->storage = std::make_shared<detail::Storage>();
    impl->storage->data = base;
    impl->offset = v.offset;
  }
  impl->shape = v.shape;
  impl->strides = v.strides;
  impl->dtype = v.dtype;
  return Tensor(std::move(impl));
}
} // namespace

// The first call of an autotuned program at some sizes: each kernel and oneDNN step runs
// under every candidate on the call's inputs (steps are pure: they write only their
// result, which no operand aliases, so running one again changes nothing), and the
// fastest candidate per step is kept.
struct CpuProgram::Tuner {
  const CpuProgram &prog;
  const Spec &spec;
  std::vector<int> threads;
  std::string summary;
  int considered = 0;

  Tuner(const CpuProgram &p, const Spec &s) : prog(p), spec(s), threads(s.layout.steps.size(), 0) {}

  // the best of a few runs after a warm-up run (more runs while they total under 2 ms)
  template <class F> static double bestSeconds(F &&f) {
    f();
    double best = std::numeric_limits<double>::infinity(), total = 0;
    for (int r = 0; r < 5 && (r < 1 || total < 2e-3); ++r) {
      auto t0 = std::chrono::steady_clock::now();
      f();
      double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      best = std::min(best, dt);
      total += dt;
    }
    return best;
  }

  // `run(n)` runs step i on n threads; candidates 1 and all threads
  template <class F> void choose(size_t i, const char *what, F &&run) {
    const int all = omp_get_max_threads();
    if (all < 2) return;
    double one = bestSeconds([&] { run(1); }), many = bestSeconds([&] { run(all); });
    threads[i] = one <= many ? 1 : all;
    ++considered;
    char line[160];
    std::snprintf(line, sizeof line, "\n  step %zu (%s): %s (%.3f ms on 1 thread, %.3f ms on %d)",
                  i, what, one <= many ? "1 thread" : "all threads", one * 1e3, many * 1e3, all);
    summary += line;
  }

  void finish(double seconds) {
    spec.threads = threads;
    std::ostringstream rec;
    rec << "rcjit-autotune 1 " << threads.size();
    for (int t : threads) rec << " " << t;
    const std::string text = rec.str();
    cache::ObjectStore::instance().store(
        prog.tuningKey(spec), {reinterpret_cast<const uint8_t *>(text.data()), text.size()},
        prog.moduleId_ + " autotune");
    logging::emit(
        logging::CompileStepEvent{.graph = prog.moduleId_,
                                  .step = "autotune",
                                  .seconds = seconds,
                                  .result = std::to_string(considered) + " steps timed" + summary});
  }
};

// One call of a CpuProgram: the sizes' specialization, max_autotune's state, the arena and
// the per-buffer bases (kept with the arena: steady-state calls allocate none of them), the
// collectives in flight. Built and run on the calling thread, then dropped.
class CpuProgram::Call {
public:
  // The arguments of runImpl (CpuProgram.h); binds every buffer. Throws rcjit::Error.
  Call(const CpuProgram &prog, const CallArgs &args);
  // Runs the steps in order and puts the outputs into `outs`; once.
  void run(std::vector<Tensor> &outs);

private:
  // Returns the arena to the program's pool when the call ends (its tensors dropped, its
  // vectors' memory kept).
  struct ArenaLease {
    const CpuProgram &prog;
    std::unique_ptr<Arena> arena;
    ~ArenaLease() {
      if (!arena) return;
      arena->outBuffers.clear(); // the call's tensors go now, the vectors' memory stays
      arena->dynamic.clear();
      prog.releaseArena(std::move(arena));
    }
  };

  const Spec *specOf(const CallArgs &a);
  void beginTuning();
  int threadsOf(size_t i) const { return chosen_ ? (*chosen_)[i] : spec_->defaultThreads[i]; }
  auto stepName(size_t i) const {
    return [this, i] {
      const Step &s = p_.steps[i];
      std::string name = s.kind == Step::Kind::kernel ? prog_.program_.kernels[s.kernel].name
                                                      : std::string(opName(s.op));
      return s.note.empty() ? name : name + ": " + s.note;
    };
  }
  void open(size_t i);
  bool takeOver(int b);
  bool rerunnable(size_t i) const;
  void done(size_t i);
  // Open MPI moves a non-blocking collective's data only inside MPI calls (no progress
  // thread): between steps, each collective in flight gets one MPI_Test, so the transfer
  // advances while the program computes instead of all at the wait
  void progress() {
    for (size_t at : flying_) inFlight_[at].test();
  }
  void kernelStep(size_t i, const Step &s);
  void libraryStep(size_t i, const Step &s);
  void eagerStep(size_t i, const Step &s);
  void runEager(const Step &s);
  Tensor operandView(int v) const;
  bool accumulateIntoBase(size_t i, const Step &s);
  void collectiveStep(size_t i, const Step &s);

  const CpuProgram &prog_;
  const Tensor *const *inputs_;
  size_t n_;
  // the inputs themselves, reset after their last use (runConsuming), or null
  Tensor *consumed_;
  const std::vector<int> *alias_;       // runInto: per buffer, the input it is written into
  const std::vector<int> *runs_;        // per step, the end of its launch run
  const std::vector<int> *over_;        // per buffer, the dynamic buffer an output takes over
  std::optional<CallSymbols> callSyms_; // looked up here (the caller passed no spec)
  const int64_t *syms_;
  std::shared_ptr<const Spec> specKeep_; // a symbolic program's spec, held for the call
  const Spec *spec_;
  const Program &p_;
  // max_autotune: the first call at these sizes times the candidates (one call at a time;
  // calls meanwhile use the defaults), unless the cache remembers the choice
  std::unique_lock<std::mutex> tuneLock_;
  std::optional<Tuner> tuner_;
  std::chrono::steady_clock::time_point tuneStart_;
  const std::vector<int> *chosen_ = nullptr; // the tuned threads per step, or null
  ArenaLease lease_;
  Arena *arena_ = nullptr;
  // collectives in flight, by the index of the step that started them; declared after the
  // arena, so an error unwinding the call waits for them before the arena is released
  std::vector<dist::Work> inFlight_;
  std::vector<size_t> flying_; // the steps whose collectives are started and not yet waited for
  size_t runEnd_ = 0;          // steps before it ran with an earlier step's run
};

// The call's symbols and spec: the caller's, else looked up.
const CpuProgram::Spec *CpuProgram::Call::specOf(const CallArgs &a) {
  if (a.spec) {
    syms_ = a.syms;
    return a.spec;
  }
  callSyms_.emplace(prog_.program_, a.inputs, a.n);
  syms_ = callSyms_->data();
  return prog_.specs_->find(syms_, specKeep_);
}

CpuProgram::Call::Call(const CpuProgram &prog, const CallArgs &args)
    : prog_(prog), inputs_(args.inputs), n_(args.n), consumed_(args.consumed), alias_(args.alias),
      runs_(args.runs), over_(args.over), spec_(specOf(args)),
      p_(spec_->layout), lease_{prog, nullptr} {
  beginTuning();
  chosen_ = spec_->tuned.load(std::memory_order_acquire) ? &spec_->threads : nullptr;
  lease_.arena = prog_.acquireArena(p_.arenaBytes);
  arena_ = lease_.arena.get();
  // eager steps' and large intermediates' tensors, by buffer (read only for dynamic buffers)
  if (spec_->hasDynamic) arena_->dynamic.assign(p_.buffers.size(), Tensor());
  if (arena_->boundFor == spec_) { // as bindBuffersInto, the arena buffers bound already
    std::vector<char *> &bases = arena_->bases;
    arena_->outBuffers.resize(p_.buffers.size());
    for (int b : spec_->openedBuffers) bases[static_cast<size_t>(b)] = nullptr;
    for (int b : spec_->inputBuffers) {
      bases[static_cast<size_t>(b)] = static_cast<char *>(
          boundInput(p_.buffers[static_cast<size_t>(b)], inputs_, n_, Device::cpu()).ptr());
    }
  } else {
    bindBuffersInto(
        p_, inputs_, n_, Device::cpu(), arena_->data, arena_->outBuffers, arena_->bases,
        [](size_t) -> char * { return nullptr; }, /*deferOutputs=*/true);
    arena_->boundFor = spec_ == prog_.specs_->staticSpec().get() ? spec_ : nullptr;
  }
  if (spec_->hasCollectives) inFlight_.resize(p_.steps.size());
}

void CpuProgram::Call::beginTuning() {
  if (!prog_.autotune_ || spec_->tuned.load(std::memory_order_acquire)) return;
  tuneStart_ = std::chrono::steady_clock::now();
  tuneLock_ = std::unique_lock<std::mutex>(spec_->tuneMu, std::try_to_lock);
  if (!tuneLock_.owns_lock() || spec_->tuned.load(std::memory_order_relaxed)) return;
  if (prog_.loadTuning(*spec_)) {
    spec_->tuned.store(true, std::memory_order_release);
    logging::emit(logging::CompileStepEvent{
        .graph = prog_.moduleId_,
        .step = "autotune",
        .seconds =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - tuneStart_).count(),
        .result = "the choices of an earlier tuning, from the cache"});
  } else {
    tuner_.emplace(prog_, *spec_);
  }
}

// The large buffers and the output buffers step i uses first (an eager step's result
// buffer: runEager).
void CpuProgram::Call::open(size_t i) {
  std::vector<Tensor> &outBuffers = arena_->outBuffers;
  std::vector<char *> &bases = arena_->bases;
  for (int b : spec_->largeAt[i]) { // freed after their last step (done)
    arena_->dynamic[b] =
        detail::makeTensor(p_.buffers[b].shape, p_.buffers[b].dtype, Device::cpu());
    bases[b] = static_cast<char *>(arena_->dynamic[b].data_ptr());
  }
  for (int b : spec_->outputsAt[i]) {
    if (p_.steps[i].kind != Step::Kind::kernel && p_.steps[i].result >= 0 &&
        p_.values[p_.steps[i].result].buffer == b && !spec_->library[i])
      continue;
    if (alias_ && (*alias_)[b] >= 0) { // runInto: written in place of an input
      const Tensor &in = *inputs_[(*alias_)[b]];
      if (in.is_contiguous() && in.offset() == 0 && in.dtype() == p_.buffers[b].dtype &&
          in.shape() == p_.buffers[b].shape) {
        in.impl()->storage->version.fetch_add(1, std::memory_order_relaxed); // as copy_
        // a tensor of its own over the input's storage: the output the caller gets back
        // never shares the metadata of a tensor held elsewhere (a parameter); an input the
        // caller's argument alone holds, with no autograd state or marks (a regional
        // stage's dying input), is handed back itself, its metadata being the output's
        const detail::TensorImpl &ti = *in.impl();
        outBuffers[b] = detail::heldAlone(in) && !ti.autograd && ti.marks.empty()
                            ? in
                            : detail::makeView(in, in.shape(), in.strides(), 0);
        bases[b] = static_cast<char *>(in.data_ptr());
        continue;
      }
    }
    if (takeOver(b)) continue;
    outBuffers[b] = detail::makeTensor(p_.buffers[b].shape, p_.buffers[b].dtype, Device::cpu());
    bases[b] = static_cast<char *>(outBuffers[b].data_ptr());
  }
}

namespace {
// Whether `t` (a dynamic buffer's tensor) is held by this call alone and is a whole block
// of `bytes` bytes from its start: not a view of an input or of another result, so the
// call may hand its memory on.
bool heldAlone(const Tensor &t, int64_t bytes) {
  return detail::heldAlone(t) && t.impl()->storage->nbytes == static_cast<size_t>(bytes);
}
} // namespace

// Output buffer b written over the dynamic buffer its writer reads last (outputsOverDying),
// when this call holds that buffer alone (heldAlone) and no tuner reruns the step (a rerun
// would read what the first run wrote).
bool CpuProgram::Call::takeOver(int b) {
  const int d = (over_ ? *over_ : spec_->outputOver)[static_cast<size_t>(b)];
  if (d < 0 || tuner_) return false;
  const Tensor &t = arena_->dynamic[static_cast<size_t>(d)];
  const Buffer &buf = p_.buffers[static_cast<size_t>(b)];
  if (!heldAlone(t, buf.bytes)) return false;
  arena_->outBuffers[b] = detail::makeView(t, buf.shape, detail::contiguousStrides(buf.shape), 0);
  arena_->bases[b] = static_cast<char *>(t.data_ptr());
  return true;
}

// The inputs step i used last.
void CpuProgram::Call::done(size_t i) {
  for (int b : spec_->dynamicDone[i]) { // results past their last reader: freed now
    arena_->dynamic[static_cast<size_t>(b)] = Tensor();
    arena_->bases[static_cast<size_t>(b)] = nullptr;
  }
  if (!consumed_) return;
  for (int in : spec_->inputsDone[i]) consumed_[in] = Tensor();
}

void CpuProgram::Call::collectiveStep(size_t i, const Step &s) {
  std::vector<Tensor> &dynamic = arena_->dynamic;
  std::vector<char *> &bases = arena_->bases;
  if (s.kind == Step::Kind::collective) {
    profiler::Scope scope("collective start", [&s] { return std::string(opName(s.op)); });
    open(i);
    const auto started = std::chrono::steady_clock::now(); // the shape check blocks
    inFlight_[i] = dist::detail::startCollectiveOp(s.op, operandView(s.operands.at(0)), s.attrs);
    dist::detail::addCompiledCollectiveWait(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
    flying_.push_back(i);
    done(i);
    return;
  }
  profiler::Scope scope("collective wait", [&s] { return std::string(opName(s.op)); });
  const auto waiting = std::chrono::steady_clock::now();
  Tensor r = inFlight_.at(static_cast<size_t>(s.kernel)).wait().contiguous();
  dist::detail::addCompiledCollectiveWait(
      std::chrono::duration<double>(std::chrono::steady_clock::now() - waiting).count());
  inFlight_[static_cast<size_t>(s.kernel)] = dist::Work();
  flying_.erase(std::find(flying_.begin(), flying_.end(), static_cast<size_t>(s.kernel)));
  const Value &rv = p_.values[s.operands.at(1)];
  if (r.dtype() != rv.dtype || r.shape() != rv.shape) {
    throw Error(std::string(opName(s.op)) + ": the collective gave " +
                std::string(dtypeName(r.dtype())) + shapeStr(r.shape()) + ", the program expects " +
                std::string(dtypeName(rv.dtype)) + shapeStr(rv.shape) + " (internal error)");
  }
  dynamic[rv.buffer] = r;
  bases[rv.buffer] = static_cast<char *>(r.data_ptr());
  done(i);
}

void CpuProgram::Call::eagerStep(size_t i, const Step &s) {
  progress();
  profiler::Scope scope("eager step", [&s, this] {
    return std::string(opName(s.op)) +
           (eagerOnCallingThread(p_, s) ? " (on the calling thread)" : "");
  });
  open(i);
  if (!accumulateIntoBase(i, s)) runEager(s);
  done(i);
}

// Value v of this call as a tensor: a view of its buffer that shares the storage of the
// tensor behind it (an input, a dynamic buffer's, an output already made), so that what
// the view is handed to may keep it alive; a view of raw memory for an arena buffer.
Tensor CpuProgram::Call::operandView(int v) const {
  const Value &val = p_.values[static_cast<size_t>(v)];
  const Buffer &b = p_.buffers[static_cast<size_t>(val.buffer)];
  std::shared_ptr<detail::Storage> owner;
  if (b.kind == Buffer::Kind::input) owner = inputs_[b.index]->impl()->storage;
  if (b.kind == Buffer::Kind::dynamic) owner = arena_->dynamic[val.buffer].impl()->storage;
  if (b.kind == Buffer::Kind::output && arena_->outBuffers[val.buffer].defined())
    owner = arena_->outBuffers[val.buffer].impl()->storage;
  return viewOf(arena_->bases[val.buffer], val, owner);
}

// An embedding gradient summed into its base (jit/passes/EmbeddingGradSum.h) whose base
// dies at step i (CpuProgram::Spec::intoBase) and is held by this call alone: the rows are
// scattered into the base's own block, which becomes the result, instead of into a copy
// of it. False (nothing done) where the call cannot take the block.
bool CpuProgram::Call::accumulateIntoBase(size_t i, const Step &s) {
  if (!spec_->intoBase[i]) return false;
  const Value &r = p_.values[s.result], &bv = p_.values[s.operands[2]];
  const Buffer &rb = p_.buffers[r.buffer];
  Tensor &base = arena_->dynamic[bv.buffer];
  if (arena_->bases[r.buffer] ||
      (rb.kind != Buffer::Kind::output && rb.kind != Buffer::Kind::dynamic) ||
      !heldAlone(base, p_.buffers[bv.buffer].bytes) || base.dtype() != r.dtype)
    return false;
  Tensor acc = detail::makeView(base, r.shape, detail::contiguousStrides(r.shape), 0);
  eager::embeddingBackwardInto(acc, operandView(s.operands[0]), operandView(s.operands[1]));
  base = Tensor(); // the result holds the block now
  (rb.kind == Buffer::Kind::output ? arena_->outBuffers : arena_->dynamic)[r.buffer] = acc;
  arena_->bases[r.buffer] = static_cast<char *>(acc.data_ptr());
  return true;
}

// Step s by the eager runtime on views of its operands; its result into its buffer (a
// dynamic buffer or an output it opens takes the result's storage itself).
void CpuProgram::Call::runEager(const Step &s) {
  const Program &layout = p_;
  std::vector<char *> &bases = arena_->bases;
  std::vector<Tensor> &dynamic = arena_->dynamic, &outBuffers = arena_->outBuffers;
  std::vector<Tensor> in;
  for (int v : s.operands) in.push_back(operandView(v));
  const Value &r = layout.values[s.result];
  std::optional<OmpThreads> one;
  if (eagerOnCallingThread(layout, s)) one.emplace(1);
  // a bf16 product whose cast to f32 the lowering folded in (Lowering::foldCast): the
  // product of the same values in f32, as the library step computes it
  if (opInfo(s.op).category == OpCategory::Matmul && !in.empty() && in[0].dtype() != r.dtype) {
    for (Tensor &t : in) t = eager::run(OpKind::cast, {t}, {}, TensorMeta{r.dtype, t.shape()});
  }
  Tensor out = eager::run(s.op, in, s.attrs, TensorMeta{r.dtype, r.shape});
  for (const PostOp &po : s.postOps)
    out = eager::run(po.op, {out}, {}, TensorMeta{r.dtype, r.shape});
  const Buffer &rb = layout.buffers[r.buffer];
  if (rb.kind == Buffer::Kind::dynamic && !bases[r.buffer]) { // not a large buffer open() made
    out = out.contiguous();
    dynamic[r.buffer] = out;
    bases[r.buffer] = static_cast<char *>(out.data_ptr());
  } else if (rb.kind == Buffer::Kind::output && !bases[r.buffer]) {
    // an output this step opens: the eager result becomes the output when it has the
    // buffer's layout, instead of being copied into a fresh one
    const bool adopt = out.is_contiguous() && out.offset() == 0 && r.offset == 0 &&
                       out.shape() == rb.shape && r.shape == rb.shape &&
                       r.strides == detail::contiguousStrides(r.shape) && out.dtype() == rb.dtype &&
                       out.impl()->storage.use_count() == 1; // not a view of an operand
    if (!adopt) {
      Tensor fresh = detail::makeTensor(rb.shape, rb.dtype, Device::cpu());
      eager::copyInto(viewOf(static_cast<char *>(fresh.data_ptr()), r, nullptr), out);
      out = fresh;
    }
    outBuffers[r.buffer] = out;
    bases[r.buffer] = static_cast<char *>(out.data_ptr());
  } else {
    eager::copyInto(viewOf(bases[r.buffer], r, nullptr), out);
  }
}

// Whether step i (kernel or library) computes the same result when run again, which
// max_autotune does to time it: none of the memory it writes is memory it reads. An
// optimizer's update written over its parameter (runInto), a kernel that accumulates into
// its operand, an output written over a dying operand: each runs once (a second run would
// apply the update twice). Compares the byte ranges the values span at this call's
// addresses, so every way two values come to share memory counts.
bool CpuProgram::Call::rerunnable(size_t i) const {
  const Step &s = p_.steps[i];
  auto range = [&](int v) {
    const Value &val = p_.values[static_cast<size_t>(v)];
    const char *at = spec_->address(arena_->bases.data(), v);
    int64_t lo = 0, hi = 0; // in elements, from `at`
    for (size_t d = 0; d < val.shape.size(); ++d) {
      if (val.shape[d] == 0) return std::pair<const char *, const char *>{at, at};
      const int64_t reach = (val.shape[d] - 1) * val.strides[d];
      (reach < 0 ? lo : hi) += reach;
    }
    const auto size = static_cast<int64_t>(dtypeSize(val.dtype));
    return std::pair<const char *, const char *>{at + lo * size, at + (hi + 1) * size};
  };
  std::vector<int> reads, writes;
  if (s.kind == Step::Kind::kernel) {
    const LoopKernel &k = prog_.program_.kernels[s.kernel];
    for (size_t t = 0; t < s.operands.size(); ++t)
      (k.tensors[t].output ? writes : reads).push_back(s.operands[t]);
  } else {
    reads = s.operands;
    if (s.result >= 0) writes.push_back(s.result);
  }
  for (int w : writes) {
    const auto [wlo, whi] = range(w);
    for (int r : reads) {
      const auto [rlo, rhi] = range(r);
      if (wlo < rhi && rlo < whi) return false;
    }
  }
  return true;
}

void CpuProgram::Call::kernelStep(size_t i, const Step &s) {
  if (i < runEnd_) return;
  progress();
  char *const *bases = arena_->bases.data();
  if (!tuner_ && !chosen_ && (*runs_)[i] > static_cast<int>(i) + 1) {
    runEnd_ = static_cast<size_t>((*runs_)[i]);
    profiler::Scope scope("kernel", [&] {
      std::string names;
      for (size_t j = i; j < runEnd_; ++j)
        names += (j > i ? " + " : "") + prog_.program_.kernels[p_.steps[j].kernel].name;
      return "run of " + std::to_string(runEnd_ - i) + " kernels: " + names;
    });
    for (size_t j = i; j < runEnd_; ++j) open(j);
    prog_.runKernels(*spec_, i, runEnd_, bases, syms_);
    for (size_t j = i; j < runEnd_; ++j) done(j);
    return;
  }
  profiler::Scope scope("kernel", stepName(i));
  open(i);
  if (tuner_ && spec_->kernelOuter[i] >= 2 && rerunnable(i)) {
    tuner_->choose(i, prog_.program_.kernels[s.kernel].name.c_str(),
                   [&](int t) { prog_.runKernel(*spec_, i, bases, syms_, t); });
  } else {
    prog_.runKernel(*spec_, i, bases, syms_, threadsOf(i));
  }
  done(i);
}

void CpuProgram::Call::libraryStep(size_t i, const Step &s) {
  progress();
  profiler::Scope scope("library", [&, i, name = stepName(i)] {
    // run by a one-thread primitive on this thread (the cost model's small products,
    // or max_autotune's choice)
    const bool serial = !tuner_ && threadsOf(i) == 1 && spec_->serialLibrary[i];
    return serial ? name() + " (on the calling thread)" : name();
  });
  if (!spec_->library[i]) return eagerStep(i, s); // no primitive for this layout
  open(i);
  char *ops[3];
  for (size_t j = 0; j < s.operands.size() && j < 3; ++j)
    ops[j] = spec_->address(arena_->bases.data(), s.operands[j]);
  char *result = spec_->address(arena_->bases.data(), s.result);
  if (tuner_ && rerunnable(i)) {
    if (!spec_->serialLibrary[i]) {
      OmpThreads one(1); // a primitive made for one thread
      spec_->serialLibrary[i] = LibraryStep::create(p_, s, false);
    }
    if (spec_->serialLibrary[i]) {
      tuner_->choose(i, std::string(opName(s.op)).c_str(),
                     [&](int t) { prog_.runLibrary(*spec_, i, ops, result, t, inputs_); });
      done(i);
      return;
    }
  }
  prog_.runLibrary(*spec_, i, ops, result, threadsOf(i), inputs_);
  done(i);
}

void CpuProgram::Call::run(std::vector<Tensor> &outs) {
  if (!runs_) runs_ = &spec_->runs;
  forEachStep(
      p_, [this](size_t i, const Step &s) { kernelStep(i, s); },
      [this](size_t i, const Step &s) { libraryStep(i, s); },
      [this](size_t i, const Step &s) { eagerStep(i, s); },
      [this](size_t i, const Step &s) { collectiveStep(i, s); });
  if (tuner_) {
    tuner_->finish(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - tuneStart_).count());
    spec_->tuned.store(true, std::memory_order_release);
  }
  std::vector<Tensor> &outBuffers = arena_->outBuffers;
  for (int b : spec_->outputsAt.back()) { // outputs no step writes (zero-sized ones)
    outBuffers[b] = detail::makeTensor(p_.buffers[b].shape, p_.buffers[b].dtype, Device::cpu());
  }
  collectOutputs(p_, inputs_, arena_->dynamic, outBuffers, outs);
}

void CpuProgram::runImpl(const CallArgs &args, std::vector<Tensor> &outs) const {
  if (awaitingBatch_)
    throw Error("compiled program " + moduleId_ +
                ": run before the kernel batch it was created in compiled its kernels "
                "(internal error)");
  Call call(*this, args);
  call.run(outs);
}

} // namespace rcjit::cpu
