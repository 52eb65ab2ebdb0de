// The built-in model registry: toy64 (PyTorch's regional-compilation recipe) and the zoo.
#include "models/Models.h"

#include <stdexcept>

#include "models/ModelLlama.h"
#include "models/ModelVitGpt2.h"

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
  Tensor forward(const Tensor &x) {
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
  Tensor forward(const Tensor &input) {
    Tensor x = linear(input);
    for (ToyLayer &layer : layers) x = layer(x);
    return x;
  }
};

class ToyModel : public Model {
public:
  explicit ToyModel(const ModelConfig &c) : net_(c.layers < 0 ? 64 : c.layers, c.seed) {
    if (c.dtype != DType::f32) net_.to(c.dtype);
  }
  std::vector<Tensor> makeInputs(const ModelConfig &c) const override {
    return {Tensor::randn({c.batch, c.seq, 10}, c.seed + 12345, c.dtype)};
  }
  Tensor forward(const std::vector<Tensor> &inputs) override { return net_(inputs.at(0)); }
  nn::ModuleBase &module() override { return net_; }

private:
  Toy net_;
};

int64_t toyCount(const ModelConfig &c) { return 110 + 220 * (c.layers < 0 ? 64 : c.layers); }

template <class Cfg> Cfg withLayers(Cfg cfg, const ModelConfig &c) {
  if (c.layers >= 0) cfg.layers = c.layers;
  return cfg;
}

VitGpt2Config vitWithLayers(const ModelConfig &c) {
  VitGpt2Config cfg = vitGpt2();
  if (c.layers >= 0) cfg.encoder.layers = cfg.decoder.layers = c.layers;
  return cfg;
}

ModelInfo entry(std::string name, std::string description, int layers,
                std::unique_ptr<Model> (*build)(const ModelConfig &),
                int64_t (*count)(const ModelConfig &), int64_t context = 0) {
  int64_t n = count(ModelConfig{});
  return {std::move(name), std::move(description), build, count, n, 4 * n, layers, context};
}

template <LlamaConfig (*F)()> std::unique_ptr<Model> llamaBuild(const ModelConfig &c) {
  return buildLlama(F(), c);
}
template <LlamaConfig (*F)()> int64_t llamaCount(const ModelConfig &c) {
  return llamaParameterCount(withLayers(F(), c));
}
template <Gpt2Config (*F)()> std::unique_ptr<Model> gpt2Build(const ModelConfig &c) {
  return buildGpt2(F(), c);
}
template <Gpt2Config (*F)()> int64_t gpt2Count(const ModelConfig &c) {
  return gpt2ParameterCount(withLayers(F(), c));
}

std::vector<ModelInfo> makeRegistry() {
  return {
      entry(
          "toy64",
          "Linear(10,10) + 64 x [Linear(10,10), relu, sigmoid, Linear(10,10), relu] "
          "(PyTorch regional-compilation recipe); input [batch, seq, 10]",
          64,
          [](const ModelConfig &c) -> std::unique_ptr<Model> {
            return std::make_unique<ToyModel>(c);
          },
          toyCount),
      entry("llama-3.2-1b",
            "Llama-3.2-1B: 2048 hidden, 16 layers, 32/8 heads (GQA), SwiGLU 8192, vocab 128256, "
            "tied; input token ids [batch, seq]",
            llama32_1b().layers, llamaBuild<llama32_1b>, llamaCount<llama32_1b>),
      entry("llama-3.2-3b",
            "Llama-3.2-3B: 3072 hidden, 28 layers, 24/8 heads (GQA), SwiGLU 8192, vocab 128256, "
            "tied; input token ids [batch, seq]",
            llama32_3b().layers, llamaBuild<llama32_3b>, llamaCount<llama32_3b>),
      entry("llama-3.1-8b",
            "Llama-3.1-8B: 4096 hidden, 32 layers, 32/8 heads (GQA), SwiGLU 14336, vocab "
            "128256; input token ids [batch, seq]",
            llama31_8b().layers, llamaBuild<llama31_8b>, llamaCount<llama31_8b>),
      entry("llama-2-13b",
            "Llama-2-13B: 5120 hidden, 40 layers, 40 heads, SwiGLU 13824, vocab 32000; input "
            "token ids [batch, seq]",
            llama2_13b().layers, llamaBuild<llama2_13b>, llamaCount<llama2_13b>),
      entry("gpt2",
            "GPT-2 small: 768 hidden, 12 layers, 12 heads, vocab 50257, context 1024; input "
            "token ids [batch, seq]",
            gpt2Small().layers, gpt2Build<gpt2Small>, gpt2Count<gpt2Small>, gpt2Small().context),
      entry("gpt2-xl",
            "GPT-2 XL: 1600 hidden, 48 layers, 25 heads, vocab 50257, context 1024; input "
            "token ids [batch, seq]",
            gpt2Xl().layers, gpt2Build<gpt2Xl>, gpt2Count<gpt2Xl>, gpt2Xl().context),
      entry(
          "vit-gpt2",
          "ViT-base/16 encoder + GPT-2 small decoder with cross-attention (image "
          "captioning); inputs pixels [batch, 3, 224, 224] and token ids [batch, seq]",
          vitGpt2().encoder.layers, [](const ModelConfig &c) { return buildVitGpt2(vitGpt2(), c); },
          [](const ModelConfig &c) { return vitGpt2ParameterCount(vitWithLayers(c)); },
          vitGpt2().decoder.context),
  };
}

} // namespace

const std::vector<ModelInfo> &builtinModels() {
  static const std::vector<ModelInfo> models = makeRegistry();
  return models;
}

const ModelInfo &findModel(const std::string &name) {
  std::string known;
  for (const ModelInfo &m : builtinModels()) {
    if (m.name == name) return m;
    known += (known.empty() ? "" : ", ") + m.name;
  }
  throw Error("unknown model '" + name + "' (built-in models: " + known + ")");
}

const ModelInfo &modelNamed(const std::string &name) {
  try {
    return findModel(name);
  } catch (const Error &e) {
    throw std::invalid_argument(e.what());
  }
}

void checkSeqFlag(const ModelInfo &info, int64_t seq) {
  if (info.context > 0 && seq > info.context) {
    throw std::invalid_argument("--seq: " + std::to_string(seq) + " exceeds " + info.name +
                                "'s context of " + std::to_string(info.context) + " positions");
  }
}

int64_t parameterCount(nn::ModuleBase &m) {
  int64_t n = 0;
  for (const auto &[name, t] : m.named_parameters()) n += t.numel();
  return n;
}

} // namespace rcjit::tools
