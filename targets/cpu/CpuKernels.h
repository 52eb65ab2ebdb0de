// Compiles LoopKernels to host machine code: one LLVM module per call, JIT-compiled by the
// process-wide CpuJit. Free of LLVM types, so tests, benchmarks and jit/ can include it.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "targets/LoopKernel.h"

namespace rcjit::cpu {

struct CpuCompileOptions {
  bool wantLlvmIr = false;          // fill CpuCompiledKernels::llvmIr (optimized IR)
  bool wantAssembly = false;        // fill CpuCompiledKernels::assembly
  std::string name;                 // what the module is for ("rcjit_f0_e1"): named in cache logs
  bool quick = false;               // the cheap LLVM pipeline (CpuJit::kQuickFlag); the module id
                                    // (the cache key) must say so too
  std::vector<bool> quickVectorize; // with `quick`: per kernel, whether the loop vectorizer
                                    // runs on it (kQuickVectorizeAttr; the key says so too)
  /// Whether kernel `i` is compiled by the fast tier's pipeline with the loop vectorizer.
  bool vectorizes(size_t i) const {
    return quick && i < quickVectorize.size() && quickVectorize[i];
  }
};

/// The result of compileKernels. The functions stay valid while a copy of `code` lives.
struct CpuCompiledKernels {
  std::vector<KernelFn> functions; // one per kernel, in order
  /// Owns the module's machine code: the last copy dropped frees it (CpuJit::removeModule).
  std::shared_ptr<const void> code;
  std::string llvmIr;     // when asked for: the optimized module
  std::string assembly;   // when asked for: its host assembly
  bool fromCache = false; // the module's object came from the object cache
};

/// What besides the kernels' text shapes their machine code on this host, for cache keys:
/// LLVM version, target triple, the CPU feature set (cpuFeatures(): the host CPU's name and
/// features for "native", else the level), vector math library. Thread-safe.
std::string hostCodegenId();

/// The CPU feature set generated code targets: "native" (the host CPU and all its
/// features; the default), or a portable level whose code runs on every CPU that has it:
/// "x86-64-v2" (SSE4.2), "avx2" (x86-64-v3: AVX2, FMA, BMI2) or "avx512" (x86-64-v4:
/// AVX-512 F/BW/CD/DQ/VL). Initially from the environment variable RCJIT_CPU_FEATURES.
/// Throws rcjit::Error when that names an unknown set or one this CPU lacks. Thread-safe.
std::string cpuFeatures();
/// Targets `name` (as above; "x86-64-v3" and "x86-64-v4" are accepted too) for modules
/// compiled from now on; already compiled code stays as it is. For tests and tools: kernel
/// memos and cache keys include the set, but a process should normally keep one set.
/// Throws rcjit::Error for an unknown set or one this CPU lacks. Thread-safe.
void setCpuFeatures(const std::string &name);

/// Verifies `kernels` (rcjit::Error on a malformed one or duplicate names), builds them into
/// one LLVM module named `moduleId` (the object-cache key), optimizes it at O3 with the host's
/// vector ISA and compiles it through ORC. Each function runs outer points [begin, end) and
/// may be called from many threads at once on disjoint ranges. Thread-safe. Throws
/// rcjit::Error on any failure.
CpuCompiledKernels compileKernels(const std::vector<LoopKernel> &kernels,
                                  const std::string &moduleId,
                                  const CpuCompileOptions &options = {});

} // namespace rcjit::cpu
