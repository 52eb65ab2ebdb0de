// CpuProgram: its specializations per size assignment, the arena pool, and the runners of
// one kernel, launch run or oneDNN step (its kernels compiled: KernelCompile.cpp; a call
// itself: CpuCall.cpp).
#include "targets/cpu/CpuProgram.h"

#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <limits>
#include <memory>
#include <sstream>

#include <rcjit/Cache.h>

#include "cache/Key.h"
#include "cache/ObjectStore.h"
#include "support/Env.h"
#include "support/Threads.h"
#include "support/WorkPool.h"
#include "targets/Lower.h"
#include "targets/ProgramRun.h"
#include "targets/SymbolicProgram.h"
#include "targets/cpu/CpuCall.h"
#include "targets/cpu/CpuKernels.h"
#include "tracer/TensorImpl.h"

namespace rcjit::cpu {

namespace {
// Below this many element operations a kernel runs on the calling thread.
constexpr int64_t kParallelWork = 1 << 15;
// A parallel kernel is cut into chunks of at least this many element operations, at most
// kChunksPerThread per pool thread: more chunks than threads where the work allows, so a
// thread the scheduler holds back delays only its own chunk (the others take the rest),
// each long enough (tens of us) that claiming it costs little (toy64 4 x 128: 16K
// operations per chunk ran ~10 % slower than 64K or 256K).
constexpr int64_t kChunkWork = 1 << 16;
constexpr int64_t kChunksPerThread = 16;

int64_t poolChunks(int64_t work, int64_t points, int threads) {
  const int64_t most = kChunksPerThread * std::max(threads, WorkPool::instance().threads());
  return std::max<int64_t>(1,
                           std::min({points, most, std::max<int64_t>(threads, work / kChunkWork)}));
}

int64_t innerSize(const LoopKernel &k, const int64_t *syms) {
  int64_t n = 1;
  for (size_t d = static_cast<size_t>(k.numOuter); d < k.domain.size(); ++d) {
    n *= evalSize(k.domain[d], syms);
  }
  return n;
}

// Intermediates of at least this many bytes (RCJIT_ARENA_MAX_BUFFER) are not in the
// call's arena: each is allocated at its first step and freed after its last
// (moveLargeBuffersOut), from the storage cache of large blocks (tracer/Storage.cpp: the
// same sizes every call, so no page faults after the first). An arena is held for the
// whole call at the size of its fullest step: a whole gpt2 training step's 147 MiB LM-head
// weight gradient and 98 MiB logits blocks made a 292 MiB arena still held where the last
// gradients are made, 189 MiB above full mode's peak (docs/performance.md); at 1 MiB, the
// 12-layer step under bf16 autocast still kept its saved [512, 768] bf16 activations
// (768 KiB each) in a 28.6 MiB arena held to the backward's end, 30 MiB above full mode.
// Smaller buffers stay in the arena, where reuse keeps them in cache; 256 KiB is twice
// the storage cache's smallest block (kCacheMin).
int64_t largeBufferBytes() {
  static const int64_t bytes = envInteger("RCJIT_ARENA_MAX_BUFFER", int64_t{256} << 10, 0,
                                          std::numeric_limits<int64_t>::max(), "bytes");
  return bytes;
}

} // namespace

std::shared_ptr<CpuProgram> CpuProgram::create(Program p, const std::string &moduleId,
                                               const CpuProgramOptions &opts) {
  auto cp = std::shared_ptr<CpuProgram>(new CpuProgram());
  compileKernelsOf(cp, p, moduleId, opts); // (KernelCompile.cpp)
  cp->program_ = std::move(p);
  cp->moduleId_ = moduleId;
  cp->autotune_ = opts.autotune;
  const Program &prog = cp->program_;
  const bool costModel = !opts.autotune;
  cp->specs_ = std::make_unique<SpecTable<Spec>>(
      prog, [&prog, costModel](const int64_t *syms) { return makeSpec(prog, syms, costModel); });
  return cp;
}

std::string CpuProgram::libraryNotes() const {
  const std::shared_ptr<const Spec> &spec = specs_->staticSpec();
  if (!spec) return "";
  std::string out;
  for (size_t i = 0; i < spec->library.size(); ++i) {
    const LibraryStep *step = spec->defaultThreads[i] == 1 && spec->serialLibrary[i]
                                  ? spec->serialLibrary[i].get()
                                  : spec->library[i].get();
    if (!step) continue;
    out += "step " + std::to_string(i) + ": " + step->describe() +
           (step == spec->library[i].get() ? "" : " (small: on the calling thread)") + "\n";
  }
  return out;
}

std::shared_ptr<const CpuProgram::Spec> CpuProgram::makeSpec(const Program &p, const int64_t *syms,
                                                             bool costModel) {
  auto spec = std::make_shared<Spec>();
  spec->syms.assign(syms, syms + p.symbols.ranges.size());
  spec->layout = specializeProgram(p, syms);
  spec->largeAt = moveLargeBuffersOut(spec->layout, largeBufferBytes());
  const Program &l = spec->layout;
  spec->library.resize(l.steps.size());
  spec->serialLibrary.resize(l.steps.size());
  spec->defaultThreads.assign(l.steps.size(), 0);
  const bool symbolic = !p.symbols.ranges.empty();
  for (size_t i = 0; i < l.steps.size(); ++i) {
    if (l.steps[i].kind != Step::Kind::library) continue;
    spec->library[i] = LibraryStep::create(l, l.steps[i], symbolic);
    // a small product: a primitive made for one thread (a symbolic program's dense ones
    // share the runtime-dims primitive), run on this one; an OpenMP region for it left
    // libgomp's threads spinning on the cores the work pool needs
    if (costModel && spec->library[i] && spec->library[i]->macs() < kParallelMacs &&
        omp_get_max_threads() > 1) {
      OmpThreads one(1);
      spec->serialLibrary[i] = LibraryStep::create(l, l.steps[i], symbolic);
      if (spec->serialLibrary[i]) spec->defaultThreads[i] = 1;
    }
  }
  spec->outputsAt = outputsByFirstStep(l);
  spec->inputsDone = inputsDoneAt(l);
  spec->dynamicDone = dynamicDoneAt(l);
  spec->intoBase = eagerIntoBase(l);
  spec->outputOver =
      symbolic ? std::vector<int>(l.buffers.size(), -1) : outputsOverDying(l, p.kernels);
  spec->runs = launchRuns(l, p.kernels, spec->defaultThreads, nullptr, &spec->outputOver);
  spec->kernelOuter.assign(l.steps.size(), 0);
  spec->kernelWork.assign(l.steps.size(), 0);
  for (size_t i = 0; i < l.steps.size(); ++i) {
    if (l.steps[i].kind != Step::Kind::kernel) continue;
    const LoopKernel &k = p.kernels[l.steps[i].kernel];
    spec->kernelOuter[i] = k.outerSize(syms);
    spec->kernelWork[i] = spec->kernelOuter[i] * innerSize(k, syms);
  }
  spec->valueBytes.resize(l.values.size());
  for (size_t v = 0; v < l.values.size(); ++v)
    spec->valueBytes[v] = l.values[v].offset * static_cast<int64_t>(dtypeSize(l.values[v].dtype));
  for (const Step &s : l.steps) spec->hasCollectives |= s.kind == Step::Kind::collective;
  for (size_t b = 0; b < l.buffers.size(); ++b) {
    const Buffer::Kind kind = l.buffers[b].kind;
    spec->hasDynamic |= kind == Buffer::Kind::dynamic;
    if (kind != Buffer::Kind::arena)
      (kind == Buffer::Kind::input ? spec->inputBuffers : spec->openedBuffers)
          .push_back(static_cast<int>(b));
  }
  return spec;
}

CpuProgram::~CpuProgram() { delete spare_.load(std::memory_order_acquire); }

std::unique_ptr<CpuProgram::Arena> CpuProgram::acquireArena(int64_t need) const {
  std::unique_ptr<Arena> a(spare_.exchange(nullptr, std::memory_order_acquire));
  if (!a) {
    std::lock_guard<std::mutex> lock(poolMu_);
    if (!pool_.empty()) {
      a = std::move(pool_.back());
      pool_.pop_back();
    }
  }
  if (!a) a = std::make_unique<Arena>();
  a->setIdle(false);
  if (a->data && a->bytes >= need) return a;
  a->boundFor = nullptr;
  a->storage.reset();
  size_t bytes = static_cast<size_t>((need + 63) / 64 * 64);
  a->storage = detail::allocateStorage(bytes, Device::cpu()); // 64-byte aligned; throws
  a->data = static_cast<char *>(a->storage->data);
  a->bytes = static_cast<int64_t>(bytes);
  return a;
}

void CpuProgram::releaseArena(std::unique_ptr<Arena> a) const {
  a->setIdle(true);
  Arena *none = nullptr;
  if (spare_.compare_exchange_strong(none, a.get(), std::memory_order_release)) {
    a.release(); // held by spare_ now
    return;
  }
  std::lock_guard<std::mutex> lock(poolMu_);
  pool_.push_back(std::move(a));
}

void CpuProgram::runKernel(const Spec &spec, size_t i, char *const *bases, const int64_t *syms,
                           int threads) const {
  const Step &s = spec.layout.steps[i];
  char *ptrs[64];
  std::vector<char *> heap;
  char **pp = ptrs;
  if (s.operands.size() > 64) {
    heap.resize(s.operands.size());
    pp = heap.data();
  }
  for (size_t j = 0; j < s.operands.size(); ++j) pp[j] = spec.address(bases, s.operands[j]);
  KernelFn fn = kernels_[s.kernel];
  const int64_t outer = spec.kernelOuter[i], work = spec.kernelWork[i];
  if (threads <= 0) threads = work < kParallelWork ? 1 : omp_get_max_threads();
  threads = static_cast<int>(std::min<int64_t>(threads, outer));
  if (threads < 2) {
    fn(pp, syms, 0, outer);
    return;
  }
  const int64_t chunks = poolChunks(work, outer, threads);
  WorkPool::instance().run(chunks, [&](int64_t c) {
    const int64_t begin = outer * c / chunks, end = outer * (c + 1) / chunks;
    if (begin < end) fn(pp, syms, begin, end);
  });
}

void CpuProgram::runKernels(const Spec &spec, size_t first, size_t last, char *const *bases,
                            const int64_t *syms) const {
  struct Member {
    KernelFn fn;
    std::vector<char *> ptrs;
    int64_t outer, work, at; // outer points, element operations, start in the run's work
  };
  std::vector<Member> members;
  int64_t total = 0;
  for (size_t i = first; i < last; ++i) {
    const Step &s = spec.layout.steps[i];
    Member m{kernels_[s.kernel], {}, spec.kernelOuter[i], spec.kernelWork[i], total};
    for (int v : s.operands) m.ptrs.push_back(spec.address(bases, v));
    total += m.work;
    members.push_back(std::move(m));
  }
  const int threads = total < kParallelWork ? 1 : omp_get_max_threads();
  auto share = [&](int t, int nt) { // thread t's part of every member, in order
    const int64_t lo = total * t / nt, hi = total * (t + 1) / nt;
    for (const Member &m : members) {
      if (m.work == 0 || m.at >= hi || m.at + m.work <= lo) continue;
      // outer points whose work starts in [lo, hi)
      const int64_t per = m.work / m.outer;
      const int64_t b = std::max<int64_t>(0, (lo - m.at + per - 1) / per);
      const int64_t e = std::min<int64_t>(m.outer, (hi - m.at + per - 1) / per);
      if (b < e) m.fn(m.ptrs.data(), syms, b, e);
    }
  };
  if (threads < 2) return share(0, 1);
  int64_t points = 0; // the chunks cut at outer points, of which the run has this many
  for (const Member &m : members) points += m.outer;
  const int64_t chunks = poolChunks(total, points, threads);
  WorkPool::instance().run(
      chunks, [&](int64_t c) { share(static_cast<int>(c), static_cast<int>(chunks)); });
}

void CpuProgram::runLibrary(const Spec &spec, size_t i, char *const *operands, char *result,
                            int threads, const Tensor *const *inputs) const {
  // the weight's storage when it is a program input: a step packing its weight keeps the
  // packed copy while that storage keeps its version
  const std::shared_ptr<detail::Storage> *weight = nullptr;
  const Step &s = spec.layout.steps[i];
  if (s.operands.size() >= 2) {
    const Buffer &b = spec.layout.buffers[spec.layout.values[s.operands[1]].buffer];
    if (b.kind == Buffer::Kind::input) weight = &inputs[b.index]->impl()->storage;
  }
  if (threads == 1 && spec.serialLibrary[i]) {
    OmpThreads one(1);
    spec.serialLibrary[i]->runWith(operands, result, weight);
    return;
  }
  spec.library[i]->runWith(operands, result, weight);
}

// max_autotune's record: "rcjit-autotune 1 <steps> <threads per step>...".
std::string CpuProgram::tuningKey(const Spec &spec) const {
  std::string kernels;
  for (const LoopKernel &k : program_.kernels) {
    LoopKernel anon = k;
    anon.name = "k";
    kernels += printKernel(anon);
  }
  std::string sizes; // a symbolic program's sizes at this spec
  for (int64_t v : spec.syms) sizes += std::to_string(v) + ",";
  return cache::contentKey({"cpu-autotune-1", printProgram(spec.layout), kernels, sizes,
                            cpuFeatures(), std::to_string(omp_get_max_threads())});
}

bool CpuProgram::loadTuning(const Spec &spec) const {
  cache::ObjectStore &store = cache::ObjectStore::instance();
  const std::string key = tuningKey(spec);
  cache::Bytes b = store.lookup(key, moduleId_ + " autotune");
  if (!b) return false;
  std::istringstream in(std::string(b->begin(), b->end()));
  std::string magic;
  int version = 0;
  size_t n = 0;
  std::vector<int> threads;
  bool ok = static_cast<bool>(in >> magic >> version >> n) && magic == "rcjit-autotune" &&
            version == 1 && n == spec.layout.steps.size();
  for (size_t i = 0; ok && i < n; ++i) {
    int t = -1;
    ok = static_cast<bool>(in >> t) && t >= 0 && t <= 4096 &&
         (t == 0 || spec.layout.steps[i].kind != Step::Kind::eager);
    threads.push_back(t);
  }
  if (!ok || !(in >> std::ws).eof()) {
    store.evict(key, "not a well-formed autotune record for this program");
    return false;
  }
  for (size_t i = 0; i < n; ++i) {
    if (threads[i] == 1 && spec.library[i]) {
      OmpThreads one(1);
      spec.serialLibrary[i] = LibraryStep::create(spec.layout, spec.layout.steps[i], false);
    }
  }
  spec.threads = std::move(threads);
  return true;
}

std::vector<Tensor> CpuProgram::run(const Tensor *const *inputs, size_t n) const {
  std::vector<Tensor> outs;
  runImpl({.inputs = inputs, .n = n}, outs);
  return outs;
}

std::vector<Tensor> CpuProgram::runConsuming(std::vector<Tensor> &inputs) const {
  std::vector<const Tensor *> ptrs;
  for (const Tensor &t : inputs) ptrs.push_back(&t);
  std::vector<Tensor> outs;
  runImpl({.inputs = ptrs.data(), .n = ptrs.size(), .consumed = inputs.data()}, outs);
  return outs;
}

namespace {
// The kernel step that first writes output buffer `b` and its tensor index there, or
// {-1, -1} when a library or eager step writes it.
std::pair<int, int> outputWriter(const Program &p, const std::vector<LoopKernel> &kernels, int b) {
  for (size_t s = 0; s < p.steps.size(); ++s) {
    const Step &st = p.steps[s];
    if (st.kind != Step::Kind::kernel) {
      if (st.result >= 0 && p.values[st.result].buffer == b) return {-1, -1};
      continue;
    }
    for (size_t t = 0; t < st.operands.size(); ++t) {
      if (p.values[st.operands[t]].buffer == b && kernels[st.kernel].tensors[t].output)
        return {static_cast<int>(s), static_cast<int>(t)};
    }
  }
  return {-1, -1};
}

// How many of `p`'s outputs live in buffer `b` (collected after the steps).
int outputsOn(const Program &p, int b) {
  int uses = 0;
  for (int o : p.outputs) uses += p.values[o].buffer == b;
  return uses;
}

// Whether output value `ov` is the whole of its output buffer, contiguous, and the only
// output on it: what may take another buffer's memory.
bool wholeOutput(const Program &p, int ov) {
  const Value &out = p.values[ov];
  const Buffer &ob = p.buffers[out.buffer];
  if (ob.kind != Buffer::Kind::output || out.offset != 0 || out.shape != ob.shape ||
      out.dtype != ob.dtype || out.strides != detail::contiguousStrides(out.shape))
    return false;
  return outputsOn(p, out.buffer) == 1;
}

// Whether output value `ov` (one per buffer, the whole buffer, contiguous) may be stored
// over buffer `over`'s memory by its writer, kernel step `step` (tensor `tOut`): a purely
// elementwise kernel (no reduction passes) whose every operand on `over` is read at the
// output's own offsets (same strides and dtype, offset 0) and only before the output's
// first store, so each element is read before it is overwritten.
bool storesOver(const Program &p, const std::vector<LoopKernel> &kernels, int ov, int step,
                int tOut, int over) {
  if (!wholeOutput(p, ov) || step < 0) return false;
  const Step &st = p.steps[step];
  const LoopKernel &kern = kernels[st.kernel];
  if (kern.numOuter != static_cast<int>(kern.domain.size())) return false; // reduction passes
  int store = -1;
  for (size_t i = 0; i < kern.stmts.size() && store < 0; ++i) {
    if (kern.stmts[i].kind == KernelStmt::Kind::store && kern.stmts[i].tensor == tOut)
      store = static_cast<int>(i);
  }
  bool ok = store >= 0;
  for (size_t t = 0; ok && t < st.operands.size(); ++t) {
    const Value &iv = p.values[st.operands[t]];
    if (iv.buffer != over) continue;
    ok = iv.offset == 0 && !kern.tensors[t].output &&
         kern.tensors[t].strides == kern.tensors[tOut].strides &&
         kern.tensors[t].dtype == kern.tensors[tOut].dtype;
    for (size_t i = 0; ok && i < kern.stmts.size(); ++i) {
      const KernelStmt &ks = kern.stmts[i];
      if (ks.tensor != static_cast<int>(t)) continue;
      if (ks.kind == KernelStmt::Kind::load) ok = static_cast<int>(i) < store;
      if (ks.kind == KernelStmt::Kind::gather) ok = false; // reads rows other than its own
    }
  }
  return ok;
}

// Whether buffer `b` is read only by kernel and library steps, whose results never view
// it: an eager step's result may view its operand's storage (runEager keeps a contiguous
// result as it is), and be read after the buffer's own last step.
bool readByCodeOnly(const Program &p, int b) {
  for (const Step &s : p.steps) {
    if (s.kind == Step::Kind::kernel || s.kind == Step::Kind::library) continue;
    for (int v : s.operands)
      if (p.values[v].buffer == b) return false;
  }
  return true;
}

// Per buffer of `p`, the program input whose storage an output buffer may be (see runInto):
// an output written by a kernel after the input's last reader (a regional stage's result
// over the stage output it read, which dies with the stage), or by the input's last reader
// itself where that kernel reads each element before it stores over it (storesOver: a
// whole step's update over its parameter).
std::vector<int> inPlaceBuffers(const Program &p, const std::vector<LoopKernel> &kernels,
                                const std::vector<std::pair<int, int>> &into) {
  std::vector<int> alias(p.buffers.size(), -1);
  if (!p.symbols.empty()) return alias;
  const std::vector<int> lastUse = lastUseOfBuffers(p);
  for (const auto &[k, j] : into) {
    if (k < 0 || k >= static_cast<int>(p.outputs.size()) || j < 0 || j >= p.numInputs) continue;
    const int ov = p.outputs[k], ob = p.values[ov].buffer;
    int ib = -1;
    for (size_t b = 0; b < p.buffers.size(); ++b) {
      if (p.buffers[b].kind == Buffer::Kind::input && p.buffers[b].index == j)
        ib = static_cast<int>(b);
    }
    if (alias[ob] >= 0 || ib < 0 || std::count(alias.begin(), alias.end(), j) > 0) continue;
    const auto [step, tOut] = outputWriter(p, kernels, ob);
    // written by a library call, or read later
    if (step < 0 || lastUse[ib] > step || outputsOn(p, ib) > 0) continue;
    if (lastUse[ib] < step ? !wholeOutput(p, ov) || !readByCodeOnly(p, ib)
                           : !storesOver(p, kernels, ov, step, tOut, ib))
      continue;
    alias[ob] = j;
  }
  return alias;
}
} // namespace

std::vector<char> eagerIntoBase(const Program &p) {
  std::vector<char> into(p.steps.size(), 0);
  const std::vector<int> lastUse = lastUseOfBuffers(p);
  auto whole = [&](const Value &v) {
    const Buffer &b = p.buffers[v.buffer];
    return v.offset == 0 && v.shape == b.shape && v.strides == detail::contiguousStrides(v.shape);
  };
  // the base may also be the front of its buffer (a tied head's weight gradient at the
  // front of linear_ce_pick_backward's packed result): the result takes the whole block
  auto front = [&](const Value &v) {
    int64_t n = static_cast<int64_t>(dtypeSize(v.dtype));
    for (int64_t d : v.shape) n *= d;
    return v.offset == 0 && v.strides == detail::contiguousStrides(v.shape) &&
           n <= p.buffers[v.buffer].bytes;
  };
  for (size_t i = 0; i < p.steps.size(); ++i) {
    const Step &s = p.steps[i];
    if (s.kind != Step::Kind::eager || s.op != OpKind::embedding_backward ||
        s.operands.size() != 3 || s.result < 0)
      continue;
    const Value &base = p.values[s.operands[2]], &r = p.values[s.result];
    into[i] = p.buffers[base.buffer].kind == Buffer::Kind::dynamic &&
              lastUse[base.buffer] == static_cast<int>(i) && front(base) && whole(r) &&
              base.shape == r.shape && base.dtype == r.dtype &&
              (r.dtype == DType::f32 || r.dtype == DType::f64) &&
              p.values[s.operands[0]].buffer != base.buffer &&
              p.values[s.operands[1]].buffer != base.buffer;
  }
  return into;
}

std::vector<int> outputsOverDying(const Program &p, const std::vector<LoopKernel> &kernels,
                                  const std::vector<int> *alias) {
  std::vector<int> over(p.buffers.size(), -1);
  const std::vector<int> lastUse = lastUseOfBuffers(p);
  std::vector<bool> taken(p.buffers.size(), false);
  for (int ov : p.outputs) {
    const int ob = p.values[ov].buffer;
    if (over[ob] >= 0 || (alias && (*alias)[ob] >= 0)) continue;
    const auto [step, tOut] = outputWriter(p, kernels, ob);
    if (step < 0) continue;
    for (int v : p.steps[step].operands) {
      const int d = p.values[v].buffer;
      const Buffer &db = p.buffers[d];
      if (db.kind != Buffer::Kind::dynamic || taken[d] || lastUse[d] != step ||
          db.bytes != p.buffers[ob].bytes || !storesOver(p, kernels, ov, step, tOut, d))
        continue;
      over[ob] = d;
      taken[d] = true;
      break;
    }
  }
  return over;
}

// Runs of independent elementwise kernels (CpuProgram.h). The updates of an optimizer's
// parameters, one kernel each, run as one launch this way: each thread takes its share of
// the run's total work, member by member, with no barrier between members (the role of
// torch's foreach kernels).
std::vector<int> launchRuns(const Program &p, const std::vector<LoopKernel> &kernels,
                            const std::vector<int> &defaultThreads, const std::vector<int> *alias,
                            const std::vector<int> *over) {
  struct Region {
    int kind, id; // kind: 0 input (id: input index), 1 arena, 2 output, 3 dynamic (id: buffer)
    int64_t lo, hi;
    bool overlaps(const Region &o) const {
      return kind == o.kind && id == o.id && lo < o.hi && o.lo < hi;
    }
  };
  constexpr int64_t kWhole = std::numeric_limits<int64_t>::max();
  auto regionOf = [&](int value) -> Region {
    const int b = p.values[value].buffer;
    const Buffer &buf = p.buffers[b];
    switch (buf.kind) {
    case Buffer::Kind::input:
      return {0, buf.index, 0, kWhole};
    case Buffer::Kind::arena:
      return {1, 0, buf.offset, buf.offset + buf.bytes};
    case Buffer::Kind::output:
      if (alias && (*alias)[b] >= 0) return {0, (*alias)[b], 0, kWhole};
      if (over && (*over)[b] >= 0) return {3, (*over)[b], 0, kWhole};
      return {2, b, 0, kWhole};
    case Buffer::Kind::dynamic:
      return {3, b, 0, kWhole};
    }
    return {4, b, 0, kWhole};
  };
  auto member = [&](size_t i) {
    const Step &s = p.steps[i];
    if (s.kind != Step::Kind::kernel || defaultThreads[i] != 0) return false;
    const LoopKernel &k = kernels[s.kernel];
    return k.numOuter == static_cast<int>(k.domain.size());
  };
  std::vector<int> end(p.steps.size());
  for (size_t i = 0; i < p.steps.size(); ++i) end[i] = static_cast<int>(i) + 1;
  if (!p.symbols.empty()) return end;
  for (size_t i = 0; i < p.steps.size();) {
    if (!member(i)) {
      ++i;
      continue;
    }
    std::vector<Region> reads, writes;
    size_t j = i;
    for (; j < p.steps.size() && member(j); ++j) {
      const Step &s = p.steps[j];
      const LoopKernel &k = kernels[s.kernel];
      std::vector<Region> r, w;
      for (size_t t = 0; t < s.operands.size(); ++t)
        (k.tensors[t].output ? w : r).push_back(regionOf(s.operands[t]));
      bool independent = true;
      for (const Region &x : r)
        for (const Region &y : writes) independent = independent && !x.overlaps(y);
      for (const Region &x : w) {
        for (const Region &y : writes) independent = independent && !x.overlaps(y);
        for (const Region &y : reads) independent = independent && !x.overlaps(y);
      }
      if (!independent) break;
      reads.insert(reads.end(), r.begin(), r.end());
      writes.insert(writes.end(), w.begin(), w.end());
    }
    if (j == i) j = i + 1;
    end[i] = static_cast<int>(j);
    i = j;
  }
  return end;
}

void CpuProgram::runInto(const Tensor *const *inputs, size_t n,
                         const std::vector<std::pair<int, int>> &into,
                         std::vector<Tensor> &outs) const {
  if (into.empty()) return runImpl({.inputs = inputs, .n = n}, outs);
  CallSymbols callSyms(program_, inputs, n);
  std::shared_ptr<const Spec> keep;
  const Spec *spec = specs_->find(callSyms.data(), keep);
  const Spec::IntoPlan *plan = spec->intoLast.load(std::memory_order_acquire);
  std::unique_ptr<const Spec::IntoPlan> uncached; // past kMaxIntoPlans lists: this call's own
  if (!plan || plan->key != into) {
    std::lock_guard<std::mutex> lock(spec->intoMu);
    plan = nullptr;
    for (const auto &p : spec->intoPlans) {
      if (p->key == into) plan = p.get();
    }
    if (!plan) {
      auto made = std::make_unique<Spec::IntoPlan>();
      made->key = into;
      made->alias = inPlaceBuffers(spec->layout, program_.kernels, into);
      made->over = !program_.symbols.ranges.empty()
                       ? spec->outputOver
                       : outputsOverDying(spec->layout, program_.kernels, &made->alias);
      made->runs = launchRuns(spec->layout, program_.kernels, spec->defaultThreads, &made->alias,
                              &made->over);
      plan = made.get();
      if (spec->intoPlans.size() < Spec::kMaxIntoPlans) {
        spec->intoPlans.push_back(std::move(made));
      } else {
        uncached = std::move(made);
      }
    }
    if (!uncached) spec->intoLast.store(plan, std::memory_order_release);
  }
  runImpl({.inputs = inputs,
           .n = n,
           .syms = callSyms.data(),
           .spec = spec,
           .alias = &plan->alias,
           .runs = &plan->runs,
           .over = &plan->over},
          outs);
}

} // namespace rcjit::cpu
