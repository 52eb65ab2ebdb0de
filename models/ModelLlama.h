// The Llama family (Llama 2, 3.1, 3.2): real configurations, random seeded weights.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "models/Models.h"

namespace rcjit::tools {

/// A Llama architecture, as in Hugging Face's config.json.
struct LlamaConfig {
  std::string name = "llama";
  int64_t hidden = 64;
  int layers = 2;
  int64_t heads = 4;
  int64_t kvHeads = 2; // grouped-query attention: heads % kvHeads == 0
  int64_t intermediate = 128;
  int64_t vocab = 256;
  double ropeTheta = 10000;
  double eps = 1e-5;
  bool tiedEmbeddings = true;
  // Llama 3's "llama3" rope scaling of the inverse frequencies; ropeFactor 0: none.
  double ropeFactor = 0;
  double lowFreqFactor = 1;
  double highFreqFactor = 4;
  int64_t originalMaxPositions = 8192;
};

LlamaConfig llama32_1b(); // Llama-3.2-1B
LlamaConfig llama32_3b(); // Llama-3.2-3B
LlamaConfig llama31_8b(); // Llama-3.1-8B
LlamaConfig llama2_13b(); // Llama-2-13B

/// Parameter elements of a Llama with this config (no allocation).
int64_t llamaParameterCount(const LlamaConfig &cfg);
/// The headDim/2 RoPE inverse frequencies, with Llama 3's scaling when cfg.ropeFactor > 0.
std::vector<double> llamaInvFreq(const LlamaConfig &cfg);
/// Builds `cfg` (depth c.layers when >= 0) with seed c.seed in c.dtype and RoPE tables for
/// c.seq positions; inputs: token ids [batch, seq] (i64) -> logits [batch, seq, vocab].
/// Module names are Hugging Face's ("model.layers.0.self_attn.q_proj.weight").
/// An rcjit::Error, before allocating, when the parameters do not fit in memory.
/// `layersOnly`: just the decoder layers (no embedding, final norm or head): inputs are
/// hidden states [batch, seq, hidden] in c.dtype, the output has the same shape.
std::unique_ptr<Model> buildLlama(LlamaConfig cfg, const ModelConfig &c, bool layersOnly = false);

} // namespace rcjit::tools
