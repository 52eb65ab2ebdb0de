// `rcjit run`: run an ONNX model on .npy or seeded random inputs; and the ONNX workload that
// `rcjit bench --onnx` times.
#pragma once
#include <map>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include <rcjit/Onnx.h>
#include <rcjit/Tensor.h>

namespace rcjit::tools {

/// "NAME=VALUE" split at the first '='; a usage error (std::invalid_argument) naming `flag`
/// when there is no '=' or either side is empty.
std::pair<std::string, std::string> splitAssignment(const std::string &spec,
                                                    const std::string &flag);
/// "1x128" (or "1,128"; "" or "scalar" for a 0-d input) as a shape of non-negative sizes;
/// a usage error naming `flag` otherwise.
Shape parseShapeText(const std::string &text, const std::string &flag);

/// How an input without a .npy file gets its values (--shape): floating inputs standard
/// normal from `seed`; integer inputs whose name ends in "mask" all ones, whose name holds
/// "token_type" all zeros, the others uniform in [0, intMax) from `seed`; bool inputs true.
struct RandomInputs {
  uint64_t seed = 0;
  int64_t intMax = 100;
};

/// A loaded ONNX model and what its inputs are. Not copyable (the model is a module).
class OnnxWorkload {
public:
  /// Loads `path` with rcjit::onnx::load; an rcjit::Error naming what is wrong.
  explicit OnnxWorkload(const std::string &path);
  onnx::Model &model() { return model_; }
  const onnx::Model &model() const { return model_; }
  const std::string &path() const { return path_; }
  /// The dtype the file declares for input i.
  DType inputDtype(size_t i) const { return dtypes_.at(i); }
  /// The model's inputs in graph order: each from `files` (NAME -> .npy path) or `shapes`
  /// (NAME -> shape, values as `random` says). An input given by neither, a name the model
  /// does not have, one given twice, a dtype other than the declared one, a rank or a size
  /// that contradicts the file's fixed dims: an rcjit::Error naming the input.
  std::vector<Tensor> inputs(const std::map<std::string, std::string> &files,
                             const std::map<std::string, Shape> &shapes,
                             const RandomInputs &random) const;
  /// rcjit::mark_dynamic on every dim of `inputs` that the file names with a dim_param and
  /// whose size is 2 or more (range [2, inf): a size-1 dim stays static, as compile's
  /// automatic dynamic treats it). Returns how many dims were marked.
  int markDynamic(std::vector<Tensor> &inputs) const;
  /// The declared shape of input i as text: "[batch, seq]" with dim_params by name.
  std::string declaredShape(size_t i) const;

private:
  std::string path_;
  onnx::Model model_;
  std::vector<DType> dtypes_;
};

/// Runs `rcjit run` with its arguments (after "run"). Returns an ExitCode; throws
/// rcjit::Error on runtime failures and std::invalid_argument on bad flags.
int runCommand(const std::vector<std::string> &args, std::ostream &out, std::ostream &err);

} // namespace rcjit::tools
