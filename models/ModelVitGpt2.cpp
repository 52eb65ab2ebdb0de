// vit-gpt2: ViT patch embedding and encoder layers, composed with GPT-2's cross-attending decoder.
#include "models/ModelVitGpt2.h"

namespace rcjit::tools {

namespace {

// The patch embedding: conv2d with kernel = stride = patch.
struct Conv2d : nn::Module<Conv2d> {
  Tensor weight, bias;
  int64_t stride;
  Conv2d(int64_t in, int64_t out, int64_t kernel, ParamInit &init)
      : weight(init.normal({out, in, kernel, kernel})), bias(init.zeros({out})), stride(kernel) {
    register_parameter("weight", weight);
    register_parameter("bias", bias);
  }
  Tensor forward(const Tensor &x) { return conv2d(x, weight, bias, stride); }
};

// Hugging Face's ViTLayer; the plain ModuleBase members only group names
// ("attention.attention.query", "attention.output.dense", "intermediate.dense", ...).
struct ViTLayer : nn::Module<ViTLayer> {
  nn::ModuleBase attention, selfAttention, selfOutput, intermediate, output;
  nn::Linear query{1, 1}, key{1, 1}, value{1, 1}, attnDense{1, 1}, interDense{1, 1}, outDense{1, 1};
  nn::LayerNorm layernorm_before, layernorm_after;
  int64_t heads;
  ViTLayer(const VitConfig &c, ParamInit &init)
      : layernorm_before(c.hidden, c.eps), layernorm_after(c.hidden, c.eps), heads(c.heads) {
    for (nn::Linear *l : {&query, &key, &value, &attnDense}) init.linear(*l, c.hidden, c.hidden);
    init.linear(interDense, c.hidden, c.intermediate);
    init.linear(outDense, c.intermediate, c.hidden);
    init.norm(layernorm_before);
    init.norm(layernorm_after);
    registerAll();
  }
  void registerAll() {
    selfAttention.register_module("query", query);
    selfAttention.register_module("key", key);
    selfAttention.register_module("value", value);
    selfOutput.register_module("dense", attnDense);
    attention.register_module("attention", selfAttention);
    attention.register_module("output", selfOutput);
    intermediate.register_module("dense", interDense);
    output.register_module("dense", outDense);
    register_module("attention", attention);
    register_module("intermediate", intermediate);
    register_module("output", output);
    register_module("layernorm_before", layernorm_before);
    register_module("layernorm_after", layernorm_after);
  }
  Tensor forward(const Tensor &x) {
    Tensor n = layernorm_before(x);
    Tensor q = splitHeads(query(n), heads), k = splitHeads(key(n), heads);
    Tensor v = splitHeads(value(n), heads);
    Tensor h = x + attnDense(mergeHeads(scaled_dot_product_attention(q, k, v, false)));
    return h + outDense(gelu(interDense(layernorm_after(h))));
  }
};

// Hugging Face's ViTModel without the pooler: hidden states [batch, 1 + patches, hidden].
struct ViTModel : nn::Module<ViTModel> {
  nn::ModuleBase embeddings, patch_embeddings, encoder;
  Tensor cls_token, position_embeddings;
  Conv2d projection;
  nn::ModuleList<ViTLayer> layer;
  nn::LayerNorm layernorm;
  VitConfig cfg;
  ViTModel(const VitConfig &c, ParamInit &init)
      : cls_token(init.normal({1, 1, c.hidden})),
        position_embeddings(init.normal({1, patches(c) + 1, c.hidden})),
        projection(c.channels, c.hidden, c.patch, init), layernorm(c.hidden, c.eps), cfg(c) {
    for (int i = 0; i < c.layers; ++i) layer.emplace_back(c, init);
    init.norm(layernorm);
    embeddings.register_parameter("cls_token", cls_token);
    embeddings.register_parameter("position_embeddings", position_embeddings);
    patch_embeddings.register_module("projection", projection);
    embeddings.register_module("patch_embeddings", patch_embeddings);
    encoder.register_module("layer", layer);
    register_module("embeddings", embeddings);
    register_module("encoder", encoder);
    register_module("layernorm", layernorm);
  }
  static int64_t patches(const VitConfig &c) { return (c.image / c.patch) * (c.image / c.patch); }
  Tensor forward(const Tensor &pixels) {
    Shape want = {pixels.dim() > 0 ? pixels.size(0) : 0, cfg.channels, cfg.image, cfg.image};
    if (pixels.shape() != want) {
      throw Error("vit-gpt2: pixels must be [batch, " + std::to_string(cfg.channels) + ", " +
                  std::to_string(cfg.image) + ", " + std::to_string(cfg.image) + "], got " +
                  shapeStr(pixels.shape()));
    }
    int64_t b = pixels.size(0);
    Tensor p = transpose(reshape(projection(pixels), {b, cfg.hidden, -1}), 1, 2);
    Tensor x = cat({expand(cls_token, {b, 1, cfg.hidden}), p}, 1) + position_embeddings;
    for (ViTLayer &l : layer) x = l(x);
    return layernorm(x);
  }
};

// Hugging Face's VisionEncoderDecoderModel: "encoder" (ViT) and "decoder" (GPT-2 LM head).
struct VisionEncoderDecoder : nn::Module<VisionEncoderDecoder> {
  ViTModel encoder;
  Gpt2LMHeadModel decoder;
  VisionEncoderDecoder(const VitGpt2Config &c, ParamInit &init)
      : encoder(c.encoder, init), decoder(c.decoder, init) {
    register_module("encoder", encoder);
    register_module("decoder", decoder);
  }
  Tensor forward(const Tensor &pixels, const Tensor &ids) { return decoder(ids, encoder(pixels)); }
};

class VitGpt2 : public EncoderDecoderModel {
public:
  VitGpt2(const VitGpt2Config &cfg, ParamInit init) : cfg_(cfg), net_(cfg, init) {}
  std::vector<Tensor> makeInputs(const ModelConfig &c) const override {
    const VitConfig &e = cfg_.encoder;
    return {Tensor::randn({c.batch, e.channels, e.image, e.image}, c.seed + 4242, c.dtype),
            randomTokens(c.batch, c.seq, cfg_.decoder.vocab, c.seed)};
  }
  Tensor forward(const std::vector<Tensor> &inputs) override {
    if (inputs.size() != 2) throw Error("vit-gpt2: inputs are {pixels, token ids}");
    return net_(inputs[0], inputs[1]);
  }
  nn::ModuleBase &module() override { return net_; }
  Tensor encode(const Tensor &pixels) override { return net_.encoder(pixels); }
  Tensor decode(const Tensor &ids, const Tensor &encoded) override {
    return net_.decoder(ids, encoded);
  }

private:
  VitGpt2Config cfg_;
  VisionEncoderDecoder net_;
};

void validate(const VitGpt2Config &c) {
  const VitConfig &e = c.encoder;
  bool ok = e.hidden > 0 && e.heads > 0 && e.hidden % e.heads == 0 && e.patch > 0 &&
            e.image % e.patch == 0 && e.layers >= 0 && c.decoder.hidden == e.hidden &&
            c.decoder.crossAttention && c.decoder.hidden % c.decoder.heads == 0;
  if (!ok) {
    throw Error(c.name + ": bad config: heads must divide hidden, patch divide image, the "
                         "decoder must have crossAttention and the encoder's hidden size");
  }
}

} // namespace

VitGpt2Config vitGpt2() {
  VitGpt2Config c;
  c.decoder = gpt2Small();
  c.decoder.crossAttention = true;
  return c;
}

int64_t vitGpt2ParameterCount(const VitGpt2Config &cfg) {
  const VitConfig &c = cfg.encoder;
  int64_t h = c.hidden, n = ViTModel::patches(c);
  int64_t embed = h * c.channels * c.patch * c.patch + h + h + (n + 1) * h;
  int64_t layer =
      4 * h + 4 * (h * h + h) + (h * c.intermediate + c.intermediate) + (c.intermediate * h + h);
  return embed + c.layers * layer + 2 * h + gpt2ParameterCount(cfg.decoder);
}

std::unique_ptr<Model> buildVitGpt2(VitGpt2Config cfg, const ModelConfig &c) {
  return buildVitGpt2Parts(std::move(cfg), c);
}

std::unique_ptr<EncoderDecoderModel> buildVitGpt2Parts(VitGpt2Config cfg, const ModelConfig &c) {
  if (c.layers >= 0) cfg.encoder.layers = cfg.decoder.layers = c.layers;
  validate(cfg);
  ParamInit init(c.seed, c.dtype);
  checkMemory(cfg.name, vitGpt2ParameterCount(cfg), c);
  return std::make_unique<VitGpt2>(cfg, std::move(init));
}

} // namespace rcjit::tools
