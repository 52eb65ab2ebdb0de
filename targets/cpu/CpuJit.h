// CpuJit: LLVM ORC LLJIT for the host CPU; the only user of ORC in rcjit.
//
// In the spirit of LLVM's KaleidoscopeJIT: one small class that owns its ORC pieces. Each
// module is added to its own JITDylib (so kernel names never clash between modules and a
// cached object keeps its symbol names), then optimized (O3, loop and SLP vectorizers,
// libmvec mappings for vector exp/log/sin/cos/pow) and compiled for the host CPU (all its
// features, e.g. AVX-512) when first looked up. Every LLVM error becomes an rcjit::Error.
#pragma once
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

namespace llvm {
class LLVMContext;
class Module;
class ObjectCache;
class TargetMachine;
namespace orc {
class JITDylib;
class JITTargetMachineBuilder;
class LLJIT;
} // namespace orc
} // namespace llvm

namespace rcjit::cpu {

/// A JIT for the host CPU. Thread-safe: any number of threads may add modules, look up
/// symbols, optimize, print and remove modules at once (each compile uses its own
/// TargetMachine). Compiled code lives until its module is removed, or as long as the CpuJit.
class CpuJit {
public:
  /// Opaque handle of an added module (its JITDylib), valid until removeModule.
  using ModuleHandle = llvm::orc::JITDylib *;

  /// Sets up LLJIT for the host (O3 code generation) and makes the process's symbols (libm)
  /// and glibc's libmvec resolvable. `cpu` "" targets the host CPU with all its features;
  /// otherwise it is an LLVM CPU name (e.g. "x86-64-v3") whose features alone are used, for
  /// code that runs on any CPU of that level. Throws rcjit::Error.
  static std::unique_ptr<CpuJit> create(const std::string &cpu = "");
  ~CpuJit();
  CpuJit(const CpuJit &) = delete;
  CpuJit &operator=(const CpuJit &) = delete;

  /// Gives `m` the JIT's target triple and data layout (do this before building IR).
  void prepareModule(llvm::Module &m) const;
  /// A module flag: a module that has it is compiled by the fast tier's short pipeline
  /// (optimizeModuleQuick, cheap code generation) instead of O3 (jit/Tiered.h).
  static constexpr const char *kQuickFlag = "rcjit.quick";
  /// Runs the O3 pipeline on `m` in place. Throws rcjit::Error.
  /// `quick`: the fast tier's short pipeline instead (kQuickFlag).
  void optimize(llvm::Module &m, bool quick = false) const;
  /// Host assembly text of `m` (expected to be optimized already; `m` is left unchanged).
  std::string assembly(const llvm::Module &m) const;
  /// Adds `m`, which must use `ctx` and nothing else; it is optimized and compiled lazily,
  /// on the first lookup of one of its symbols. Takes ownership of both.
  ModuleHandle addModule(std::unique_ptr<llvm::Module> m, std::unique_ptr<llvm::LLVMContext> ctx);
  /// Address of the function `name` in the module `h`; compiles it if needed. Throws
  /// rcjit::Error when the symbol is missing or compiling fails.
  void *lookup(ModuleHandle h, const std::string &name);
  /// Frees module `h`: its machine code, its JITDylib and ORC's tables of its symbols. No
  /// function of it may run (or be running) afterwards. Never throws (a failed removal keeps
  /// the code, as if it had not been removed).
  void removeModule(ModuleHandle h) noexcept;
  /// Seconds this thread has spent in O3 and machine-code generation (object cache lookups
  /// included) since it started: a lookup's time minus its growth is linking and loading.
  static double codegenSecondsOnThisThread();
  /// Modules this thread's lookups took from the object cache instead of compiling.
  static int64_t cacheHitsOnThisThread();
  /// Plugs in a persistent object cache (keyed by the module identifier): modules compiled
  /// later are first looked up in it and, when compiled, stored in it. Not owned; nullptr
  /// turns caching off. The cache must be thread-safe.
  void setObjectCache(llvm::ObjectCache *cache) { cache_.store(cache); }
  /// Whether vectorized exp/log/sin/cos/pow calls resolve to glibc's libmvec.
  bool hasVectorMath() const { return libmvec_; }
  /// Whether the target has AVX-512 (then kernels should prefer 512-bit vectors).
  bool hasAvx512() const { return avx512_; }

private:
  class Compiler;
  CpuJit();
  std::unique_ptr<llvm::TargetMachine> makeTargetMachine(bool quick = false) const;
  void optimizeWith(llvm::TargetMachine &tm, llvm::Module &m) const;

  std::unique_ptr<llvm::orc::JITTargetMachineBuilder> jtmb_; // read-only after create()
  std::unique_ptr<llvm::orc::LLJIT> jit_;
  std::atomic<llvm::ObjectCache *> cache_{nullptr};
  std::atomic<uint64_t> nextDylib_{0};
  bool libmvec_ = false;
  bool avx512_ = false;
  bool avx2_ = false;
};

} // namespace rcjit::cpu
