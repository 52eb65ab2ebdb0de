// compileProgram: the one place that picks a target's executor.
#include "targets/Executable.h"

#include "targets/cpu/CpuProgram.h"
#include "targets/cuda/CudaDriver.h"
#include "targets/cuda/CudaProgram.h"

namespace rcjit {

std::shared_ptr<Executable> compileProgram(Program p, const std::string &moduleId,
                                           const ExecutableOptions &o) {
  if (o.target == Target::cuda) {
    if (const std::string &why = cuda::unavailableReason(); !why.empty()) {
      throw Error("compile: Target::cuda needs an NVIDIA GPU: " + why);
    }
    cuda::CudaProgramOptions co;
    co.device = o.device;
    co.keepLlvmIr = o.keepLlvmIr;
    co.graphs = o.cudaGraphs;
    return cuda::CudaProgram::create(std::move(p), moduleId, co);
  }
  cpu::CpuProgramOptions co;
  co.keepLlvmIr = o.keepLlvmIr;
  co.keepAssembly = o.keepAssembly;
  return cpu::CpuProgram::create(std::move(p), moduleId, co);
}

} // namespace rcjit
