// The CUDA executor: PTX from the cache or NVPTX, one module per distinct kernel set and
// device, kernels and cuBLAS calls enqueued on the device's stream, CUDA graph replay.
#include "targets/cuda/CudaProgram.h"

#include <algorithm>
#include <array>

#include <rcjit/Cache.h>

#include "cache/ClearHooks.h"
#include "cache/Key.h"
#include "cache/ObjectStore.h"
#include "targets/SymbolicProgram.h"
#include "targets/cuda/Cublas.h"
#include "targets/cuda/CudaEager.h"
#include "targets/cuda/CudaRuntime.h"
#include "targets/cuda/PtxCodegen.h"
#include "tracer/TensorImpl.h"

namespace rcjit::cuda {

/// A PTX module loaded into a device's context; shared by every program with the same
/// kernels on that device. Never unloaded (functions may be captured in CUDA graphs).
struct LoadedModule {
  CUmodule module = nullptr;
  std::string ptx;
  std::vector<CUfunction> functions; // k0, k1, ... in order
};

namespace {

// Calls with the same buffer addresses before a static program is captured as a graph, and
// graphs kept per program (the least recently used is dropped).
constexpr int kCaptureAfter = 2;
constexpr size_t kMaxGraphs = 4;
constexpr size_t kMaxSeen = 64;
// cuBLAS's workspace per device (its own recommendation for Hopper is 32 MiB).
constexpr size_t kCublasWorkspace = size_t{32} << 20;

struct ModuleMemoTag;
using ModuleMemo = cache::detail::ProcessMemo<ModuleMemoTag, std::string,
                                              std::shared_ptr<const LoadedModule>, SIZE_MAX>;

// Kernels named k0, k1, ... (the names a module's entries have whatever program built it).
std::vector<LoopKernel> anonymous(const std::vector<LoopKernel> &kernels) {
  std::vector<LoopKernel> out = kernels;
  for (size_t i = 0; i < out.size(); ++i) out[i].name = "k" + std::to_string(i);
  return out;
}

std::string moduleKey(const std::vector<LoopKernel> &kernels, const PtxOptions &o) {
  std::string text;
  for (const LoopKernel &k : kernels) text += printKernel(k);
  return cache::contentKey({"cuda-ptx", text, o.arch, std::to_string(o.ptxVersion)});
}

// Loads PTX with the driver's JIT; its error log goes into the Error.
CUmodule loadPtx(const std::string &ptx, const std::string &what) {
  const DriverApi &api = requireCuda();
  std::array<char, 8192> log{};
  CUjit_option opts[] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
  void *vals[] = {log.data(), reinterpret_cast<void *>(log.size() - 1)};
  CUmodule m = nullptr;
  CUresult r = api.moduleLoadDataEx(&m, ptx.c_str(), 2, opts, vals);
  if (r != CUDA_SUCCESS) {
    throw Error("loading the PTX of '" + what + "' into the GPU: " + describeResult(&api, r) +
                (log[0] ? std::string("; JIT log: ") + log.data() : std::string()));
  }
  return m;
}

// The module for `kernels` on the device: from this process's memo, else its PTX (from the
// compile cache or NVPTX) loaded. `hit` says whether no PTX was generated.
std::shared_ptr<const LoadedModule> moduleFor(DeviceContext &ctx,
                                              const std::vector<LoopKernel> &kernels,
                                              const std::string &moduleId, bool keepLlvmIr,
                                              std::string &llvmIr, bool &hit) {
  const PtxOptions &o = ctx.ptxOptions();
  std::vector<LoopKernel> named = anonymous(kernels);
  const std::string memoKey = moduleKey(named, o) + "@" + std::to_string(ctx.info().ordinal);
  hit = true;
  if (!keepLlvmIr) {
    if (auto m = ModuleMemo::instance().find(memoKey)) return m;
  }
  auto m = std::make_shared<LoadedModule>();
  bool generated = false;
  m->ptx = cachedPtx(kernels, moduleId, o, generated, keepLlvmIr ? &llvmIr : nullptr);
  hit = !generated;
  ctx.makeCurrent();
  m->module = loadPtx(m->ptx, moduleId);
  const DriverApi &api = requireCuda();
  for (const LoopKernel &k : named) {
    CUfunction f = nullptr;
    check(api.moduleGetFunction(&f, m->module, k.name.c_str()), "cuModuleGetFunction");
    m->functions.push_back(f);
  }
  ModuleMemo::instance().add(memoKey, m);
  return m;
}

} // namespace

std::string cachedPtx(const std::vector<LoopKernel> &kernels, const std::string &moduleId,
                      const PtxOptions &o, bool &generated, std::string *llvmIr) {
  std::vector<LoopKernel> named = anonymous(kernels);
  const std::string key = moduleKey(named, o);
  cache::ObjectStore &store = cache::ObjectStore::instance();
  generated = false;
  if (!llvmIr) {
    if (cache::Bytes cached = store.lookup(key, moduleId))
      return std::string(cached->begin(), cached->end());
  }
  generated = true;
  PtxOptions po = o;
  po.wantLlvmIr = llvmIr != nullptr;
  PtxModule ptx = compilePtx(named, moduleId, po);
  if (llvmIr) *llvmIr = std::move(ptx.llvmIr);
  store.store(key, {reinterpret_cast<const uint8_t *>(ptx.ptx.data()), ptx.ptx.size()}, moduleId);
  return std::move(ptx.ptx);
}

namespace {

// The cuBLAS GEMM of a step in row-major terms.
GemmDesc gemmDesc(const MatmulLayout &l, DType dtype) {
  GemmDesc d;
  d.dtype = dtype;
  d.batch = l.batch;
  d.m = l.m;
  d.n = l.n;
  d.k = l.k;
  d.a = {l.a.row, l.a.col, l.a.batch};
  d.b = {l.b.row, l.b.col, l.b.batch};
  d.c = {l.c.row, l.c.col, l.c.batch};
  return d;
}

} // namespace

std::string unsupportedStep(const Program &p, const Step &s) {
  if (s.kind == Step::Kind::kernel) return "";
  std::string what = std::string(opName(s.op)) + " (" + s.note + ")";
  if (s.kind == Step::Kind::eager && s.op == OpKind::arange) return ""; // a constant per size
  if (s.kind == Step::Kind::eager) return what + " has no GPU implementation yet";
  if (s.kind == Step::Kind::collective || s.kind == Step::Kind::wait) {
    return what + " is a collective: the cuda target has none (NCCL is not built); compile "
                  "the function for the CPU (Target::cpu), where collectives run over MPI";
  }
  if (s.op != OpKind::matmul && s.op != OpKind::linear) // conv2d: cuBLAS runs GEMMs alone
    return what + " has no GPU implementation yet";
  if (!s.postOps.empty()) return what + " has fused post-ops (lower with lowerOptionsFor(cuda))";
  MatmulLayout l;
  if (!matmulLayout(p, s, l)) {
    return what + ": its operands' layout is not one batched GEMM (broadcast batches or "
                  "leading dims that do not collapse)";
  }
  if (l.bias)
    return what + ": a linear with a bias (split it with DecomposeOptions::splitLinearBias)";
  std::string why;
  if (!gemmLayoutSupported(gemmDesc(l, p.values[s.result].dtype), &why)) return what + ": " + why;
  return "";
}

namespace {

// Per-device cuBLAS handle on the device's stream (cuBLAS calls are serialized per device).
struct DeviceBlas {
  std::mutex mu;
  std::unique_ptr<CublasHandle> handle;
  CUdeviceptr workspace = 0; // kCublasWorkspace bytes, never freed
};
DeviceBlas &blasFor(DeviceContext &ctx) {
  static std::mutex mu;
  static std::map<int, DeviceBlas *> all; // never destroyed, like the contexts
  std::lock_guard<std::mutex> lock(mu);
  DeviceBlas *&b = all[ctx.info().ordinal];
  if (!b) b = new DeviceBlas();
  return *b;
}

} // namespace

struct CudaProgram::CapturedGraph {
  std::vector<CUdeviceptr> key;
  CUgraph graph = nullptr;
  CUgraphExec exec = nullptr;
  ~CapturedGraph() {
    if (const DriverApi *api = driver()) {
      if (exec) api->graphExecDestroy(exec);
      if (graph) api->graphDestroy(graph);
    }
  }
};

std::shared_ptr<CudaProgram> CudaProgram::create(Program p, const std::string &moduleId,
                                                 const CudaProgramOptions &opts) {
  auto cp = std::shared_ptr<CudaProgram>(new CudaProgram());
  cp->ctx_ = &DeviceContext::get(opts.device);
  for (const Step &s : p.steps) {
    if (std::string why = unsupportedStep(p, s); !why.empty()) {
      throw Error("compile for cuda: " + why);
    }
  }
  if (!p.kernels.empty()) {
    bool hit = false;
    std::vector<int> which; // each kernel's entry: repeated layers share theirs
    const std::vector<LoopKernel> distinct = distinctKernels(p.kernels, which);
    cp->module_ = moduleFor(*cp->ctx_, distinct, moduleId, opts.keepLlvmIr, cp->llvmIr_, hit);
    if (hit) cp->cacheHits_ = static_cast<int>(p.kernels.size());
    for (int w : which) cp->functions_.push_back(cp->module_->functions[static_cast<size_t>(w)]);
    for (const LoopKernel &k : p.kernels) {
      cp->lanes_.push_back(lanesPerPoint(k, cp->ctx_->ptxOptions()));
      cp->symCount_.push_back(symbolSlots(k));
    }
  }
  cp->graphsAllowed_ = opts.graphs && p.symbols.empty();
  cp->program_ = std::move(p);
  const Program &prog = cp->program_;
  DeviceContext *ctx = cp->ctx_;
  cp->specs_ = std::make_unique<SpecTable<Spec>>(
      prog, [&prog, ctx](const int64_t *syms) { return makeSpec(prog, syms, *ctx); });
  return cp;
}

CudaProgram::~CudaProgram() = default;

const std::string &CudaProgram::ptx() const {
  static const std::string none;
  return module_ ? module_->ptx : none;
}

int CudaProgram::graphsCaptured() const {
  std::lock_guard<std::mutex> lock(graphMu_);
  return graphsCaptured_;
}

int CudaProgram::graphLaunches() const {
  std::lock_guard<std::mutex> lock(graphMu_);
  return graphLaunches_;
}

std::shared_ptr<const CudaProgram::Spec>
CudaProgram::makeSpec(const Program &p, const int64_t *syms, DeviceContext &ctx) {
  auto spec = std::make_shared<Spec>();
  spec->syms.assign(syms, syms + p.symbols.ranges.size());
  spec->layout = specializeProgram(p, syms);
  const Program &l = spec->layout;
  spec->gemms.resize(l.steps.size());
  spec->constants.resize(l.buffers.size());
  for (size_t i = 0; i < l.steps.size(); ++i) {
    const Step &s = l.steps[i];
    if (s.kind == Step::Kind::eager) { // arange: made once per size, read by later steps
      const Value &r = l.values[s.result];
      spec->constants[r.buffer] =
          runSource(s.op, r.shape, r.dtype, s.attrs, Device::cuda(ctx.info().ordinal));
      continue;
    }
    if (l.steps[i].kind != Step::Kind::library) continue;
    if (std::string why = unsupportedStep(l, l.steps[i]); !why.empty()) {
      throw Error("cuda program: " + why); // a size the symbolic program did not foresee
    }
    matmulLayout(l, l.steps[i], spec->gemms[i]);
  }
  return spec;
}

void CudaProgram::enqueue(const Spec &spec, const std::vector<CUdeviceptr> &bases,
                          const int64_t *syms) const {
  const Program &p = spec.layout;
  const DriverApi &api = requireCuda();
  auto address = [&](int value) { return valueAddress(p, bases.data(), value); };
  std::vector<CUdeviceptr> ptrs;
  std::vector<int64_t> symArg;
  auto kernel = [&](size_t, const Step &s) {
    const LoopKernel &k = program_.kernels[s.kernel];
    int64_t outer = k.outerSize(syms);
    if (outer == 0) return;
    ptrs.clear();
    for (int v : s.operands) ptrs.push_back(address(v));
    symArg.assign(static_cast<size_t>(symCount_[s.kernel]), 0);
    for (size_t j = 0; syms && j < symArg.size() && j < program_.symbols.ranges.size(); ++j)
      symArg[j] = syms[j];
    int64_t begin = 0, end = outer;
    void *params[] = {ptrs.data(), symArg.data(), &begin, &end};
    LaunchDims d = launchDims(outer, ctx_->info().multiprocessors, lanes_[s.kernel]);
    CUresult r = api.launchKernel(functions_[s.kernel], d.grid, 1, 1, d.block, 1, 1, 0,
                                  ctx_->stream(), params, nullptr);
    if (r != CUDA_SUCCESS) check(r, ("cuLaunchKernel(" + s.note + ")").c_str());
  };
  auto gemm = [&](size_t i, const Step &s) {
    const MatmulLayout &l = spec.gemms[i];
    if (l.m == 0 || l.n == 0 || l.batch == 0) return;
    const Value &r = p.values[s.result];
    if (l.k == 0) { // an empty sum: zeros
      ctx_->fill(address(s.result), 0, dtypeSize(r.dtype),
                 static_cast<size_t>(l.batch * l.m * l.n));
      return;
    }
    DeviceBlas &blas = blasFor(*ctx_);
    std::lock_guard<std::mutex> lock(blas.mu);
    if (!blas.handle) {
      blas.handle = std::make_unique<CublasHandle>(ctx_->stream());
      // a workspace of its own, so that calls captured into a CUDA graph allocate nothing
      blas.workspace = ctx_->allocate(kCublasWorkspace);
      checkCublas(requireCublas().setWorkspace(blas.handle->get(),
                                               reinterpret_cast<void *>(blas.workspace),
                                               kCublasWorkspace),
                  "cublasSetWorkspace");
    }
    runGemm(blas.handle->get(), gemmDesc(l, r.dtype),
            reinterpret_cast<const void *>(address(s.operands[0])),
            reinterpret_cast<const void *>(address(s.operands[1])),
            reinterpret_cast<void *>(address(s.result)), ctx_->stream());
  };
  // an eager step (arange) is a constant of the spec, bound as a buffer in run()
  forEachStep(
      p, kernel, gemm, [](size_t, const Step &) {}, [](size_t, const Step &) {});
}

std::vector<Tensor> CudaProgram::run(const Tensor *const *inputs, size_t n) const {
  CallSymbols callSyms(program_, inputs, n);
  const int64_t *syms = callSyms.data();
  std::shared_ptr<const Spec> spec = specs_->get(syms);
  const Program &p = spec->layout;
  ctx_->makeCurrent();
  const Device device = Device::cuda(ctx_->info().ordinal);

  struct Arena { // stream-ordered: released after the work using it was enqueued
    DeviceContext *ctx;
    size_t bytes;
    CUdeviceptr ptr = 0;
    ~Arena() {
      if (ptr) ctx->release(ptr, bytes);
    }
  } arena{ctx_, static_cast<size_t>(p.arenaBytes)};
  if (p.arenaBytes > 0) arena.ptr = ctx_->allocate(arena.bytes);

  std::vector<Tensor> outBuffers;
  // a dynamic buffer is the result of an arange step: the spec's constant
  std::vector<CUdeviceptr> bases =
      bindBuffers(p, inputs, n, device, arena.ptr, outBuffers, [&](size_t b) {
        return reinterpret_cast<CUdeviceptr>(spec->constants[b].data_ptr());
      });
  // outputs never share the spec's constants
  auto outputs = [&] {
    std::vector<Tensor> outs = collectOutputs(p, inputs, spec->constants, outBuffers);
    for (size_t o = 0; o < outs.size(); ++o) {
      const Buffer &b = p.buffers[p.values[p.outputs[o]].buffer];
      if (b.kind == Buffer::Kind::dynamic) outs[o] = outs[o].clone();
    }
    return outs;
  };

  if (!graphsAllowed_) {
    enqueue(*spec, bases, syms);
  } else {
    const DriverApi &api = requireCuda();
    std::lock_guard<std::mutex> lock(graphMu_); // replays and captures of this program in order
    auto it =
        std::find_if(graphs_.begin(), graphs_.end(),
                     [&](const std::unique_ptr<CapturedGraph> &g) { return g->key == bases; });
    if (it != graphs_.end()) {
      graphs_.splice(graphs_.begin(), graphs_, it);
    } else if (int &seen = seen_[bases]; ++seen < kCaptureAfter) {
      if (seen_.size() > kMaxSeen) seen_.clear();
      enqueue(*spec, bases, syms);
      return outputs();
    } else {
      auto g = std::make_unique<CapturedGraph>();
      g->key = bases;
      check(api.streamBeginCapture(ctx_->stream(), CU_STREAM_CAPTURE_MODE_THREAD_LOCAL),
            "cuStreamBeginCapture");
      try {
        enqueue(*spec, bases, syms);
      } catch (...) {
        CUgraph broken = nullptr;
        api.streamEndCapture(ctx_->stream(), &broken);
        if (broken) api.graphDestroy(broken);
        throw;
      }
      check(api.streamEndCapture(ctx_->stream(), &g->graph), "cuStreamEndCapture");
      check(api.graphInstantiate(&g->exec, g->graph, 0), "cuGraphInstantiate");
      ++graphsCaptured_;
      seen_.erase(bases);
      graphs_.push_front(std::move(g));
      if (graphs_.size() > kMaxGraphs) graphs_.pop_back();
    }
    check(api.graphLaunch(graphs_.front()->exec, ctx_->stream()), "cuGraphLaunch");
    ++graphLaunches_;
  }
  return outputs();
}

} // namespace rcjit::cuda
