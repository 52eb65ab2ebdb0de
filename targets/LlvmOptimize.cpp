// optimizeModuleO3: analysis managers, library info, the default O3 module pipeline.
#include "targets/LlvmOptimize.h"

#include <llvm/Analysis/TargetLibraryInfo.h>
#include <llvm/IR/Module.h>
#include <llvm/Passes/PassBuilder.h>
#include <llvm/Target/TargetMachine.h>

namespace rcjit {

void optimizeModuleO3(llvm::TargetMachine &tm, llvm::Module &m,
                      const llvm::PipelineTuningOptions &pto,
                      const llvm::TargetLibraryInfoImpl *tlii) {
  llvm::LoopAnalysisManager lam;
  llvm::FunctionAnalysisManager fam;
  llvm::CGSCCAnalysisManager cgam;
  llvm::ModuleAnalysisManager mam;
  llvm::PassBuilder pb(&tm, pto); // for NVPTX it registers NVVMReflect (libdevice) and friends
  // Registered before the defaults, so the pipeline sees the vector mappings.
  if (tlii) fam.registerPass([&] { return llvm::TargetLibraryAnalysis(*tlii); });
  pb.registerModuleAnalyses(mam);
  pb.registerCGSCCAnalyses(cgam);
  pb.registerFunctionAnalyses(fam);
  pb.registerLoopAnalyses(lam);
  pb.crossRegisterProxies(lam, fam, cgam, mam);
  pb.buildPerModuleDefaultPipeline(llvm::OptimizationLevel::O3).run(m, mam);
}

} // namespace rcjit
