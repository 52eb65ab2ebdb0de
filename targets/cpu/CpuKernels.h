// Compiles LoopKernels to host machine code: one LLVM module per call, JIT-compiled by the
// process-wide CpuJit. Free of LLVM types, so tests, benchmarks and jit/ can include it.
#pragma once
#include <string>
#include <vector>

#include "targets/LoopKernel.h"

namespace rcjit::cpu {

struct CpuCompileOptions {
  bool wantLlvmIr = false;   // fill CpuCompiledKernels::llvmIr (optimized IR)
  bool wantAssembly = false; // fill CpuCompiledKernels::assembly
  std::string name;          // what the module is for ("rcjit_f0_e1"): named in cache logs
};

/// The result of compileKernels. The functions stay valid for the life of the process.
struct CpuCompiledKernels {
  std::vector<KernelFn> functions; // one per kernel, in order
  std::string llvmIr;              // when asked for: the optimized module
  std::string assembly;            // when asked for: its host assembly
};

/// What besides the kernels' text shapes their machine code on this host, for cache keys:
/// LLVM version, target triple, CPU name and features, vector math library. Thread-safe.
std::string hostCodegenId();

/// Verifies `kernels` (rcjit::Error on a malformed one or duplicate names), builds them into
/// one LLVM module named `moduleId` (the object-cache key), optimizes it at O3 with the host's
/// vector ISA and compiles it through ORC. Each function runs outer points [begin, end) and
/// may be called from many threads at once on disjoint ranges. Thread-safe. Throws
/// rcjit::Error on any failure.
CpuCompiledKernels compileKernels(const std::vector<LoopKernel> &kernels,
                                  const std::string &moduleId,
                                  const CpuCompileOptions &options = {});

} // namespace rcjit::cpu
