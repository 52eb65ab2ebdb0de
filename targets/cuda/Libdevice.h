// GPU math for the NVPTX target: calls PTX has no instruction for become libdevice calls.
//
// Why: NVPTX lowers llvm.log/sin/cos/pow/tanh/exp (and every f64 transcendental) to calls of
// libm functions that do not exist on the GPU, which ptxas rejects. NVIDIA's libdevice
// (nvvm/libdevice/libdevice.10.bc in the CUDA toolkit) defines `__nv_logf`, `__nv_erf`, ...,
// the implementations CUDA C++ itself uses. Internal to targets/cuda.
#pragma once
#include <string>
#include <vector>

namespace llvm {
class Module;
} // namespace llvm

namespace rcjit::cuda {

/// Rewrites every call in `m` to a scalar f32/f64 math intrinsic (llvm.exp, llvm.log,
/// llvm.sin, llvm.pow, ...) or to a libm function (erf, erff, ...) into a call to its
/// libdevice equivalent, declared in `m`. Returns the libdevice names now called (empty when
/// `m` needed none).
std::vector<std::string> mapMathToLibdevice(llvm::Module &m);

/// Links the libdevice functions `m` calls into `m` (only those) and gives every function
/// and global that is not a kernel entry internal linkage, so the optimizer inlines and
/// drops them. libdevice is read once per process, at the first call (thread-safe). Throws
/// rcjit::Error naming where it looked when libdevice is not found.
void linkLibdevice(llvm::Module &m);

/// Where libdevice is read from: $RCJIT_LIBDEVICE, else $CUDA_HOME or $CUDA_PATH's
/// nvvm/libdevice/libdevice.10.bc, else the toolkit rcjit was built with; the first that
/// exists ("" when none does).
std::string libdevicePath();

} // namespace rcjit::cuda
