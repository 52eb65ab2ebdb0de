// Math intrinsics and libm calls → libdevice calls; finding, loading and linking libdevice.
#include "targets/cuda/Libdevice.h"

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <set>

#include <llvm/Bitcode/BitcodeReader.h>
#include <llvm/IR/CallingConv.h>
#include <llvm/IR/Intrinsics.h>
#include <llvm/IR/Module.h>
#include <llvm/Linker/Linker.h>
#include <llvm/Support/Error.h>
#include <llvm/Support/MemoryBuffer.h>

#include <rcjit/Error.h>

#ifndef RCJIT_CUDA_ROOT
#define RCJIT_CUDA_ROOT "/usr/local/cuda"
#endif

namespace rcjit::cuda {

namespace {

constexpr const char *kLibdeviceFile = "/nvvm/libdevice/libdevice.10.bc";

// libdevice's name of a math intrinsic, without the "f" of its f32 form; nullptr when the
// intrinsic needs no library (NVPTX has an instruction for it).
const char *libdeviceBase(llvm::Intrinsic::ID id) {
  switch (id) {
  case llvm::Intrinsic::exp:
    return "exp";
  case llvm::Intrinsic::exp2:
    return "exp2";
  case llvm::Intrinsic::exp10:
    return "exp10";
  case llvm::Intrinsic::log:
    return "log";
  case llvm::Intrinsic::log2:
    return "log2";
  case llvm::Intrinsic::log10:
    return "log10";
  case llvm::Intrinsic::sin:
    return "sin";
  case llvm::Intrinsic::cos:
    return "cos";
  case llvm::Intrinsic::tan:
    return "tan";
  case llvm::Intrinsic::tanh:
    return "tanh";
  case llvm::Intrinsic::pow:
    return "pow";
  case llvm::Intrinsic::powi:
    return "powi";
  case llvm::Intrinsic::ldexp:
    return "ldexp";
  default:
    return nullptr;
  }
}

// The libdevice function a declaration `f` stands for, or "" when it is not a math function.
std::string libdeviceName(const llvm::Function &f) {
  if (f.getName().starts_with("__nv_") || f.getName() == "__nvvm_reflect") return "";
  if (!f.isIntrinsic()) return "__nv_" + f.getName().str(); // a libm call: erf, erff, ...
  const char *base = libdeviceBase(f.getIntrinsicID());
  llvm::Type *t = f.getReturnType();
  if (!base || !(t->isFloatTy() || t->isDoubleTy())) return "";
  return std::string("__nv_") + base + (t->isFloatTy() ? "f" : "");
}

struct LibdeviceFile {
  std::string path;
  std::unique_ptr<llvm::MemoryBuffer> bytes;
  std::string error;
};

// Read once per process; the buffer outlives every module lazily loaded from it.
const LibdeviceFile &libdeviceFile() {
  static const LibdeviceFile file = [] {
    LibdeviceFile f;
    f.path = libdevicePath();
    if (f.path.empty()) {
      f.error =
          "libdevice (libdevice.10.bc) not found: set RCJIT_LIBDEVICE to its path, or "
          "CUDA_HOME to the CUDA toolkit (looked in $CUDA_HOME, $CUDA_PATH and " RCJIT_CUDA_ROOT
          ")";
      return f;
    }
    auto buf = llvm::MemoryBuffer::getFile(f.path);
    if (!buf) {
      f.error = "cannot read libdevice at " + f.path + ": " + buf.getError().message();
      return f;
    }
    f.bytes = std::move(*buf);
    return f;
  }();
  return file;
}

} // namespace

std::string libdevicePath() {
  if (const char *p = std::getenv("RCJIT_LIBDEVICE"); p && *p) return p; // as given, even if bad
  std::vector<std::string> candidates;
  for (const char *var : {"CUDA_HOME", "CUDA_PATH"}) {
    if (const char *p = std::getenv(var); p && *p) {
      candidates.push_back(p + std::string(kLibdeviceFile));
    }
  }
  candidates.push_back(RCJIT_CUDA_ROOT + std::string(kLibdeviceFile));
  for (const std::string &c : candidates) {
    std::error_code ec;
    if (std::filesystem::is_regular_file(c, ec)) return c;
  }
  return "";
}

std::vector<std::string> mapMathToLibdevice(llvm::Module &m) {
  std::set<std::string> used;
  std::vector<llvm::Function *> decls;
  for (llvm::Function &f : m) {
    if (f.isDeclaration() && !f.use_empty()) decls.push_back(&f);
  }
  for (llvm::Function *f : decls) {
    std::string name = libdeviceName(*f);
    if (name.empty()) continue;
    llvm::FunctionCallee nv = m.getOrInsertFunction(name, f->getFunctionType());
    f->replaceAllUsesWith(nv.getCallee());
    f->eraseFromParent();
    used.insert(name);
  }
  return {used.begin(), used.end()};
}

void linkLibdevice(llvm::Module &m) {
  const LibdeviceFile &file = libdeviceFile();
  if (!file.bytes) throw Error(file.error);
  llvm::Expected<std::unique_ptr<llvm::Module>> lib =
      llvm::getLazyBitcodeModule(file.bytes->getMemBufferRef(), m.getContext());
  if (!lib) {
    throw Error("cannot load libdevice " + file.path + ": " + llvm::toString(lib.takeError()));
  }
  (*lib)->setTargetTriple(m.getTargetTriple()); // libdevice says nvptx64-nvidia-gpulibs
  (*lib)->setDataLayout(m.getDataLayout());
  if (llvm::Linker::linkModules(m, std::move(*lib), llvm::Linker::LinkOnlyNeeded)) {
    throw Error("linking libdevice " + file.path + " failed");
  }
  for (llvm::Function &f : m) {
    if (!f.isDeclaration() && f.getCallingConv() != llvm::CallingConv::PTX_Kernel) {
      f.setLinkage(llvm::GlobalValue::InternalLinkage);
    }
  }
  for (llvm::GlobalVariable &g : m.globals()) {
    if (!g.isDeclaration()) g.setLinkage(llvm::GlobalValue::InternalLinkage);
  }
}

} // namespace rcjit::cuda
