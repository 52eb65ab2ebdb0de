// Compiled training: a traced function's joint graph, partitioned and compiled into a
// forward and a backward program, run as one autograd node (the AOTAutograd role).
//
// The forward program returns the function's outputs plus what the backward needs; the
// outputs carry one autograd node (autograd::CustomBackward) whose backward runs the
// compiled backward program on the saved values and the outputs' gradients, and hands the
// gradients of the inputs that require grad to the eager engine, which accumulates them into
// leaves or passes them further back. Both programs go through the one compile path.
//
// The backward is compiled lazily, as AOTAutograd does: create() compiles the forward (which
// returns what the backward will read) and keeps the partitioned backward graph; the first
// backward() that reaches a call's node compiles it (from the compile caches where they hold
// it), once per plan. A grad-mode call that never runs backward compiles one program.
// Symbolic, sharded and scheduled plans compile both halves at once (a backward that cannot be
// fitted or sharded must fail at the compile, where the caller can still fall back; a pass
// schedule is active only during the entry's compile).
#pragma once
#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <rcjit/Compile.h>
#include <rcjit/Passes.h>
#include <rcjit/Tensor.h>

#include "jit/CompileGraph.h"
#include "targets/Executable.h"
#include "tracer/Graph.h"

namespace rcjit {

/// One traced graph of the function to train, as compileGraph's GraphSample, plus tensors
/// standing for its program inputs in the joint trace (their shapes, dtypes and devices;
/// an undefined one is made up from the graph's input node).
struct TrainingSample {
  Graph graph;
  std::vector<Shape> strides; // of its program inputs (args then captured)
  std::vector<int64_t> syms;  // the symbol values it was traced at (symbolic plans)
  std::vector<Tensor> inputs;
};

/// What TrainingPlan::create builds. A symbolic plan has several samples (the function
/// traced at other values of its symbols, [0] at the traced sizes) and `symbolic` says
/// where the forward reads its sizes; the backward finds them among its own inputs.
struct TrainingRequest {
  std::vector<TrainingSample> samples;
  std::vector<bool> wantGrad; // per program input: it requires a gradient
  ExecutableOptions exec;
  std::string moduleId; // the modules are "<moduleId>_fwd" and "<moduleId>_bwd"
  std::string label;    // names both halves in logs ("function 3 entry 0" + " backward")
  SymbolicSpec symbolic;
  /// Sharded parameters among the program inputs (ZeRO-3): the forward's passes get it as
  /// is, the backward's where those parameters are saved values and gradients; a gradient
  /// of one is its unit's shard gradient, handed to the shard (the bound input) once per unit.
  ShardingState sharding;
};

/// The compiled forward and backward of one entry. Immutable; run() is thread-safe.
class TrainingPlan : public std::enable_shared_from_this<TrainingPlan> {
public:
  /// Builds the joint graph of each sample, partitions them alike and compiles the two
  /// halves through compileGraph. Throws rcjit::Error; a symbolic request that cannot be
  /// one program throws too, saying why (the caller then compiles for static shapes).
  static std::shared_ptr<TrainingPlan> create(TrainingRequest r);

  /// Runs the forward on `inputs` (as guarded) and returns the function's outputs, which
  /// require grad and whose backward runs the compiled backward.
  std::vector<Tensor> run(const Tensor *const *inputs, size_t n) const;

  const Graph &forwardGraph() const { return forwardGraph_; }
  /// The backward graph after the graph passes once compiled, else the partitioned one.
  const Graph &backwardGraph() const;
  const Executable &forward() const { return *forward_; }
  /// The compiled backward, compiled now when no backward() reached the plan yet. Throws
  /// rcjit::Error when that compile fails. Thread-safe.
  const Executable &backward() const;
  /// The compiled backward, or null while no backward() reached the plan.
  const Executable *backwardIfCompiled() const;
  /// Seconds the lazy backward compile took (0 until it ran, or when create() compiled it).
  double backwardSeconds() const;
  int64_t savedBytes() const { return savedBytes_; } // per call, held until backward
  std::string print() const;

  /// A gradient the backward program returns as an embedding's rows and ids, for the
  /// autograd node to scatter into the gradient the engine holds for that input (a tied
  /// weight's other use) or into a new block (see scatteredGradients, CompiledTraining.cpp).
  struct Scattered {
    int output = 0; // the backward output that is the rows' gradient, [..., dim]
    int ids = 0;    // the backward output that is their ids
    int64_t num = 0; // the embedding's rows
  };

private:
  friend class CompiledBackward;
  struct PendingBackward; // what compiling the backward reads (CompiledTraining.cpp)
  // the caller holds backwardMu_; `lazy`: a backward() asked (then it logs its code)
  void compileBackward(PendingBackward &p, bool lazy) const;
  Graph forwardGraph_;
  std::shared_ptr<Executable> forward_;
  // the lazy backward: set once under backwardMu_, read after backwardReady_ (acquire)
  mutable std::mutex backwardMu_;
  mutable std::atomic<bool> backwardReady_{false};
  std::shared_ptr<PendingBackward> pending_; // set by create(), never changed after
  mutable Graph backwardGraph_;
  mutable std::shared_ptr<Executable> backward_;
  mutable double backwardSeconds_ = 0;
  std::vector<int> savedOutput_; // per saved value: its index among the forward's outputs
  size_t numOutputs_ = 0;        // the function's outputs
  std::vector<DType> outputDtypes_;
  std::vector<int> gradInput_; // the inputs that get a gradient, in backward output order
  std::vector<bool> dropGrad_; // per backward output: a unit's shard gradient counted already
  std::vector<int> redirect_;  // backward outputs that are a ZeRO 1/2 unit's shard gradient
  std::vector<Scattered> scattered_;
  static void shardedGradients(TrainingPlan &plan, const ShardingState &backwardSharding);
  size_t numInputs_ = 0;
  Device device_; // where the programs run
  int64_t savedBytes_ = 0;
  std::string name_;
};

} // namespace rcjit
