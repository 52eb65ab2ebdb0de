// vit-gpt2: a ViT image encoder and a GPT-2 decoder that cross-attends to it (captioning).
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "models/ModelGpt2.h"
#include "models/Models.h"

namespace rcjit::tools {

/// A ViT encoder, as in Hugging Face's ViTConfig.
struct VitConfig {
  int64_t image = 224; // square images [channels, image, image]
  int64_t patch = 16;  // patch embedding: conv2d with kernel and stride `patch`
  int64_t channels = 3;
  int64_t hidden = 768;
  int layers = 12;
  int64_t heads = 12;
  int64_t intermediate = 3072;
  double eps = 1e-12;
};

/// Encoder and decoder; decoder.hidden must equal encoder.hidden (no projection between).
struct VitGpt2Config {
  std::string name = "vit-gpt2";
  VitConfig encoder;
  Gpt2Config decoder;
};

/// ViT-base/16 (224x224) + GPT-2 small with cross-attention (nlpconnect/vit-gpt2).
VitGpt2Config vitGpt2();
/// Parameter elements of a vit-gpt2 with this config (no allocation; no ViT pooler).
int64_t vitGpt2ParameterCount(const VitGpt2Config &cfg);
/// Builds `cfg` (c.layers, when >= 0, sets the depth of both encoder and decoder) with seed
/// c.seed in c.dtype. Inputs: pixels [batch, channels, image, image] (model dtype) and token
/// ids [batch, seq] (i64) -> logits [batch, seq, vocab]. Module names are Hugging Face's
/// VisionEncoderDecoderModel's ("encoder.encoder.layer.0.attention.attention.query.weight",
/// "decoder.transformer.h.0.crossattention.q_attn.weight"). An rcjit::Error, before
/// allocating, when the parameters do not fit in memory.
std::unique_ptr<Model> buildVitGpt2(VitGpt2Config cfg, const ModelConfig &c);

/// A vit-gpt2 whose halves can be called (and compiled) apart: forward(pixels, ids) is
/// decode(ids, encode(pixels)), each through its module (so regions stay visible).
class EncoderDecoderModel : public Model {
public:
  virtual Tensor encode(const Tensor &pixels) = 0; // [batch, patches + 1, hidden]
  virtual Tensor decode(const Tensor &ids, const Tensor &encoded) = 0; // logits
};
/// buildVitGpt2 with the halves exposed.
std::unique_ptr<EncoderDecoderModel> buildVitGpt2Parts(VitGpt2Config cfg, const ModelConfig &c);

} // namespace rcjit::tools
