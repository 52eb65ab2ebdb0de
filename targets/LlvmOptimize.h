// The O3 pipeline both code generators run on a module (cpu: ORC, cuda: NVPTX).
#pragma once

#include <llvm/Support/CodeGen.h>

namespace llvm {
class Module;
class PipelineTuningOptions;
class TargetLibraryInfoImpl;
class TargetMachine;
} // namespace llvm

namespace rcjit {

/// Runs LLVM's per-module O3 pipeline on `m` for `tm`, with tuning `pto`; `tlii` (when
/// given) is the library info the vectorizer sees (the CPU's libmvec mappings).
void optimizeModuleO3(llvm::TargetMachine &tm, llvm::Module &m,
                      const llvm::PipelineTuningOptions &pto,
                      const llvm::TargetLibraryInfoImpl *tlii = nullptr);

/// A function attribute: the fast tier's pipeline runs the loop vectorizer on a function
/// that has it (a kernel whose run time in the fast tier outweighs the vectorizer's compile
/// time: cpu/KernelCompile.cpp decides).
inline constexpr const char *kQuickVectorizeAttr = "rcjit-quick-vectorize";

/// The fast tier's pipeline (jit/Tiered.h): what makes loop kernels cheap to compile and
/// not slow to run: SROA (allocas to registers), EarlyCSE, InstCombine, SimplifyCFG, LICM and
/// loop rotation; no unrolling, and the loop vectorizer (without interleaving) only on the
/// functions marked kQuickVectorizeAttr. Set RCJIT_QUICK_PIPELINE=o1 to run
/// LLVM's O1 instead, o0 to run nothing (measurements, docs/first-call.md).
void optimizeModuleQuick(llvm::TargetMachine &tm, llvm::Module &m,
                         const llvm::TargetLibraryInfoImpl *tlii = nullptr);

/// The fast tier's code-generation level: CodeGenOptLevel::None (FastISel and the fast
/// register allocator), which generates our kernels' machine code in a fifth to a seventh
/// of the time `Less` takes, for code that runs 1.3-1.7x longer until the optimized tier
/// replaces it (docs/first-call.md, "Cheaper LLVM"); RCJIT_QUICK_CODEGEN=less chooses `Less`.
llvm::CodeGenOptLevel quickCodegenLevel();

} // namespace rcjit
