// CpuJit: LLJIT for the host, an O3 + vectorizer pipeline, assembly printing, error mapping.
#include "targets/cpu/CpuJit.h"

#include <chrono>

#include <mutex>

#include <llvm/Analysis/TargetLibraryInfo.h>
#include <llvm/ExecutionEngine/ObjectCache.h>
#include <llvm/ExecutionEngine/Orc/CompileUtils.h>
#include <llvm/ExecutionEngine/Orc/ExecutionUtils.h>
#include <llvm/ExecutionEngine/Orc/JITTargetMachineBuilder.h>
#include <llvm/ExecutionEngine/Orc/LLJIT.h>
#include <llvm/ExecutionEngine/Orc/TaskDispatch.h>
#include <llvm/IR/LegacyPassManager.h>
#include <llvm/IR/Module.h>
#include <llvm/Passes/PassBuilder.h>
#include <llvm/Support/TargetSelect.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/Target/TargetMachine.h>
#include <llvm/TargetParser/Host.h>
#include <llvm/TargetParser/SubtargetFeature.h>
#include <llvm/Transforms/Utils/Cloning.h>

#include <rcjit/Error.h>

#include "targets/LlvmOptimize.h"

namespace rcjit::cpu {

namespace {

[[noreturn]] void fail(const std::string &step, llvm::Error err) {
  throw Error("CPU JIT: " + step + ": " + llvm::toString(std::move(err)));
}

template <typename T> T check(const std::string &step, llvm::Expected<T> v) {
  if (!v) fail(step, v.takeError());
  return std::move(*v);
}

// libmvec's AVX-512 variants, which LLVM 19's LIBMVEC_X86 table lacks (it stops at AVX2).
const llvm::VecDesc kAvx512VecFuncs[] = {
    {"llvm.exp.f32", "_ZGVeN16v_expf", llvm::ElementCount::getFixed(16), false, "_ZGV_LLVM_N16v"},
    {"llvm.log.f32", "_ZGVeN16v_logf", llvm::ElementCount::getFixed(16), false, "_ZGV_LLVM_N16v"},
    {"llvm.sin.f32", "_ZGVeN16v_sinf", llvm::ElementCount::getFixed(16), false, "_ZGV_LLVM_N16v"},
    {"llvm.cos.f32", "_ZGVeN16v_cosf", llvm::ElementCount::getFixed(16), false, "_ZGV_LLVM_N16v"},
    {"llvm.pow.f32", "_ZGVeN16vv_powf", llvm::ElementCount::getFixed(16), false, "_ZGV_LLVM_N16vv"},
    {"llvm.exp.f64", "_ZGVeN8v_exp", llvm::ElementCount::getFixed(8), false, "_ZGV_LLVM_N8v"},
    {"llvm.log.f64", "_ZGVeN8v_log", llvm::ElementCount::getFixed(8), false, "_ZGV_LLVM_N8v"},
    {"llvm.sin.f64", "_ZGVeN8v_sin", llvm::ElementCount::getFixed(8), false, "_ZGV_LLVM_N8v"},
    {"llvm.cos.f64", "_ZGVeN8v_cos", llvm::ElementCount::getFixed(8), false, "_ZGV_LLVM_N8v"},
    {"llvm.pow.f64", "_ZGVeN8vv_pow", llvm::ElementCount::getFixed(8), false, "_ZGV_LLVM_N8vv"},
};

// libmvec's SSE variants alone, for targets without AVX2: LLVM 19's LIBMVEC_X86 table also
// maps wider vectors to the AVX2 variants (ymm arguments), whatever the target's ISA.
const llvm::VecDesc kSseVecFuncs[] = {
    {"llvm.exp.f32", "_ZGVbN4v_expf", llvm::ElementCount::getFixed(4), false, "_ZGV_LLVM_N4v"},
    {"llvm.log.f32", "_ZGVbN4v_logf", llvm::ElementCount::getFixed(4), false, "_ZGV_LLVM_N4v"},
    {"llvm.sin.f32", "_ZGVbN4v_sinf", llvm::ElementCount::getFixed(4), false, "_ZGV_LLVM_N4v"},
    {"llvm.cos.f32", "_ZGVbN4v_cosf", llvm::ElementCount::getFixed(4), false, "_ZGV_LLVM_N4v"},
    {"llvm.pow.f32", "_ZGVbN4vv_powf", llvm::ElementCount::getFixed(4), false, "_ZGV_LLVM_N4vv"},
    {"llvm.exp.f64", "_ZGVbN2v_exp", llvm::ElementCount::getFixed(2), false, "_ZGV_LLVM_N2v"},
    {"llvm.log.f64", "_ZGVbN2v_log", llvm::ElementCount::getFixed(2), false, "_ZGV_LLVM_N2v"},
    {"llvm.sin.f64", "_ZGVbN2v_sin", llvm::ElementCount::getFixed(2), false, "_ZGV_LLVM_N2v"},
    {"llvm.cos.f64", "_ZGVbN2v_cos", llvm::ElementCount::getFixed(2), false, "_ZGV_LLVM_N2v"},
    {"llvm.pow.f64", "_ZGVbN2vv_pow", llvm::ElementCount::getFixed(2), false, "_ZGV_LLVM_N2vv"},
};

void initializeNativeTarget() {
  static std::once_flag once;
  std::call_once(once, [] {
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
  });
}

} // namespace

// Codegen time per thread (materialization runs on the thread that looks a symbol up).
thread_local double cpuJitCodegenSeconds = 0;
// Modules served from the object cache per thread (as the codegen time).
thread_local int64_t cpuJitCacheHits = 0;

// The IR compiler of the JIT: object cache lookup, then O3, then host code generation.
// Stateless apart from the CpuJit it reads, so concurrent compiles are safe.
class CpuJit::Compiler : public llvm::orc::IRCompileLayer::IRCompiler {
public:
  Compiler(const CpuJit &jit, const llvm::TargetOptions &opts)
      : IRCompiler(llvm::orc::irManglingOptionsFromTargetOptions(opts)), jit_(jit) {}

