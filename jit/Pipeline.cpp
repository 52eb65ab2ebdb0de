// The default pass order and the loop that runs a pass list.
#include "jit/Pipeline.h"

#include <rcjit/Error.h>

#include "jit/passes/ConstantFold.h"
#include "jit/passes/Cse.h"
#include "jit/passes/Dce.h"

namespace rcjit {

std::vector<Pass> defaultPasses(const PipelineOptions& opts) {
  std::vector<Pass> passes;
  // decompose first: its scalars (eps, 1/sqrt(D)) then fold, and the casts and constants
  // it emits for each composite are merged by CSE.
  if (opts.decompose) {
    DecomposeOptions d = opts.decomposeOptions;
    passes.push_back({"decompose", [d](const Graph& g) { return decompose(g, d); }});
  }
  // fold before CSE: equal folded constants become mergeable.
  if (opts.constantFold) passes.push_back({"constant_fold", constantFold});
  if (opts.cse) passes.push_back({"cse", cse});
  // DCE last: it removes what folding (the constants' operands) and decompose left unused.
  if (opts.dce) passes.push_back({"dce", dce});
  return passes;
}

Graph runPipeline(const Graph& g, const std::vector<Pass>& passes) {
  Graph cur = g;
  for (const Pass& p : passes) {
    try {
      cur = p.run(cur);
    } catch (const Error& e) {
      throw Error("pass " + p.name + ": " + e.what());
    }
  }
  return cur;
}

}  // namespace rcjit
