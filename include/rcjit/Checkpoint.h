// Saving and restoring training: named tensors in a safetensors file, and checkpoints of a
// module's parameters with an optimizer's state, to resume a run where it stopped.
//
// Files are Hugging Face's safetensors format (readable by the `safetensors` Python
// package). Every write goes to a file beside the target, is synced, then renamed over it:
// a run that dies while saving leaves the previous file whole. Every problem of a file (not
// found, truncated, corrupt header, a tensor of the wrong shape or dtype, a name missing or
// unexpected) is an rcjit::Error naming the file and the tensor, raised before anything is
// changed.
#pragma once
#include <map>
#include <string>

#include <rcjit/Optim.h>
#include <rcjit/Tensor.h>
#include <rcjit/nn.h>

namespace rcjit {

/// A safetensors file's tensors (CPU, contiguous; sorted by name, as the format's JSON
/// header keeps them) and its string metadata.
struct TensorFile {
  NamedTensors tensors;
  std::map<std::string, std::string> metadata;
};

/// Writes `tensors` (any device or layout; every dtype but none) to `path` with optional
/// string metadata. A duplicate name or an I/O failure is an rcjit::Error.
void save_tensors(const std::string &path, const NamedTensors &tensors,
                  const std::map<std::string, std::string> &metadata = {});
/// Reads every tensor of a safetensors file.
TensorFile load_tensors(const std::string &path);

/// Writes a checkpoint: every parameter of `model` as "model.NAME" (named_parameters()'
/// names), the optimizer's state_dict() as "optimizer.NAME", and `metadata` (a step count,
/// a data position: whatever the caller needs to resume; keys starting "rcjit." are
/// reserved). Call it between steps, outside a compiled function. Under data parallelism
/// every rank holds the same state: let one rank write.
void save_checkpoint(const std::string &path, const nn::ModuleBase &model,
                     const optim::Optimizer &optimizer,
                     const std::map<std::string, std::string> &metadata = {});
/// The same without an optimizer: the parameters alone.
void save_checkpoint(const std::string &path, const nn::ModuleBase &model,
                     const std::map<std::string, std::string> &metadata = {});

/// Restores a checkpoint into `model` (every parameter, copied in place: a compiled
/// function that holds them reads the restored values) and `optimizer`
/// (load_state_dict()), and returns its metadata. The file must name exactly the model's
/// parameters, each with its shape and dtype, and hold an optimizer state (a checkpoint
/// saved without one is an Error here); everything is checked before anything changes.
std::map<std::string, std::string> load_checkpoint(const std::string &path, nn::ModuleBase &model,
                                                   optim::Optimizer &optimizer);
/// The same for the parameters alone (a state the file holds is left unread).
std::map<std::string, std::string> load_checkpoint(const std::string &path, nn::ModuleBase &model);

} // namespace rcjit
