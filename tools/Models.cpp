// Built-in models: toy64, the 64-layer model of PyTorch's regional-compilation recipe.
#include "tools/Models.h"

namespace rcjit::tools {

namespace {

// One layer of the recipe: Linear(10,10) -> relu -> sigmoid -> Linear(10,10) -> relu.
struct ToyLayer : nn::Module<ToyLayer> {
  nn::Linear linear1;
  nn::Linear linear2;
  explicit ToyLayer(uint64_t seed) : linear1(10, 10, true, seed), linear2(10, 10, true, seed + 1) {
    register_module("linear1", linear1);
    register_module("linear2", linear2);
  }
  Tensor forward(const Tensor& x) {
    Tensor a = sigmoid(relu(linear1(x)));
    return relu(linear2(a));
  }
};

// Linear(10,10) then `layers` ToyLayers (64 in the recipe).
struct Toy : nn::Module<Toy> {
  nn::Linear linear;
  nn::ModuleList<ToyLayer> layers;
  Toy(int n, uint64_t seed) : linear(10, 10, true, seed) {
    for (int i = 0; i < n; ++i) layers.emplace_back(seed + 2 + 2 * static_cast<uint64_t>(i));
    register_module("linear", linear);
    register_module("layers", layers);
  }
  Tensor forward(const Tensor& input) {
    Tensor x = linear(input);
    for (ToyLayer& layer : layers) x = layer(x);
    return x;
  }
};

class ToyModel : public Model {
 public:
  explicit ToyModel(const ModelConfig& c) : net_(c.layers < 0 ? 64 : c.layers, c.seed) {}
  std::vector<Tensor> makeInputs(const ModelConfig& c) const override {
    return {Tensor::randn({c.batch, c.seq, 10}, c.seed + 12345)};
  }
  Tensor forward(const std::vector<Tensor>& inputs) override { return net_(inputs.at(0)); }
  nn::ModuleBase& module() override { return net_; }

 private:
  Toy net_;
};

}  // namespace

const std::vector<ModelInfo>& builtinModels() {
  static const std::vector<ModelInfo> models = {
      {"toy64",
       "Linear(10,10) + 64 x [Linear(10,10), relu, sigmoid, Linear(10,10), relu] "
       "(PyTorch regional-compilation recipe); input [batch, seq, 10]",
       [](const ModelConfig& c) -> std::unique_ptr<Model> {
         return std::make_unique<ToyModel>(c);
       }},
  };
  return models;
}

const ModelInfo& findModel(const std::string& name) {
  std::string known;
  for (const ModelInfo& m : builtinModels()) {
    if (m.name == name) return m;
    known += (known.empty() ? "" : ", ") + m.name;
  }
  throw Error("unknown model '" + name + "' (built-in models: " + known + ")");
}

int64_t parameterCount(nn::ModuleBase& m) {
  int64_t n = 0;
  for (const auto& [name, t] : m.named_parameters()) n += t.numel();
  return n;
}

}  // namespace rcjit::tools
