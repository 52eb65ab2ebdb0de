// Compiles LoopKernels to PTX with LLVM's NVPTX back end. Free of LLVM and CUDA types.
//
// The loop body is the target-neutral one (targets/LoopCodegen.h), exactly as the CPU target
// builds it; this target adds only its outer loop, a grid-stride loop over outer points, and
// the kernel entry. Math that PTX has no instruction for (log, sin, cos, pow, and every f64
// transcendental) becomes calls into NVIDIA's libdevice, linked from the CUDA toolkit; f32
// exp, tanh and erf use the shared inline polynomials, as on the CPU.
//
// The kernel ABI (one `.entry` per LoopKernel, named as the kernel):
//   .entry name(.param .u64 ptrs, .param .u64 syms, .param .u64 begin, .param .u64 end)
//   ptrs: device address of an array of one device address per KernelTensor, in order;
//   syms: device address of the int64 symbolic sizes (may be 0 for a static kernel);
//   [begin, end): the outer points to compute (normally 0 and LoopKernel::outerSize).
// It is the CPU's KernelFn ABI, with the arrays in device memory. Thread (blockIdx.x *
// blockDim.x + threadIdx.x) computes outer points begin + t, begin + t + gridDim.x*blockDim.x,
// ...; any grid and block size is correct (launchDims() gives a good one). One thread
// computes each outer point, including its whole reduction over the inner dims: simple and
// correct, but a reduction with few outer points uses few threads (a warp-per-row reduction
// is future work).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "targets/LoopKernel.h"

namespace rcjit::cuda {

/// What PTX to generate.
struct PtxOptions {
  std::string arch = "sm_80"; // GPU architecture, "sm_XX" as LLVM 19 knows it (see knownArchs)
  int ptxVersion = 0;         // PTX ISA, 10 * major + minor (78 = PTX 7.8); 0: minPtxVersion(arch)
  bool wantLlvmIr = false;    // also return the optimized LLVM IR
};

/// The result of compilePtx.
struct PtxModule {
  std::string ptx;                  // the module's PTX text
  std::vector<std::string> entries; // the kernels' entry names, in order
  std::string arch;                 // the target it was generated for
  int ptxVersion = 0;               // the PTX ISA of its `.version` line
  bool usesLibdevice = false;       // whether libdevice functions were linked in
  std::string llvmIr;               // when asked for: the optimized module, before codegen
};

/// Verifies `kernels` (rcjit::Error for a malformed one or duplicate names) and builds them
/// into one PTX module named `moduleId`. Thread-safe (every call has its own LLVMContext and
/// TargetMachine); needs no GPU and no driver. Throws rcjit::Error on a bad arch or PTX
/// version, a missing libdevice (only when a kernel needs it), or an internal failure.
PtxModule compilePtx(const std::vector<LoopKernel> &kernels, const std::string &moduleId,
                     const PtxOptions &options = {});

/// The architectures LLVM 19's NVPTX back end can target, oldest first ("sm_50" ... "sm_90a").
const std::vector<std::string> &knownArchs();
/// The lowest PTX ISA version (10 * major + minor) that supports `arch`; rcjit::Error for an
/// arch not in knownArchs().
int minPtxVersion(const std::string &arch);
/// The newest PTX ISA version LLVM 19 emits (85: PTX 8.5).
int maxPtxVersion();

/// The PTX target for a device of compute capability major.minor whose driver JIT-compiles
/// PTX up to `driverPtxVersion` (cuda::driverPtxIsa): the newest arch LLVM knows that the
/// device runs (PTX for sm_90 runs on later GPUs through the driver's JIT; "a" variants are
/// never chosen, they do not carry forward) and PTX ISA min(driver's, LLVM's). rcjit::Error
/// when the device is older than every known arch or the driver too old for the arch.
PtxOptions ptxOptionsForDevice(int major, int minor, int driverPtxVersion);

/// A grid for `outerPoints` points of the grid-stride loop: blocks of 256 threads, at most
/// enough blocks to fill `multiprocessors` SMs 32 times over (0: no limit). Pure function.
struct LaunchDims {
  unsigned grid = 1;
  unsigned block = 1;
};
LaunchDims launchDims(int64_t outerPoints, int multiprocessors);

} // namespace rcjit::cuda
