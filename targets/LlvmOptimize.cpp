// optimizeModuleO3 (analysis managers, library info, the default O3 module pipeline) and the
// fast tier's short pipeline.
#include "targets/LlvmOptimize.h"

#include <llvm/Analysis/TargetLibraryInfo.h>
#include <llvm/IR/Module.h>
#include <llvm/Passes/PassBuilder.h>
#include <llvm/Target/TargetMachine.h>
#include <llvm/Transforms/InstCombine/InstCombine.h>
#include <llvm/Transforms/Scalar/EarlyCSE.h>
#include <llvm/Transforms/Scalar/LICM.h>
#include <llvm/Transforms/Scalar/LoopPassManager.h>
#include <llvm/Transforms/Scalar/LoopRotation.h>
#include <llvm/Transforms/Scalar/SROA.h>
#include <llvm/Transforms/Scalar/SimplifyCFG.h>
#include <llvm/Transforms/Vectorize/LoopVectorize.h>

#include "support/Env.h"

namespace rcjit {

namespace {

// Runs `inner` on the functions that carry kQuickVectorizeAttr and leaves the others alone.
struct OnMarkedFunctions : llvm::PassInfoMixin<OnMarkedFunctions> {
  llvm::FunctionPassManager inner;
  llvm::PreservedAnalyses run(llvm::Function &f, llvm::FunctionAnalysisManager &fam) {
    if (!f.hasFnAttribute(kQuickVectorizeAttr)) return llvm::PreservedAnalyses::all();
    return inner.run(f, fam);
  }
};

// The analysis managers a pipeline runs with, registered and cross-wired for `pb`; `tlii`
// (when given) is registered first, so the pipeline sees its vector mappings.
struct Analyses {
  llvm::LoopAnalysisManager lam;
  llvm::FunctionAnalysisManager fam;
  llvm::CGSCCAnalysisManager cgam;
  llvm::ModuleAnalysisManager mam;
  Analyses(llvm::PassBuilder &pb, const llvm::TargetLibraryInfoImpl *tlii) {
    if (tlii) fam.registerPass([tlii] { return llvm::TargetLibraryAnalysis(*tlii); });
    pb.registerModuleAnalyses(mam);
    pb.registerCGSCCAnalyses(cgam);
    pb.registerFunctionAnalyses(fam);
    pb.registerLoopAnalyses(lam);
    pb.crossRegisterProxies(lam, fam, cgam, mam);
  }
};

} // namespace

void optimizeModuleO3(llvm::TargetMachine &tm, llvm::Module &m,
                      const llvm::PipelineTuningOptions &pto,
                      const llvm::TargetLibraryInfoImpl *tlii) {
  llvm::PassBuilder pb(&tm, pto); // for NVPTX it registers NVVMReflect (libdevice) and friends
  Analyses a(pb, tlii);
  pb.buildPerModuleDefaultPipeline(llvm::OptimizationLevel::O3).run(m, a.mam);
}

void optimizeModuleQuick(llvm::TargetMachine &tm, llvm::Module &m,
                         const llvm::TargetLibraryInfoImpl *tlii) {
  static const int choice = envChoice("RCJIT_QUICK_PIPELINE", {"passes", "o1", "o0"}, 0);
  if (choice == 2) return;
  llvm::PipelineTuningOptions pto;
  pto.LoopVectorization = false;
  pto.SLPVectorization = false;
  pto.LoopUnrolling = false;
  llvm::PassBuilder pb(&tm, pto);
  Analyses a(pb, tlii);
  if (choice == 1) {
    pb.buildPerModuleDefaultPipeline(llvm::OptimizationLevel::O1).run(m, a.mam);
    return;
  }
  llvm::FunctionPassManager fpm;
  fpm.addPass(llvm::SROAPass(llvm::SROAOptions::ModifyCFG));
  fpm.addPass(llvm::EarlyCSEPass());
  fpm.addPass(llvm::InstCombinePass());
  fpm.addPass(llvm::SimplifyCFGPass());
  llvm::LoopPassManager lpm;
  lpm.addPass(llvm::LoopRotatePass());
  lpm.addPass(llvm::LICMPass(llvm::LICMOptions()));
  fpm.addPass(llvm::createFunctionToLoopPassAdaptor(std::move(lpm), /*UseMemorySSA=*/true));
  fpm.addPass(llvm::InstCombinePass());
  // the kernels whose run time in the fast tier pays for it: the loop vectorizer (no
  // interleaving, no unrolling), then a clean-up of what it leaves
  OnMarkedFunctions vec;
  vec.inner.addPass(llvm::LoopVectorizePass(llvm::LoopVectorizeOptions(
      /*InterleaveOnlyWhenForced=*/true, /*VectorizeOnlyWhenForced=*/false)));
  vec.inner.addPass(llvm::InstCombinePass());
  vec.inner.addPass(llvm::SimplifyCFGPass());
  fpm.addPass(std::move(vec));
  llvm::ModulePassManager mpm;
  mpm.addPass(llvm::createModuleToFunctionPassAdaptor(std::move(fpm)));
  mpm.run(m, a.mam);
}

llvm::CodeGenOptLevel quickCodegenLevel() {
  static const int choice = envChoice("RCJIT_QUICK_CODEGEN", {"none", "less"}, 0);
  return choice == 1 ? llvm::CodeGenOptLevel::Less : llvm::CodeGenOptLevel::None;
}

} // namespace rcjit
