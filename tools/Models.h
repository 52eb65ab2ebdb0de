// The built-in models that `rcjit models/bench/trace` know, behind one small interface.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <rcjit/rcjit.h>

namespace rcjit::tools {

/// Settings a model is built with (from the command line).
struct ModelConfig {
  int64_t batch = 1;
  int64_t seq = 128;
  int layers = -1;  // -1: the architecture's own depth
  uint64_t seed = 0;
};

/// A built model: owns its modules; forward() runs one pass on inputs from makeInputs().
class Model {
 public:
  virtual ~Model() = default;
  virtual std::vector<Tensor> makeInputs(const ModelConfig& c) const = 0;
  virtual Tensor forward(const std::vector<Tensor>& inputs) = 0;
  virtual nn::ModuleBase& module() = 0;
};

struct ModelInfo {
  std::string name;
  std::string description;
  std::unique_ptr<Model> (*build)(const ModelConfig&);
};

/// Every built-in model, in listing order.
const std::vector<ModelInfo>& builtinModels();
/// The model called `name`; an rcjit::Error listing the known names otherwise.
const ModelInfo& findModel(const std::string& name);
/// Number of parameter elements of a model.
int64_t parameterCount(nn::ModuleBase& m);

}  // namespace rcjit::tools
