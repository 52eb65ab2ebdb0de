// The targets as data: cpu and cuda, each with its options and its one compile hook.
#include "targets/Target.h"

#include <limits>

#include "support/Env.h"
#include "targets/cpu/CpuProgram.h"
#include "targets/cuda/CudaDriver.h"
#include "targets/cuda/CudaProgram.h"

namespace rcjit {

namespace {

std::string cpuUnsupported(const Program &, const Step &) { return ""; }

std::shared_ptr<Executable> compileCpu(Program p, const std::string &moduleId,
                                       const ExecutableOptions &o) {
  cpu::CpuProgramOptions co;
  co.keepLlvmIr = o.keepLlvmIr;
  co.keepAssembly = o.keepAssembly;
  co.autotune = o.autotune && !o.quick;
  co.quick = o.quick;
  co.runsPerCall = o.runsPerCall;
  return cpu::CpuProgram::create(std::move(p), moduleId, co);
}

std::shared_ptr<Executable> compileCuda(Program p, const std::string &moduleId,
                                        const ExecutableOptions &o) {
  if (const std::string &why = cuda::unavailableReason(); !why.empty()) {
    throw Error("compile: Target::cuda needs an NVIDIA GPU: " + why);
  }
  cuda::CudaProgramOptions co;
  co.device = o.device;
  co.keepLlvmIr = o.keepLlvmIr;
  co.graphs = o.cudaGraphs;
  return cuda::CudaProgram::create(std::move(p), moduleId, co);
}

TargetInfo makeCpu() {
  TargetInfo t;
  t.target = Target::cpu;
  t.name = "cpu";
  t.splitLinearBias = false;           // oneDNN adds the bias inside the GEMM
  t.lower.fuseLibraryEpilogues = true; // oneDNN eltwise post-ops
  t.unsupportedStep = cpuUnsupported;
  t.compile = compileCpu;
  return t;
}

TargetInfo makeCuda() {
  TargetInfo t;
  t.target = Target::cuda;
  t.name = "cuda";
  t.splitLinearBias = true;             // cuBLAS gets no epilogue: the bias joins a kernel
  t.hostDataChecks = false;             // no host steps (a bad target: a NaN loss)
  t.batchedGemm = true;                 // cuBLAS: one batch stride per operand, no integers
  t.lower.fuseLibraryEpilogues = false; // so do activations
  t.lower.indexKernels = true;          // embedding: gather and scatter kernels
  t.lower.batchedGemm = true;           // copies operands that cuBLAS cannot stride over
  t.unsupportedStep = cuda::unsupportedStep;
  t.compile = compileCuda;
  return t;
}

} // namespace

const TargetInfo &targetInfo(Target t) {
  static const TargetInfo cpu = makeCpu(), cuda = makeCuda();
  switch (t) {
  case Target::cpu:
    return cpu;
  case Target::cuda:
    return cuda;
  }
  throw Error("targetInfo: unknown target " + std::to_string(static_cast<int>(t)));
}

LowerOptions lowerOptionsFor(Target t) { return targetInfo(t).lower; }

int64_t smallMatmulMacsFor(Target t) {
  if (t != Target::cpu) return 0;
  switch (envChoice("RCJIT_MATMUL_KERNELS", {"never", "small", "always"}, 1,
                    "generated kernels for no matmul, the small ones, or every one")) {
  case 0:
    return 0;
  case 2:
    return std::numeric_limits<int64_t>::max();
  default:
    return kCpuSmallMatmulMacs;
  }
}

std::shared_ptr<Executable> compileProgram(Program p, const std::string &moduleId,
                                           const ExecutableOptions &o) {
  return targetInfo(o.target).compile(std::move(p), moduleId, o);
}

} // namespace rcjit
