// The graph pass pipeline: an ordered list of named Graph -> Graph passes, run in turn.
//
// Why: the pass list is data, so a user can insert a pass of their own (as DeepSpeed's
// DeepCompile schedules its passes) while the default order stays readable on one screen
// (defaultPasses, one comment per ordering constraint). Passes keep Graph::regions
// remapped to the rewritten nodes, but a region may become empty or lose its meaning
// (CSE can merge nodes across regions): regional compilation extracts regions before
// optimizing them, so nothing downstream of the pipeline relies on them.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include <rcjit/Compile.h>

#include "jit/passes/Decompose.h"
#include "tracer/Graph.h"

namespace rcjit {

/// A named pass. `run` must be pure (return a new graph computing the same outputs from
/// the same inputs) and should return its input unchanged when it did nothing.
struct Pass {
  std::string name;
  std::function<Graph(const Graph &)> run;
};

/// Which of the default passes run, and their options.
struct PipelineOptions {
  bool decompose = true;
  DecomposeOptions decomposeOptions;
  bool constantFold = true;
  bool cse = true;
  bool dce = true;
};

/// The default options for a target (TargetInfo): cuda also splits a linear's bias off its
/// cuBLAS call.
PipelineOptions pipelineOptionsFor(Target t);

/// decompose, constant_fold, cse, dce (those enabled in `opts`), in that order.
std::vector<Pass> defaultPasses(const PipelineOptions &opts = {});

/// Runs `passes` in order on `g`. A pass that throws rcjit::Error is reported as
/// "pass <name>: <message>". Thread-safe when the passes are.
Graph runPipeline(const Graph &g, const std::vector<Pass> &passes);

} // namespace rcjit
