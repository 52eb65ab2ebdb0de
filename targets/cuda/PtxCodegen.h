// Compiles LoopKernels to PTX with LLVM's NVPTX back end. Free of LLVM and CUDA types.
//
// The loop body is the target-neutral one (targets/LoopCodegen.h), as the CPU target builds
// it; this target adds only its outer loop over outer points, the kernel entry and, for
// reductions, the warp shuffle that combines lanes' partial results (a codegen::LaneSplit). Math
// that PTX has no instruction for (log, sin, cos, pow, and every f64 transcendental) becomes calls
// into NVIDIA's libdevice, linked from the CUDA toolkit; f32 exp, tanh and erf use the shared
// inline polynomials, as on the CPU.
//
// The kernel ABI (one `.entry` per LoopKernel, named as the kernel):
//   .entry name(.param .align 8 .b8 ptrs[8 * T], .param .align 8 .b8 syms[8 * symbolSlots],
//               .param .u64 begin, .param .u64 end)
//   ptrs: by value, one device address per KernelTensor (T of them, at least 1), in order;
//   syms: by value, the int64 symbolic sizes (symbolSlots(kernel) of them, at least 1);
//   [begin, end): the outer points to compute (normally 0 and LoopKernel::outerSize).
// It is the CPU's KernelFn ABI with the two arrays passed by value: cuLaunchKernel's
// kernelParams[0] and [1] point at host arrays of that many 8-byte values, which the launch
// copies, so nothing is uploaded per call and a CUDA graph captures the whole call. How the grid's
// threads share the outer points is PtxModule::lanesPerPoint of the entry:
//   1 (elementwise kernels, no inner dims): a grid-stride loop; thread t = blockIdx.x *
//     blockDim.x + threadIdx.x computes outer points begin + t, + gridDim.x * blockDim.x, ...;
//     any grid and block size is correct.
//   32 (kernels with inner dims: reductions, and the passes after them): a warp-stride loop;
//     warp w = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32 computes outer points
//     begin + w, + gridDim.x * blockDim.x / 32, ..., its 32 lanes taking the flattened inner
//     positions lane, lane + 32, ... of every pass; partial reductions are combined with
//     shfl.sync.bfly so that every lane holds the totals (which later passes use). Inner-level
//     stores are made by the lane that owns the position, outer-level ones by lane 0. Any
//     grid is correct; blockDim.x must be a multiple of 32 (a kernel launched otherwise traps).
//     Needs PTX ISA 6.0 (shfl.sync): for an older ISA every entry is lanesPerPoint 1.
// launchDims() gives a good grid for either. Results are the CPU's: argmax keeps the first
// index of the maximum (of the first NaN); float sums accumulate in f64 as there, but in
// another order, so their last bits may differ.
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
  std::vector<int> lanesPerPoint;   // per entry (aligned with entries): threads per outer point,
                                    // 1 or 32 (see the ABI above); give it to launchDims
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

/// The distinct kernels of `kernels` (equal but for their names: a model's repeated layers
/// make the same kernels once per layer), in first-seen order with their first names, and in
/// `which` (one per kernel) the index of its distinct one. A module needs only these, so
/// NVPTX and the driver's JIT compile gpt2's 12 layers' kernels once. Pure.
std::vector<LoopKernel> distinctKernels(const std::vector<LoopKernel> &kernels,
                                        std::vector<int> &which);

/// The PtxModule::lanesPerPoint that compilePtx(..., options) gives `kernel` (1 or 32), for a
/// caller that kept only the PTX text. rcjit::Error for an arch not in knownArchs(). Pure.
int lanesPerPoint(const LoopKernel &kernel, const PtxOptions &options = {});

/// The int64 size slots an entry of `kernel` takes by value: one more than the highest symbol
/// index it uses, at least 1 (a host passes that many, or more: the launch copies exactly
/// this many). Pure.
int symbolSlots(const LoopKernel &kernel);

/// A grid for `outerPoints` points of an entry whose PtxModule::lanesPerPoint is
/// `lanesPerPoint` (1 or 32; a divisor of 256): blocks of up to 256 threads (256 / lanes
/// points; smaller when there are fewer points), at most enough blocks to fill
/// `multiprocessors` SMs 32 times over (0: no limit); the stride loops cover the rest. Pure
/// function.
struct LaunchDims {
  unsigned grid = 1;
  unsigned block = 1;
};
LaunchDims launchDims(int64_t outerPoints, int multiprocessors, int lanesPerPoint = 1);

} // namespace rcjit::cuda
