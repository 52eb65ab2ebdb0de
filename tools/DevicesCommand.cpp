// `rcjit devices`: one line per piece rcjit may use on this machine, each with its reason
// when it cannot be used. scripts/gpu_check.sh reads the `cuda:` line to decide whether its
// GPU steps run or are reported as skipped.
#include "tools/DevicesCommand.h"

#include <boost/program_options.hpp>

#include <rcjit/Cuda.h>

#include "targets/cpu/CpuKernels.h"
#include "targets/cuda/Cublas.h"
#include "targets/cuda/CudaDriver.h"
#include "targets/cuda/Libdevice.h"
#include "tools/Cli.h"
#include "tools/Flags.h"

namespace po = boost::program_options;

namespace rcjit::tools {

int devicesCommand(const std::vector<std::string> &args, std::ostream &out, std::ostream &) {
  po::options_description desc("rcjit devices: the CPU and GPUs rcjit can use here");
  bool requireCuda = false;
  desc.add_options()("help,h", "show this help")("require-cuda", po::bool_switch(&requireCuda),
                                                 "exit 1 when no CUDA GPU can be used");
  po::variables_map vm;
  if (!parseFlags(desc, args, vm, out)) return kOk;
  out << "cpu: " << hostCpuName() << ", generated code for " << cpu::cpuFeatures() << "\n";
  if (!cuda_available()) {
    out << "cuda: unavailable: " << cuda::unavailableReason() << "\n";
  } else {
    const cuda::DeviceInfo d = cuda::deviceInfo(0);
    out << "cuda: available: driver " << d.driverVersion / 1000 << "."
        << d.driverVersion % 1000 / 10 << " (" << cuda::driverLibraryName() << ", PTX ISA up to "
        << d.driverPtxVersion / 10 << "." << d.driverPtxVersion % 10 << ")\n";
    out << "gpu 0: " << d.name << ", " << d.arch << ", " << d.multiprocessors
        << " multiprocessors\n";
  }
  if (cuda::cublas()) {
    out << "cublas: " << cuda::cublasLibraryName() << ", version " << cuda::cublasVersion() << "\n";
  } else {
    out << "cublas: unavailable: " << cuda::cublasUnavailableReason() << "\n";
  }
  const std::string libdevice = cuda::libdevicePath();
  out << "libdevice: " << (libdevice.empty() ? "not found (set RCJIT_LIBDEVICE)" : libdevice)
      << "\n";
  return requireCuda && !cuda_available() ? kFailure : kOk;
}

} // namespace rcjit::tools
