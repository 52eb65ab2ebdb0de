// LoopKernels → one NVPTX LLVM module with a grid- or warp-stride outer loop → PTX text.
#include "targets/cuda/PtxCodegen.h"

#include <algorithm>
#include <cassert>
#include <map>
#include <memory>
#include <mutex>
#include <set>

#include <llvm/IR/DiagnosticInfo.h>
#include <llvm/IR/DiagnosticPrinter.h>
#include <llvm/IR/IntrinsicsNVPTX.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/LegacyPassManager.h>
#include <llvm/IR/Module.h>
#include <llvm/IR/Verifier.h>
#include <llvm/MC/TargetRegistry.h>
#include <llvm/Passes/PassBuilder.h>
#include <llvm/Support/TargetSelect.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/Target/TargetMachine.h>

#include <rcjit/Error.h>

#include "targets/LlvmOptimize.h"
#include "targets/LoopCodegen.h"
#include "targets/cuda/Libdevice.h"

namespace rcjit::cuda {

namespace {

using llvm::Value;

constexpr const char *kTriple = "nvptx64-nvidia-cuda";

// (arch, lowest PTX ISA that supports it), oldest first: the archs LLVM 19's NVPTX knows
// from sm_50 on (PTX ISA manual, "Target ISA notes").
const std::pair<const char *, int> kArchs[] = {
    {"sm_50", 40}, {"sm_52", 41}, {"sm_53", 42}, {"sm_60", 50}, {"sm_61", 50},
    {"sm_62", 50}, {"sm_70", 60}, {"sm_72", 61}, {"sm_75", 63}, {"sm_80", 70},
    {"sm_86", 71}, {"sm_87", 74}, {"sm_89", 78}, {"sm_90", 78}, {"sm_90a", 80}};
constexpr int kMaxPtx = 85;
// shfl.sync, which a warp-per-point reduction needs, came with PTX ISA 6.0.
constexpr int kMinShufflePtx = 60;
constexpr int kWarp = 32;
// The PTX versions LLVM 19 has a feature for (`+ptxNN`).
const std::set<int> kPtxVersions = {32, 40, 41, 42, 43, 50, 60, 61, 62, 63, 64, 65, 70, 71,
                                    72, 73, 74, 75, 76, 77, 78, 80, 81, 82, 83, 84, 85};

void initializeNvptx() {
  static std::once_flag once;
  std::call_once(once, [] {
    LLVMInitializeNVPTXTargetInfo();
    LLVMInitializeNVPTXTarget();
    LLVMInitializeNVPTXTargetMC();
    LLVMInitializeNVPTXAsmPrinter();
  });
}

// Collects LLVM's error diagnostics (the default handler would print them and exit).
struct CollectErrors : llvm::DiagnosticHandler {
  explicit CollectErrors(std::string &out) : errors(out) {}
  bool handleDiagnostics(const llvm::DiagnosticInfo &di) override {
    if (di.getSeverity() == llvm::DS_Error) {
      llvm::raw_string_ostream os(errors);
      llvm::DiagnosticPrinterRawOStream printer(os);
      di.print(printer);
      os << "\n";
    }
    return true;
  }
  std::string &errors;
};

// The 64-bit value of a PTX special register (threadIdx.x, ...).
Value *specialRegister(llvm::IRBuilder<> &b, llvm::Intrinsic::ID id) {
  return b.CreateZExt(b.CreateIntrinsic(id, {}, {}), b.getInt64Ty());
}

// Visits outer points first, first + stride, ... below `end` (arg 3), calling emitPoint for
// each; `first` and `stride` are the same for every thread that must run a point together.
void emitStrideLoop(llvm::IRBuilder<> &b, codegen::KernelBody &body, llvm::Function *fn,
                    Value *first, Value *stride) {
  const LoopKernel &k = body.kernel();
  Value *end = fn->getArg(3);
  llvm::BasicBlock *pre = b.GetInsertBlock();
  auto *loop = llvm::BasicBlock::Create(b.getContext(), "grid", fn);
  auto *exit = llvm::BasicBlock::Create(b.getContext(), "grid.exit", fn);
  b.CreateCondBr(b.CreateICmpSLT(first, end), loop, exit);
  b.SetInsertPoint(loop);
  llvm::PHINode *i = b.CreatePHI(b.getInt64Ty(), 2, "point");
  i->addIncoming(first, pre);
  body.emitPoint(body.unflatten(i, 0, k.numOuter));
  Value *next = b.CreateAdd(i, stride, "", true, true);
  llvm::BasicBlock *latch = b.GetInsertBlock();
  b.CreateCondBr(b.CreateICmpSLT(next, end), loop, exit);
  i->addIncoming(next, latch);
  b.SetInsertPoint(exit);
}

// The elementwise outer loop: thread t of the grid computes outer points begin + t, +
// stride, ... below end, where stride is the number of threads in the grid.
void emitGridStrideLoop(llvm::IRBuilder<> &b, codegen::KernelBody &body, llvm::Function *fn) {
  using namespace llvm::Intrinsic;
  Value *ntid = specialRegister(b, nvvm_read_ptx_sreg_ntid_x);
  Value *thread = b.CreateAdd(b.CreateMul(specialRegister(b, nvvm_read_ptx_sreg_ctaid_x), ntid),
                              specialRegister(b, nvvm_read_ptx_sreg_tid_x));
  Value *first = b.CreateAdd(fn->getArg(2), thread, "first");
  Value *stride = b.CreateMul(ntid, specialRegister(b, nvvm_read_ptx_sreg_nctaid_x), "stride");
  emitStrideLoop(b, body, fn, first, stride);
}

// Whether the (simplified) kernel runs a warp per outer point in PTX ISA `ptx`: it has inner
// dims (reductions) and the ISA has shfl.sync.
int lanesFor(const LoopKernel &simplified, int ptx) {
  const bool reduces = simplified.numOuter < static_cast<int>(simplified.domain.size());
  return reduces && ptx >= kMinShufflePtx ? kWarp : 1;
}

// The value `v` holds in lane (lane ^ mask) of the warp: one shfl.sync.bfly of 32 bits, two
// for 64-bit values (split into halves and joined again). Full mask: all 32 lanes take part.
Value *shuffleXor(llvm::IRBuilder<> &b, Value *v, int mask) {
  llvm::Type *type = v->getType();
  const unsigned bits = type->getPrimitiveSizeInBits();
  assert(bits <= 64 && (type->isIntegerTy() || type->isFloatingPointTy()));
  auto shfl = [&](Value *word) {
    return b.CreateIntrinsic(llvm::Intrinsic::nvvm_shfl_sync_bfly_i32, {},
                             {b.getInt32(0xffffffffu), word, b.getInt32(mask),
                              b.getInt32(kWarp - 1)}); // c: clamp to the whole warp
  };
  llvm::Type *intTy = b.getIntNTy(bits);
  Value *x = b.CreateBitCast(v, intTy);
  Value *got = nullptr;
  if (bits <= 32) {
    got = b.CreateTrunc(shfl(b.CreateZExt(x, b.getInt32Ty())), intTy);
  } else {
    Value *lo = shfl(b.CreateTrunc(x, b.getInt32Ty()));
    Value *hi = shfl(b.CreateTrunc(b.CreateLShr(x, 32), b.getInt32Ty()));
    got = b.CreateOr(b.CreateZExt(lo, intTy), b.CreateShl(b.CreateZExt(hi, intTy), 32));
  }
  return b.CreateBitCast(got, type);
}

// The reduction outer loop: warp w of the grid computes outer points begin + w, + stride, ...
// below end (stride: the number of warps in the grid), its 32 lanes splitting each point's
// inner dims (codegen::LaneSplit). The loop condition depends only on the warp index, so all
// lanes run every iteration and reach every shuffle together. A block whose size is not a
// multiple of 32 would have a partial warp: such a launch traps instead of computing garbage.
void emitWarpStrideLoop(llvm::IRBuilder<> &b, codegen::KernelBody &body, llvm::Function *fn) {
  using namespace llvm::Intrinsic;
  Value *ntid = specialRegister(b, nvvm_read_ptx_sreg_ntid_x);
  Value *tid = specialRegister(b, nvvm_read_ptx_sreg_tid_x);
  auto *trap = llvm::BasicBlock::Create(b.getContext(), "partial.warp", fn);
  auto *start = llvm::BasicBlock::Create(b.getContext(), "warps", fn);
  b.CreateCondBr(b.CreateICmpNE(b.CreateAnd(ntid, kWarp - 1), b.getInt64(0)), trap, start);
  b.SetInsertPoint(trap);
  b.CreateIntrinsic(llvm::Intrinsic::trap, {}, {});
  b.CreateUnreachable();
  b.SetInsertPoint(start);
  Value *warpsPerBlock = b.CreateLShr(ntid, 5);
  Value *warp =
      b.CreateAdd(b.CreateMul(specialRegister(b, nvvm_read_ptx_sreg_ctaid_x), warpsPerBlock),
                  b.CreateLShr(tid, 5));
  Value *first = b.CreateAdd(fn->getArg(2), warp, "first");
  Value *stride =
      b.CreateMul(warpsPerBlock, specialRegister(b, nvvm_read_ptx_sreg_nctaid_x), "stride");
  body.splitLanes({b.CreateAnd(tid, kWarp - 1, "lane"), kWarp, shuffleXor});
  emitStrideLoop(b, body, fn, first, stride);
}

void checkKernels(const std::vector<LoopKernel> &kernels) {
  std::set<std::string> names;
  for (const LoopKernel &k : kernels) {
    verifyKernel(k);
    if (!names.insert(k.name).second) {
      throw Error("compilePtx: two kernels are named '" + k.name + "'");
    }
  }
}

std::unique_ptr<llvm::TargetMachine> makeTargetMachine(const std::string &arch, int ptx) {
  initializeNvptx();
  std::string err;
  const llvm::Target *target = llvm::TargetRegistry::lookupTarget(kTriple, err);
  if (!target) throw Error("compilePtx: the NVPTX back end is missing from LLVM: " + err);
  llvm::TargetOptions opts;
  std::unique_ptr<llvm::TargetMachine> tm(
      target->createTargetMachine(kTriple, arch, "+ptx" + std::to_string(ptx), opts, std::nullopt,
                                  std::nullopt, llvm::CodeGenOptLevel::Aggressive));
  if (!tm) throw Error("compilePtx: cannot create an NVPTX target machine for " + arch);
  return tm;
}

void optimize(llvm::TargetMachine &tm, llvm::Module &m) {
  optimizeModuleO3(tm, m, llvm::PipelineTuningOptions());
}

std::string printModule(const llvm::Module &m) {
  std::string text;
  llvm::raw_string_ostream os(text);
  m.print(os, nullptr);
  return text;
}

// Every function the PTX would call must be defined in the module (PTX has no linker here).
void checkSelfContained(const llvm::Module &m) {
  std::string missing;
  for (const llvm::Function &f : m) {
    if (f.isDeclaration() && !f.isIntrinsic() && !f.use_empty()) {
      missing += (missing.empty() ? "" : ", ") + f.getName().str();
    }
  }
  if (!missing.empty()) {
    throw Error("compilePtx: the GPU has no implementation of " + missing +
                " (neither an NVPTX instruction nor a libdevice function)");
  }
}

std::string emitPtx(llvm::TargetMachine &tm, llvm::Module &m) {
  llvm::SmallString<0> text;
  llvm::raw_svector_ostream os(text);
  llvm::legacy::PassManager pm;
  if (tm.addPassesToEmitFile(pm, os, nullptr, llvm::CodeGenFileType::AssemblyFile)) {
    throw Error("compilePtx: the NVPTX target cannot emit PTX");
  }
  pm.run(m);
  return std::string(text.str());
}

} // namespace

const std::vector<std::string> &knownArchs() {
  static const std::vector<std::string> archs = [] {
    std::vector<std::string> v;
    for (const auto &[arch, ptx] : kArchs) v.push_back(arch);
    return v;
  }();
  return archs;
}

int minPtxVersion(const std::string &arch) {
  for (const auto &[a, ptx] : kArchs) {
    if (arch == a) return ptx;
  }
  std::string known;
  for (const std::string &a : knownArchs()) known += " " + a;
  throw Error("compilePtx: unknown GPU architecture '" + arch + "' (LLVM 19 knows:" + known + ")");
}

int maxPtxVersion() { return kMaxPtx; }

PtxOptions ptxOptionsForDevice(int major, int minor, int driverPtxVersion) {
  const int cc = 10 * major + minor;
  PtxOptions o;
  o.arch.clear();
  for (const auto &[arch, ptx] : kArchs) {
    const std::string a = arch;
    if (a.back() == 'a') continue; // arch-specific features: PTX for sm_90a runs on sm_90 only
    if (std::stoi(a.substr(3)) <= cc) o.arch = a;
  }
  if (o.arch.empty()) {
    throw Error("CUDA target: compute capability " + std::to_string(major) + "." +
                std::to_string(minor) + " is older than every architecture LLVM 19 targets");
  }
  const int need = minPtxVersion(o.arch);
  if (driverPtxVersion < need) {
    throw Error("CUDA target: the driver JIT-compiles PTX up to ISA " +
                std::to_string(driverPtxVersion / 10) + "." +
                std::to_string(driverPtxVersion % 10) + ", but " + o.arch + " needs " +
                std::to_string(need / 10) + "." + std::to_string(need % 10) +
                ": update the NVIDIA driver");
  }
  o.ptxVersion = std::min(driverPtxVersion, kMaxPtx);
  while (!kPtxVersions.count(o.ptxVersion)) --o.ptxVersion; // e.g. 79 → 78
  return o;
}

std::vector<LoopKernel> distinctKernels(const std::vector<LoopKernel> &kernels,
                                        std::vector<int> &which) {
  std::vector<LoopKernel> out;
  std::map<std::string, int> seen; // a kernel's text without its name -> its index in out
  which.clear();
  for (const LoopKernel &k : kernels) {
    LoopKernel unnamed = k;
    unnamed.name.clear();
    auto [it, added] = seen.emplace(printKernel(unnamed), static_cast<int>(out.size()));
    if (added) out.push_back(k);
    which.push_back(it->second);
  }
  return out;
}

int lanesPerPoint(const LoopKernel &kernel, const PtxOptions &options) {
  const int ptx = options.ptxVersion ? options.ptxVersion : minPtxVersion(options.arch);
  return lanesFor(codegen::simplifyKernel(kernel), ptx);
}

int symbolSlots(const LoopKernel &k) {
  int32_t top = -1;
  auto see = [&](const SizeExpr &e) {
    for (int32_t s : e.syms) top = std::max(top, s);
  };
  for (const SizeExpr &e : k.domain) see(e);
  for (const KernelTensor &t : k.tensors) {
    for (const SizeExpr &e : t.strides) see(e);
    see(t.rowStride);
    see(t.rows);
  }
  return std::max(1, top + 1);
}

LaunchDims launchDims(int64_t outerPoints, int multiprocessors, int lanesPerPoint) {
  constexpr int64_t kBlock = 256;
  assert(lanesPerPoint > 0 && kBlock % lanesPerPoint == 0);
  const int64_t pointsPerBlock = kBlock / lanesPerPoint;
  int64_t blocks = std::max<int64_t>(1, (outerPoints + pointsPerBlock - 1) / pointsPerBlock);
  if (multiprocessors > 0) blocks = std::min<int64_t>(blocks, int64_t{32} * multiprocessors);
  blocks = std::min<int64_t>(blocks, 0x7fffffff); // gridDim.x limit
  LaunchDims d;
  d.grid = static_cast<unsigned>(blocks);
  d.block = static_cast<unsigned>(
      lanesPerPoint * std::min<int64_t>(pointsPerBlock, std::max<int64_t>(1, outerPoints)));
  return d;
}

PtxModule compilePtx(const std::vector<LoopKernel> &kernels, const std::string &moduleId,
                     const PtxOptions &options) {
  checkKernels(kernels);
  PtxModule out;
  out.arch = options.arch;
  out.ptxVersion = options.ptxVersion ? options.ptxVersion : minPtxVersion(options.arch);
  if (out.ptxVersion < minPtxVersion(options.arch) || !kPtxVersions.count(out.ptxVersion)) {
    throw Error("compilePtx: PTX ISA " + std::to_string(out.ptxVersion) + " cannot target " +
                options.arch + " (supported: " + std::to_string(minPtxVersion(options.arch)) +
                " to " + std::to_string(kMaxPtx) + ", as 10 * major + minor)");
  }
  std::unique_ptr<llvm::TargetMachine> tm = makeTargetMachine(out.arch, out.ptxVersion);

  std::string errors; // outlives the context whose handler appends to it
  llvm::LLVMContext ctx;
  ctx.setDiagnosticHandler(std::make_unique<CollectErrors>(errors));
  auto failIfErrors = [&](const char *step) {
    if (!errors.empty()) throw Error("compilePtx: " + std::string(step) + ": " + errors);
  };
  llvm::Module m(moduleId, ctx);
  m.setTargetTriple(kTriple);
  m.setDataLayout(tm->createDataLayout());
  m.addModuleFlag(llvm::Module::Override, "nvvm-reflect-ftz",
                  uint32_t{0}); // libdevice: keep denormals
  for (const LoopKernel &k : kernels) {
    int lanes = 1;
    auto outer = [&](llvm::IRBuilder<> &b, codegen::KernelBody &body, llvm::Function *fn) {
      lanes = lanesFor(body.kernel(), out.ptxVersion); // body.kernel() is simplified
      if (lanes == kWarp) {
        emitWarpStrideLoop(b, body, fn);
      } else {
        emitGridStrideLoop(b, body, fn);
      }
    };
    llvm::Function *fn = codegen::emitKernelFunction(m, k, outer);
    fn->setCallingConv(llvm::CallingConv::PTX_Kernel); // a `.entry`, launchable from the host
    // the address and size arrays travel in the launch's parameter space, by value
    auto byValue = [&](unsigned arg, llvm::Type *elem, uint64_t count) {
      fn->addParamAttr(arg,
                       llvm::Attribute::getWithByValType(ctx, llvm::ArrayType::get(elem, count)));
      fn->addParamAttr(arg, llvm::Attribute::getWithAlignment(ctx, llvm::Align(8)));
    };
    byValue(0, llvm::PointerType::get(ctx, 0), std::max<size_t>(1, k.tensors.size()));
    byValue(1, llvm::Type::getInt64Ty(ctx), static_cast<uint64_t>(symbolSlots(k)));
    out.entries.push_back(k.name);
    out.lanesPerPoint.push_back(lanes);
  }
  std::string problems;
  llvm::raw_string_ostream err(problems);
  if (llvm::verifyModule(m, &err)) {
    throw Error("compilePtx: internal error, invalid LLVM IR for '" + moduleId + "': " + problems);
  }
  optimize(*tm, m);
  // After O3, so that what it simplifies (pow(x, 2) → x * x) never reaches the library.
  if (std::vector<std::string> math = mapMathToLibdevice(m); !math.empty()) {
    try {
      linkLibdevice(m);
    } catch (const Error &e) {
      std::string names;
      for (const std::string &f : math) names += (names.empty() ? "" : ", ") + f;
      throw Error("compilePtx: '" + moduleId + "' needs " + names + ": " + e.what());
    }
    failIfErrors("linking libdevice");
    optimize(*tm, m);
    out.usesLibdevice = true;
  }
  checkSelfContained(m);
  if (options.wantLlvmIr) out.llvmIr = printModule(m);
  out.ptx = emitPtx(*tm, m);
  failIfErrors("generating PTX");
  return out;
}

} // namespace rcjit::cuda
