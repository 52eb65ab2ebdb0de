// What the compile path needs from a target, as data plus one compile hook.
//
// The pipeline (jit/CompileGraph) is the same for every target; a target only says which
// pass and lowering options it wants, which program steps it can run, and how it turns a
// lowered Program into an Executable. cpu: oneDNN library calls with fused post-ops, ORC
// LLJIT. cuda: cuBLAS GEMMs without epilogues (a linear's bias is split off so it fuses
// into the next kernel), PTX loaded through the CUDA driver.
#pragma once
#include <memory>
#include <string>

#include <rcjit/Compile.h>

#include "targets/Executable.h"
#include "targets/Lower.h"
#include "targets/Program.h"

namespace rcjit {

struct TargetInfo {
  Target target = Target::cpu;
  const char *name = "cpu";
  bool splitLinearBias = false; // decompose a linear's bias into its own add
  bool hostDataChecks = true;   // runs check_target as a host step (else decompose drops it)
  bool batchedGemm = false;     // a library matmul is one batched GEMM (DecomposeOptions)
  LowerOptions lower;
  /// "" when the target can run step `s` of `p`, else why not (naming the step).
  std::string (*unsupportedStep)(const Program &p, const Step &s) = nullptr;
  /// Compiles a lowered program; throws rcjit::Error when the target cannot be used (for
  /// cuda: no driver or GPU, with the reason).
  std::shared_ptr<Executable> (*compile)(Program p, const std::string &moduleId,
                                         const ExecutableOptions &o) = nullptr;
};

/// The description of `t`. Thread-safe (immutable data).
const TargetInfo &targetInfo(Target t);

/// targetInfo(t).lower.
LowerOptions lowerOptionsFor(Target t);

/// The cost model of generated matmul kernels on target `t`: a linear or matmul of at most
/// this many multiply-adds is decomposed into a product and a sum that the code generator
/// builds into one kernel with its epilogue, instead of a library call (0: never). On the
/// CPU the environment variable RCJIT_MATMUL_KERNELS, read at each compile, overrides the
/// default (kCpuSmallMatmulMacs): `never`, `small` (the default) or `always` (every static
/// floating-point matmul); cuda keeps its GEMMs library calls. Throws rcjit::Error for
/// another value. Thread-safe.
int64_t smallMatmulMacsFor(Target t);

/// The CPU's default threshold. Measured (docs/performance.md, "Small matmuls as generated
/// kernels"): toy64's layers up to 4 x 128 rows (51 200 multiply-adds each) run faster
/// generated, on one thread and on two; larger products were not measured against oneDNN, so
/// the default stops here and max_autotune tries up to 2^22 on the real shapes.
constexpr int64_t kCpuSmallMatmulMacs = int64_t{1} << 16;

} // namespace rcjit