  llvm::Expected<std::unique_ptr<llvm::MemoryBuffer>> operator()(llvm::Module &m) override {
    struct Timed { // adds this compile's time to the thread's codegen seconds
      std::chrono::steady_clock::time_point t0 = std::chrono::steady_clock::now();
      ~Timed() {
        cpuJitCodegenSeconds +=
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      }
    } timed;
    llvm::ObjectCache *cache = jit_.cache_.load();
    if (cache) {
      if (auto obj = cache->getObject(&m)) {
        ++cpuJitCacheHits;
        return obj;
      }
    }
    try {
      const bool quick = m.getModuleFlag(kQuickFlag) != nullptr;
      std::unique_ptr<llvm::TargetMachine> tm = jit_.makeTargetMachine(quick);
      if (quick) {
        llvm::TargetLibraryInfoImpl tlii(tm->getTargetTriple());
        optimizeModuleQuick(*tm, m, &tlii);
      } else {
        jit_.optimizeWith(*tm, m);
      }
      auto obj = llvm::orc::SimpleCompiler(*tm)(m);
      if (obj && cache) cache->notifyObjectCompiled(&m, (*obj)->getMemBufferRef());
      return obj;
    } catch (const Error &e) {
      return llvm::createStringError(llvm::inconvertibleErrorCode(), e.what());
    }
  }

private:
  const CpuJit &jit_;
};

CpuJit::CpuJit() = default;
CpuJit::~CpuJit() = default;

std::unique_ptr<CpuJit> CpuJit::create(const std::string &cpu) {
  initializeNativeTarget();
  auto jtmb = check("detecting the host", llvm::orc::JITTargetMachineBuilder::detectHost());
  bool avx512 = llvm::sys::getHostCPUFeatures().lookup("avx512f");
  bool avx2 = llvm::sys::getHostCPUFeatures().lookup("avx2");
  if (!cpu.empty()) { // a named level: its features only, not the host's
    jtmb.setCPU(cpu);
    jtmb.getFeatures() = llvm::SubtargetFeatures();
    avx512 = cpu == "x86-64-v4";
    avx2 = avx512 || cpu == "x86-64-v3";
  }
  jtmb.setCodeGenOptLevel(llvm::CodeGenOptLevel::Aggressive);
  // JITLink allocates a module's code and constants together and adds stubs for far
  // calls, so the small code model is safe and keeps constant loads RIP-relative.
  jtmb.setCodeModel(llvm::CodeModel::Small);
  std::unique_ptr<CpuJit> self(new CpuJit());
  self->avx512_ = avx512;
  self->avx2_ = avx2;
  self->jtmb_ = std::make_unique<llvm::orc::JITTargetMachineBuilder>(jtmb);
  CpuJit *raw = self.get();
  // Materialize on the thread that asked for the symbol. ORC's default dispatcher is a pool
  // of detached threads: compiles hop threads for nothing (every lookup waits for its
  // result), and a worker still exiting when the process does leaks its thread-local state
  // (OpenSSL's, from signing cache entries) and races the static destructors.
  auto epc = check("creating the executor process control",
                   llvm::orc::SelfExecutorProcessControl::Create(
                       nullptr, std::make_unique<llvm::orc::InPlaceTaskDispatcher>()));
  self->jit_ =
      check("creating LLJIT",
            llvm::orc::LLJITBuilder()
                .setExecutorProcessControl(std::move(epc))
                .setJITTargetMachineBuilder(jtmb)
                .setSupportConcurrentCompilation(true)
                .setCompileFunctionCreator(
                    [raw](llvm::orc::JITTargetMachineBuilder b)
                        -> llvm::Expected<std::unique_ptr<llvm::orc::IRCompileLayer::IRCompiler>> {
                      return std::make_unique<Compiler>(*raw, b.getOptions());
                    })
                .create());
  llvm::orc::JITDylibSP symbols = self->jit_->getProcessSymbolsJITDylib();
  llvm::orc::JITDylib &target = symbols ? *symbols : self->jit_->getMainJITDylib();
  auto mvec = llvm::orc::DynamicLibrarySearchGenerator::Load(
      "libmvec.so.1", self->jit_->getDataLayout().getGlobalPrefix());
  if (mvec && self->jit_->getTargetTriple().getArch() == llvm::Triple::x86_64) {
    target.addGenerator(std::move(*mvec));
    self->libmvec_ = true;
  } else if (!mvec) {
    llvm::consumeError(mvec.takeError()); // no libmvec: scalar libm calls instead
  }
  return self;
}

std::unique_ptr<llvm::TargetMachine> CpuJit::makeTargetMachine(bool quick) const {
  llvm::orc::JITTargetMachineBuilder b = *jtmb_;
  // the fast tier: instruction selection and register allocation at their cheapest
  if (quick) b.setCodeGenOptLevel(quickCodegenLevel());
  return check("creating the target machine", b.createTargetMachine());
}

void CpuJit::prepareModule(llvm::Module &m) const {
  m.setDataLayout(jit_->getDataLayout());
  m.setTargetTriple(jit_->getTargetTriple().str());
}

void CpuJit::optimize(llvm::Module &m, bool quick) const {
  if (!quick) return optimizeWith(*makeTargetMachine(), m);
  std::unique_ptr<llvm::TargetMachine> tm = makeTargetMachine(true);
  llvm::TargetLibraryInfoImpl tlii(tm->getTargetTriple());
  optimizeModuleQuick(*tm, m, &tlii);
}

void CpuJit::optimizeWith(llvm::TargetMachine &tm, llvm::Module &m) const {
  llvm::PipelineTuningOptions pto;
  pto.LoopVectorization = true;
  pto.SLPVectorization = true;
  pto.LoopInterleaving = true;
  pto.LoopUnrolling = true;
  llvm::TargetLibraryInfoImpl tlii(tm.getTargetTriple());
  if (libmvec_ && avx2_) {
    tlii.addVectorizableFunctionsFromVecLib(llvm::TargetLibraryInfoImpl::LIBMVEC_X86,
                                            tm.getTargetTriple());
    if (avx512_) tlii.addVectorizableFunctions(kAvx512VecFuncs);
  } else if (libmvec_) {
    tlii.addVectorizableFunctions(kSseVecFuncs);
  }
  optimizeModuleO3(tm, m, pto, &tlii);
}

std::string CpuJit::assembly(const llvm::Module &m) const {
  std::unique_ptr<llvm::Module> copy = llvm::CloneModule(m);
  std::unique_ptr<llvm::TargetMachine> tm = makeTargetMachine();
  llvm::SmallString<0> text;
  llvm::raw_svector_ostream os(text);
  llvm::legacy::PassManager pm;
  if (tm->addPassesToEmitFile(pm, os, nullptr, llvm::CodeGenFileType::AssemblyFile)) {
    throw Error("CPU JIT: the target cannot emit assembly");
  }
  pm.run(*copy);
  return std::string(text.str());
}

CpuJit::ModuleHandle CpuJit::addModule(std::unique_ptr<llvm::Module> m,
                                       std::unique_ptr<llvm::LLVMContext> ctx) {
  std::string name = "rcjit." + std::to_string(nextDylib_.fetch_add(1));
  llvm::Expected<llvm::orc::JITDylib &> jd = jit_->createJITDylib(name);
  if (!jd) fail("creating a JITDylib", jd.takeError());
  llvm::orc::ThreadSafeModule tsm(std::move(m), llvm::orc::ThreadSafeContext(std::move(ctx)));
  if (llvm::Error err = jit_->addIRModule(*jd, std::move(tsm))) {
    fail("adding a module", std::move(err));
  }
  return &*jd;
}

void CpuJit::removeModule(ModuleHandle h) noexcept {
  llvm::consumeError(jit_->getExecutionSession().removeJITDylib(*h));
}

double CpuJit::codegenSecondsOnThisThread() { return cpuJitCodegenSeconds; }
int64_t CpuJit::cacheHitsOnThisThread() { return cpuJitCacheHits; }

void *CpuJit::lookup(ModuleHandle h, const std::string &name) {
  auto addr = check("compiling or finding '" + name + "'", jit_->lookup(*h, name));
  return addr.toPtr<void *>();
}

} // namespace rcjit::cpu
