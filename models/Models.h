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
  int layers = -1; // -1: the architecture's own depth
  uint64_t seed = 0;
  DType dtype = DType::f32; // f32 or bf16: parameters are converted at build, activations follow
  int64_t memoryLimit = -1; // bytes the parameters may take; -1: /proc/meminfo MemAvailable
};

/// A built model: owns its modules; forward() runs one pass on inputs from makeInputs().
/// Not thread-safe (forward may be called from one thread at a time).
class Model {
public:
  virtual ~Model() = default;
  virtual std::vector<Tensor> makeInputs(const ModelConfig &c) const = 0;
  virtual Tensor forward(const std::vector<Tensor> &inputs) = 0;
  virtual nn::ModuleBase &module() = 0;
  /// Moves the parameters (and any tables the model keeps) to `device`; inputs from
  /// makeInputs stay on the CPU (move them too).
  virtual void to(Device device) { module().to(device); }
};

/// A registry entry. `build` throws an rcjit::Error (bytes needed and available) instead of
/// allocating parameters that would not fit in memory.
struct ModelInfo {
  std::string name;
  std::string description;
  std::unique_ptr<Model> (*build)(const ModelConfig &);
  /// Parameter elements of the model `build(c)` would make, computed without allocating.
  int64_t (*countParameters)(const ModelConfig &);
  int64_t parameters = 0; // countParameters at the architecture's own depth
  int64_t bytesF32 = 0;   // parameters * 4
  int layers = 0; // the architecture's own depth (what --layers -1 builds); vit-gpt2: per stack
  int64_t context = 0; // the longest sequence its position table holds; 0: no such bound
};

/// Throws std::invalid_argument (a usage error) when `seq` exceeds the model's context, so
/// that nothing sized by it is allocated first.
void checkSeqFlag(const ModelInfo &info, int64_t seq);

/// Every built-in model, in listing order: toy64, llama-3.2-1b, llama-3.2-3b, llama-3.1-8b,
/// llama-2-13b, gpt2, gpt2-xl, vit-gpt2.
const std::vector<ModelInfo> &builtinModels();
/// The model called `name`; an rcjit::Error listing the known names otherwise.
const ModelInfo &findModel(const std::string &name);
/// findModel for a name typed on the command line: an unknown name is a usage error
/// (std::invalid_argument, exit code 2), with the same message.
const ModelInfo &modelNamed(const std::string &name);
/// Number of parameter elements of a model.
int64_t parameterCount(nn::ModuleBase &m);

} // namespace rcjit::tools
