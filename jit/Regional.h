// Regional compilation: each repeated region (a module held in a ModuleList, or an
// explicit rcjit::region) is compiled on its own and reused for every identical copy; the
// glue between regions is compiled too.
//
// A traced graph is cut into stages in node order: glue segments and selected regions.
// Each stage is extracted as its own graph (extractRegion: parameters stay inputs, never
// constants), keyed by its canonical hash plus the layouts of its inputs, and compiled
// once per key in a process-wide table; 64 identical layers are one compile and 63 hits.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include <rcjit/Passes.h>
#include <rcjit/Tensor.h>

#include "jit/autograd/CompiledTraining.h"
#include "targets/Executable.h"
#include "tracer/Graph.h"

namespace rcjit {

/// One stage: a compiled program and where its inputs and outputs live in the traced graph.
struct RegionalStage {
  std::string name; // region name, or "glue"
  bool region = false;
  std::shared_ptr<Executable> program;    // an inference stage
  std::shared_ptr<TrainingPlan> training; // a training stage: a forward and a backward
  std::vector<int> inputs;                // graph node ids, in the program's input order
  std::vector<int> outputs;               // graph node ids of the program's outputs
  bool reused = false;                    // the program came from an earlier identical stage
  bool backwardAtBuild = false;           // a training stage's backward was compiled (or
                                          // reused) with the plan, not lazily
  // run()'s slots of `inputs` and `outputs` (see RegionalPlan::assignSlots), and the
  // stage-output slots read for the last time by this stage (or never read), which run()
  // lets go of once this stage has run
  std::vector<int> inputSlots, outputSlots, lastUseSlots;
  // an inference stage's (output, input) pairs whose output run() asks the program to write
  // over that input's storage (Executable::runInto): an input read by no later stage, made
  // by an earlier one, of the output's dtype and shape; applied when the call holds it alone
  std::vector<std::pair<int, int>> into;
};

/// A function compiled region by region. Immutable; run() is thread-safe.
struct RegionalPlan {
  std::vector<RegionalStage> stages;
  std::vector<int> graphInputs; // node id of program input i (args then captured)
  std::vector<int> graphOutputs;
  int numNodes = 0;
  int compiled = 0; // programs compiled now (a training stage's forward, and its backward
                    // where compiled with the plan; a lazy one counts once it exists)
  int reused = 0;   // programs served by an already compiled identical stage
  // the stages' new loop kernels, compiled together once every stage was planned (CPU:
  // cpu::KernelBatch; a stage's own compile time leaves them out), and how long that took
  size_t batchedKernels = 0;
  double batchSeconds = 0;
  // run()'s tensors by slot, not by node id: the program inputs first, then the stages'
  // outputs (a call touches these, not every node of the graph)
  int numSlots = 0;
  std::vector<int> graphOutputSlots;

  /// Numbers the slots once the stages of `g` are known.
  void assignSlots(const Graph &g);
  std::vector<Tensor> run(const Tensor *const *inputs, size_t n) const;
  std::string print() const;
};

/// The regions of `g` compiled on their own: outermost regions that are ModuleList
/// elements or explicit rcjit::region calls.
std::vector<int> selectRegions(const Graph &g);

/// The same function traced at other values of its symbolic sizes (see jit/Dynamic.h).
struct RegionalProbe {
  Graph graph;                     // the raw trace: same structure as the main one
  std::vector<Shape> inputStrides; // of its program inputs
  std::vector<int64_t> syms;       // the symbol values it was traced at
};

/// Regional training: the stages whose inputs need a gradient compile a forward and a
/// backward each (TrainingPlan), and their outputs carry the autograd node that chains the
/// stages' backwards. An input of a stage needs a gradient when it is a program input that
/// requires one, or a floating value computed from one.
struct RegionalTraining {
  std::vector<bool> wantGrad; // per program input of the graph (args then captured)
  std::vector<Tensor> inputs; // the call's program inputs (joint traces read their shapes)
  std::string label;          // "function 3 entry 0": stages add " stage 2 (layers.0)"
};

/// Builds the plan for `g` whose program inputs (args then captured) have `inputStrides`.
/// Each stage goes through the compile path (jit/CompileGraph.h) for `exec.target`;
/// `idPrefix` names the stage modules. With `probes` (traces of
/// the same function at other symbol values; `syms` the values of `g`, `ranges` the
/// symbols' ranges), every stage is a symbolic program whose sizes it reads from its own
/// inputs. With `training`, stages train (see RegionalTraining). Throws rcjit::Error (also
/// when a stage cannot be made symbolic, saying why). With `sharding` (ZeRO-3: sharded
/// parameters among the program inputs, which the call binds as their shards), each stage is
/// told which of its own inputs are sharded, so the zero3 pass gathers and releases the
/// stage's units inside the stage; identical layers still share one compiled stage.
RegionalPlan buildRegionalPlan(const Graph &g, const std::vector<Shape> &inputStrides,
                               const std::string &idPrefix, const ExecutableOptions &exec,
                               const std::vector<RegionalProbe> &probes = {},
                               const std::vector<int64_t> &syms = {},
                               const std::vector<Symbol> &ranges = {},
                               const RegionalTraining *training = nullptr,
                               const ShardingState *sharding = nullptr);

} // namespace rcjit
