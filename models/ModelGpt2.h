// GPT-2 (small, XL): learned positions, pre-LayerNorm blocks, fused qkv, tied LM head.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "models/ModelCommon.h"
#include "models/Models.h"

namespace rcjit::tools {

/// A GPT-2 architecture, as in Hugging Face's config.json.
struct Gpt2Config {
  std::string name = "gpt2";
  int64_t hidden = 64;
  int layers = 2;
  int64_t heads = 4;
  int64_t vocab = 256;
  int64_t context = 64; // learned positions (n_positions)
  double eps = 1e-5;
  bool crossAttention = false; // blocks also attend to an encoder's output (vit-gpt2)
};

Gpt2Config gpt2Small(); // gpt2: 768 hidden, 12 layers, 12 heads
Gpt2Config gpt2Xl();    // gpt2-xl: 1600 hidden, 48 layers, 25 heads

/// Parameter elements of a GPT-2 with this config (no allocation).
int64_t gpt2ParameterCount(const Gpt2Config &cfg);
/// Builds `cfg` (depth c.layers when >= 0) with seed c.seed in c.dtype; inputs: token ids
/// [batch, seq] (i64, seq <= context) -> logits [batch, seq, vocab]. Module names are
/// Hugging Face's GPT2LMHeadModel's ("transformer.h.0.attn.c_attn.weight"; Linear weights
/// are [out, in], the transpose of the checkpoints' Conv1D). An rcjit::Error, before
/// allocating, when the parameters do not fit in memory.
std::unique_ptr<Model> buildGpt2(Gpt2Config cfg, const ModelConfig &c);

/// GPT-2 attention: self-attention (causal, fused c_attn) or cross-attention (q_attn on the
/// decoder, c_attn giving k and v from the encoder, not causal). Linears are declared 1x1
/// and given their real shape by ParamInit.
struct Gpt2Attention : nn::Module<Gpt2Attention> {
  nn::Linear c_attn{1, 1}, c_proj{1, 1};
  std::unique_ptr<nn::Linear> q_attn; // cross-attention only
  int64_t heads;
  Gpt2Attention(const Gpt2Config &c, ParamInit &init, bool cross);
  Tensor forward(const Tensor &x);
  Tensor forward(const Tensor &x, const Tensor &encoder);
};

struct Gpt2MLP : nn::Module<Gpt2MLP> {
  nn::Linear c_fc{1, 1}, c_proj{1, 1};
  Gpt2MLP(const Gpt2Config &c, ParamInit &init);
  Tensor forward(const Tensor &x); // c_proj(gelu_new(c_fc(x))), gelu_new the tanh form
};

struct Gpt2Block : nn::Module<Gpt2Block> {
  nn::LayerNorm ln_1, ln_2;
  Gpt2Attention attn;
  std::unique_ptr<nn::LayerNorm> ln_cross_attn; // with crossattention only
  std::unique_ptr<Gpt2Attention> crossattention;
  Gpt2MLP mlp;
  Gpt2Block(const Gpt2Config &c, ParamInit &init);
  Tensor forward(const Tensor &x);
  Tensor forward(const Tensor &x, const Tensor &encoder);
};

/// Embeddings, blocks and the final LayerNorm: hidden states [batch, seq, hidden].
struct Gpt2Model : nn::Module<Gpt2Model> {
  nn::Embedding wte{1, 1}, wpe{1, 1};
  nn::ModuleList<Gpt2Block> h;
  nn::LayerNorm ln_f;
  std::string name;
  Gpt2Model(const Gpt2Config &c, ParamInit &init);
  Tensor forward(const Tensor &ids);
  Tensor forward(const Tensor &ids, const Tensor &encoder);

private:
  Tensor embed(const Tensor &ids);
};

/// Gpt2Model under "transformer" and the LM head tied to wte: logits [batch, seq, vocab].
struct Gpt2LMHeadModel : nn::Module<Gpt2LMHeadModel> {
  Gpt2Model transformer;
  Gpt2LMHeadModel(const Gpt2Config &c, ParamInit &init);
  Tensor forward(const Tensor &ids) { return linear(transformer(ids), transformer.wte.weight); }
  Tensor forward(const Tensor &ids, const Tensor &encoder) {
    return linear(transformer(ids, encoder), transformer.wte.weight);
  }
};

} // namespace rcjit::tools
