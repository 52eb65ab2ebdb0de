// Compiled training: a traced function's joint graph, partitioned and compiled into a
// forward and a backward program, run as one autograd node (the AOTAutograd role).
//
// The forward program returns the function's outputs plus what the backward needs; the
// outputs carry one autograd node (autograd::CustomBackward) whose backward runs the
// compiled backward program on the saved values and the outputs' gradients, and hands the
// gradients of the inputs that require grad to the eager engine, which accumulates them into
// leaves or passes them further back. Both programs go through the one compile path.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include <rcjit/Compile.h>
#include <rcjit/Tensor.h>

#include "targets/Executable.h"
#include "tracer/Graph.h"

namespace rcjit {

/// The compiled forward and backward of one entry. Immutable; run() is thread-safe.
class TrainingPlan : public std::enable_shared_from_this<TrainingPlan> {
public:
  /// Builds the plan for traced graph `forward` whose program inputs (args then captured)
  /// are `inputs`; `wantGrad[i]`: input i requires a gradient. Both programs compile with
  /// `exec`; `moduleId` names the two modules ("<id>_fwd", "<id>_bwd"); `label` names them
  /// in logs. Throws rcjit::Error.
  static std::shared_ptr<TrainingPlan>
  create(const Graph &forward, const std::vector<Tensor> &inputs, const std::vector<bool> &wantGrad,
         const ExecutableOptions &exec, const std::string &moduleId, const std::string &label);

  /// Runs the forward on `inputs` (as guarded) and returns the function's outputs, which
  /// require grad and whose backward runs the compiled backward.
  std::vector<Tensor> run(const Tensor *const *inputs, size_t n) const;

  const Graph &forwardGraph() const { return forwardGraph_; }
  const Graph &backwardGraph() const { return backwardGraph_; }
  const Executable &forward() const { return *forward_; }
  const Executable &backward() const { return *backward_; }
  int64_t savedBytes() const { return savedBytes_; } // per call, held until backward
  std::string print() const;

private:
  friend class CompiledBackward;
  Graph forwardGraph_, backwardGraph_;
  std::shared_ptr<Executable> forward_, backward_;
  std::vector<int> savedOutput_;    // per saved value: its index among the forward's outputs
  std::vector<Shape> outputShapes_; // of the function's outputs
  std::vector<DType> outputDtypes_;
  std::vector<int> gradInput_; // the inputs that get a gradient, in backward output order
  size_t numInputs_ = 0;
  int64_t savedBytes_ = 0;
  std::string name_;
};

} // namespace rcjit
