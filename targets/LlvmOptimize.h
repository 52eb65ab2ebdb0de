// The O3 pipeline both code generators run on a module (cpu: ORC, cuda: NVPTX).
#pragma once

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

} // namespace rcjit
