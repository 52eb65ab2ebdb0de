// The checkpoint file of rcjit/Checkpoint.h, for the optimizers that restore it in their own
// way (dist::ZeroOptimizer keeps slices of each parameter and of its state).
#pragma once
#include <map>
#include <string>
#include <vector>

#include <rcjit/Optim.h>

namespace rcjit::detail {

/// A parameter a checkpoint must hold: its name (named_parameters()'), shape and dtype.
struct ExpectedParameter {
  std::string name;
  Shape shape;
  DType dtype;
};

/// Writes a checkpoint: `params` as "model.NAME", `state` (when not null) as
/// "optimizer.NAME", `metadata` (keys starting "rcjit." refused) and the format's keys.
void writeCheckpoint(const std::string &path, const NamedTensors &params, const NamedTensors *state,
                     const std::map<std::string, std::string> &metadata);

/// A checkpoint read and checked: the parameters' values in the order expected, the
/// optimizer's state (when asked for) and the metadata.
struct CheckpointRead {
  std::vector<Tensor> params;
  NamedTensors state;
  std::map<std::string, std::string> metadata;
};
/// Reads `path` and checks it holds exactly `expected` (each shape and dtype) and, when
/// `withState`, an optimizer state (not checked here: the optimizer's load_state_dict does).
/// Every problem is an rcjit::Error naming the file.
CheckpointRead readCheckpoint(const std::string &path,
                              const std::vector<ExpectedParameter> &expected, bool withState);

} // namespace rcjit::detail
