// The default pass order and the loop that runs a pass list.
#include "jit/Pipeline.h"

#include <mutex>

#include <rcjit/Passes.h>

#include "tracer/GraphIO.h"

#include <rcjit/Error.h>

#include "jit/passes/ConstantFold.h"
#include "jit/passes/Cse.h"
#include "jit/passes/Dce.h"
#include "targets/Target.h"

namespace rcjit {

namespace {
std::mutex &passesMutex() {
  static std::mutex mu;
  return mu;
}
std::vector<Pass> &userPasses() {
  static std::vector<Pass> passes;
  return passes;
}
// A copy, so a pipeline being built is not affected by later registrations.
std::vector<Pass> registeredPasses() {
  std::lock_guard<std::mutex> lock(passesMutex());
  return userPasses();
}
} // namespace

void register_graph_pass(std::string name, GraphPassFn fn) {
  if (!fn) throw Error("register_graph_pass: pass '" + name + "' has no function");
  std::lock_guard<std::mutex> lock(passesMutex());
  userPasses().push_back({std::move(name), std::move(fn)});
}

void clear_graph_passes() {
  std::lock_guard<std::mutex> lock(passesMutex());
  userPasses().clear();
}

std::string print_graph(const Graph &g) { return printGraph(g); }

PipelineOptions pipelineOptionsFor(Target t) {
  PipelineOptions o;
  o.decomposeOptions.splitLinearBias = targetInfo(t).splitLinearBias;
  o.decomposeOptions.smallMatmulMacs = smallMatmulMacsFor(t);
  return o;
}

std::vector<Pass> defaultPasses(const PipelineOptions &opts) {
  std::vector<Pass> passes;
  // decompose first: its scalars (eps, 1/sqrt(D)) then fold, and the casts and constants
  // it emits for each composite are merged by CSE.
  if (opts.decompose) {
    DecomposeOptions d = opts.decomposeOptions;
    passes.push_back({"decompose", [d](const Graph &g) { return decompose(g, d); }});
  }
  // fold before CSE: equal folded constants become mergeable.
  if (opts.constantFold) passes.push_back({"constant_fold", constantFold});
  if (opts.cse) passes.push_back({"cse", cse});
  // user passes see the canonical (decomposed, folded, deduplicated) graph
  for (Pass &p : registeredPasses()) passes.push_back(std::move(p));
  // DCE last: it removes what folding (the constants' operands) and decompose left unused.
  if (opts.dce) passes.push_back({"dce", dce});
  return passes;
}

Graph runPipeline(const Graph &g, const std::vector<Pass> &passes) {
  Graph cur = g;
  for (const Pass &p : passes) {
    try {
      cur = p.run(cur);
    } catch (const Error &e) {
      throw Error("pass " + p.name + ": " + e.what());
    }
  }
  return cur;
}

} // namespace rcjit
