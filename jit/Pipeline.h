// The graph pass pipeline: an ordered list of named Graph -> Graph passes, run in turn.
//
// Why: the pass list is data, so a user can insert a pass of their own (as DeepSpeed's
// DeepCompile schedules its passes) while the default order stays readable on one screen
// (defaultPasses, one comment per ordering constraint). Passes keep Graph::regions
// remapped to the rewritten nodes, but a region may become empty or lose its meaning
// (CSE can merge nodes across regions): regional compilation extracts regions before
// optimizing them, so nothing downstream of the pipeline relies on them.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <rcjit/Compile.h>
#include <rcjit/Passes.h>

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
  bool embeddingGradSum = true; // jit/passes/EmbeddingGradSum.h
  bool linearCeFold = true;     // the fused LM head's loss from its gradient op (LinearCeFold.h)
  bool remat = true;            // recompute cheap values next to late uses (jit/passes/Remat.h)
  bool dce = true;
};

/// The default options for a target (TargetInfo): cuda also splits a linear's bias off its
/// cuBLAS call.
PipelineOptions pipelineOptionsFor(Target t);

/// The pass schedule step a compile on this thread is under: set by the compiled function
/// that compiles (ScheduleScope), read by every compileGraph it makes (forward, backward,
/// stages), so each graph of the function runs the scheduled passes with its own context.
struct ActiveSchedule {
  std::string function; // the compiled function's label
  int64_t step = 0;     // the call that compiles
  std::vector<std::string> passes;
  int64_t memoryBudget = 0;
  std::vector<Tensor> inputs; // the compiling call's program inputs (args, then captured)
};

/// Makes `a` the active schedule of this thread until destroyed (null: none).
class ScheduleScope {
public:
  explicit ScheduleScope(const ActiveSchedule *a);
  ~ScheduleScope();
  ScheduleScope(const ScheduleScope &) = delete;
  ScheduleScope &operator=(const ScheduleScope &) = delete;

private:
  const ActiveSchedule *saved_;
};

/// The active schedule's passes for the graph labelled `label` (its PassContext names the
/// graph; "... backward" marks a backward half). Empty without an active schedule.
/// `sharding`: what is sharded among the graph's inputs (PassContext::sharding), or null.
std::vector<Pass> scheduledPasses(const std::string &label,
                                  const ShardingState *sharding = nullptr);

/// "" without an active schedule, else "passes:a,b/": process-wide tables of compiled
/// pieces keyed by a graph before its passes (regional stages) put it in their keys.
std::string scheduleKey();

/// Whether a pass from outside the pipeline will see the graphs compiled now: a registered
/// graph pass or the active schedule's.
bool outsidePassesActive();

/// Throws rcjit::Error naming the first of `names` that is not a registered scheduled pass.
void checkScheduledPasses(const std::vector<std::string> &names, const std::string &who);

/// decompose, constant_fold, cse, the registered graph passes, the active schedule's passes
/// (for the graph labelled `label`), remat, dce (those enabled in `opts`), in that order.
std::vector<Pass> defaultPasses(const PipelineOptions &opts = {}, const std::string &label = "",
                                const ShardingState *sharding = nullptr);

/// Runs `passes` in order on `g`. A pass that throws rcjit::Error is reported as
/// "pass <name>: <message>". Thread-safe when the passes are.
Graph runPipeline(const Graph &g, const std::vector<Pass> &passes);

} // namespace rcjit
