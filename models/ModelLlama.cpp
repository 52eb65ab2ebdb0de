// The Llama family: RMSNorm, RoPE attention with grouped-query heads, SwiGLU MLP.
#include "models/ModelLlama.h"

#include <cmath>

#include "models/ModelCommon.h"

namespace rcjit::tools {

namespace {

// Rotate-half RoPE on x [batch, heads, seq, headDim] with cos/sin [seq, headDim].
Tensor applyRope(const Tensor &x, const Tensor &cos, const Tensor &sin) {
  int64_t d = x.size(-1);
  Tensor x1 = slice(x, -1, 0, d / 2);
  Tensor x2 = slice(x, -1, d / 2, d);
  return x * cos + cat({neg(x2), x1}, -1) * sin;
}

// [batch, kvHeads, seq, headDim] -> [batch, kvHeads * rep, seq, headDim].
Tensor repeatKv(const Tensor &x, int64_t rep) {
  if (rep == 1) return x;
  Tensor e = expand(unsqueeze(x, 2), {x.size(0), x.size(1), rep, x.size(2), x.size(3)});
  return reshape(e, {x.size(0), x.size(1) * rep, x.size(2), x.size(3)});
}

// Linears are declared 1x1 and given their real shape and weights by ParamInit.
struct LlamaAttention : nn::Module<LlamaAttention> {
  nn::Linear q_proj{1, 1, false}, k_proj{1, 1, false}, v_proj{1, 1, false}, o_proj{1, 1, false};
  int64_t heads, kvHeads;
  LlamaAttention(const LlamaConfig &c, ParamInit &init) : heads(c.heads), kvHeads(c.kvHeads) {
    int64_t headDim = c.hidden / c.heads;
    init.linear(q_proj, c.hidden, c.heads * headDim);
    init.linear(k_proj, c.hidden, c.kvHeads * headDim);
    init.linear(v_proj, c.hidden, c.kvHeads * headDim);
    init.linear(o_proj, c.heads * headDim, c.hidden);
    register_module("q_proj", q_proj);
    register_module("k_proj", k_proj);
    register_module("v_proj", v_proj);
    register_module("o_proj", o_proj);
  }
  Tensor forward(const Tensor &x, const Tensor &cos, const Tensor &sin) {
    Tensor q = applyRope(splitHeads(q_proj(x), heads), cos, sin);
    Tensor k = applyRope(splitHeads(k_proj(x), kvHeads), cos, sin);
    Tensor v = splitHeads(v_proj(x), kvHeads);
    k = repeatKv(k, heads / kvHeads);
    v = repeatKv(v, heads / kvHeads);
    return o_proj(mergeHeads(scaled_dot_product_attention(q, k, v, true)));
  }
};

struct LlamaMLP : nn::Module<LlamaMLP> {
  nn::Linear gate_proj{1, 1, false}, up_proj{1, 1, false}, down_proj{1, 1, false};
  LlamaMLP(const LlamaConfig &c, ParamInit &init) {
    init.linear(gate_proj, c.hidden, c.intermediate);
    init.linear(up_proj, c.hidden, c.intermediate);
    init.linear(down_proj, c.intermediate, c.hidden);
    register_module("gate_proj", gate_proj);
    register_module("up_proj", up_proj);
    register_module("down_proj", down_proj);
  }
  Tensor forward(const Tensor &x) { return down_proj(silu(gate_proj(x)) * up_proj(x)); }
};

struct LlamaDecoderLayer : nn::Module<LlamaDecoderLayer> {
  LlamaAttention self_attn;
  LlamaMLP mlp;
  nn::RMSNorm input_layernorm, post_attention_layernorm;
  LlamaDecoderLayer(const LlamaConfig &c, ParamInit &init)
      : self_attn(c, init), mlp(c, init), input_layernorm(c.hidden, c.eps),
        post_attention_layernorm(c.hidden, c.eps) {
    init.norm(input_layernorm);
    init.norm(post_attention_layernorm);
    register_module("self_attn", self_attn);
    register_module("mlp", mlp);
    register_module("input_layernorm", input_layernorm);
    register_module("post_attention_layernorm", post_attention_layernorm);
  }
  Tensor forward(const Tensor &x, const Tensor &cos, const Tensor &sin) {
    Tensor h = x + self_attn(input_layernorm(x), cos, sin);
    return h + mlp(post_attention_layernorm(h));
  }
};

// Hugging Face's LlamaForCausalLM: "model" groups embed_tokens, layers and norm.
struct LlamaForCausalLM : nn::Module<LlamaForCausalLM> {
  nn::ModuleBase model;
  nn::Embedding embed_tokens{1, 1};
  nn::ModuleList<LlamaDecoderLayer> layers;
  nn::RMSNorm norm;
  std::unique_ptr<nn::Linear> lm_head; // null when tied to embed_tokens
  LlamaForCausalLM(const LlamaConfig &c, ParamInit &init) : norm(c.hidden, c.eps) {
    init.embedding(embed_tokens, c.vocab, c.hidden);
    for (int i = 0; i < c.layers; ++i) layers.emplace_back(c, init);
    init.norm(norm);
    model.register_module("embed_tokens", embed_tokens);
    model.register_module("layers", layers);
    model.register_module("norm", norm);
    register_module("model", model);
    if (!c.tiedEmbeddings) {
      lm_head = std::make_unique<nn::Linear>(1, 1, false);
      init.linear(*lm_head, c.hidden, c.vocab);
      register_module("lm_head", *lm_head);
    }
  }
  Tensor forward(const Tensor &ids, const Tensor &cos, const Tensor &sin) {
    Tensor x = embed_tokens(ids);
    for (LlamaDecoderLayer &layer : layers) x = layer(x, cos, sin);
    x = norm(x);
    return lm_head ? (*lm_head)(x) : linear(x, embed_tokens.weight);
  }
};

// What both Llama models share: the network, its RoPE tables, moving them.
template <class Net> class LlamaBase : public Model {
public:
  LlamaBase(const LlamaConfig &cfg, const ModelConfig &c, ParamInit init)
      : cfg_(cfg), net_(cfg, init) {
    std::tie(cos_, sin_) = ropeTables(llamaInvFreq(cfg), c.seq, c.dtype);
  }
  nn::ModuleBase &module() override { return net_; }
  void to(Device device) override {
    net_.to(device);
    cos_ = cos_.to(device);
    sin_ = sin_.to(device);
  }

protected:
  LlamaConfig cfg_;
  Net net_;
  Tensor cos_, sin_;
};

class LlamaModel : public LlamaBase<LlamaForCausalLM> {
public:
  using LlamaBase::LlamaBase;
  std::vector<Tensor> makeInputs(const ModelConfig &c) const override {
    return {randomTokens(c.batch, c.seq, cfg_.vocab, c.seed)};
  }
  Tensor forward(const std::vector<Tensor> &inputs) override {
    const Tensor &ids = inputs.at(0);
    if (ids.dim() != 2) throw Error(cfg_.name + ": token ids must be [batch, seq]");
    int64_t seq = ids.size(1), built = cos_.size(0);
    if (seq > built) {
      throw Error(cfg_.name + ": sequence length " + std::to_string(seq) +
                  " exceeds the RoPE tables built for " + std::to_string(built) + " positions");
    }
    // sliced even at full length: the traced graph is then the same at every length, so
    // one entry with a symbolic sequence dim serves them all
    return net_(ids, slice(cos_, 0, 0, seq), slice(sin_, 0, 0, seq));
  }
};

// The decoder layers alone: hidden states [batch, seq, hidden] in and out.
struct LlamaLayerStack : nn::Module<LlamaLayerStack> {
  nn::ModuleList<LlamaDecoderLayer> layers;
  LlamaLayerStack(const LlamaConfig &c, ParamInit &init) {
    for (int i = 0; i < c.layers; ++i) layers.emplace_back(c, init);
    register_module("layers", layers);
  }
  Tensor forward(Tensor x, const Tensor &cos, const Tensor &sin) {
    for (LlamaDecoderLayer &layer : layers) x = layer(x, cos, sin);
    return x;
  }
};

class LlamaLayersModel : public LlamaBase<LlamaLayerStack> {
public:
  using LlamaBase::LlamaBase;
  std::vector<Tensor> makeInputs(const ModelConfig &c) const override {
    return {Tensor::randn({c.batch, c.seq, cfg_.hidden}, c.seed + 1, c.dtype)};
  }
  Tensor forward(const std::vector<Tensor> &inputs) override {
    const Tensor &x = inputs.at(0);
    if (x.dim() != 3 || x.size(1) > cos_.size(0)) {
      throw Error(cfg_.name + " layers: hidden states must be [batch, seq <= " +
                  std::to_string(cos_.size(0)) + ", " + std::to_string(cfg_.hidden) + "]");
    }
    int64_t seq = x.size(1);
    return net_(x, slice(cos_, 0, 0, seq), slice(sin_, 0, 0, seq));
  }
};

void validate(const LlamaConfig &c) {
  bool ok = c.hidden > 0 && c.heads > 0 && c.kvHeads > 0 && c.hidden % c.heads == 0 &&
            c.heads % c.kvHeads == 0 && (c.hidden / c.heads) % 2 == 0 && c.layers >= 0 &&
            c.vocab > 0 && c.intermediate > 0;
  if (!ok) {
    throw Error(c.name + ": bad config (hidden " + std::to_string(c.hidden) + ", heads " +
                std::to_string(c.heads) + ", kv heads " + std::to_string(c.kvHeads) +
                "): heads must divide hidden into an even head dim, kv heads divide heads");
  }
}

LlamaConfig llama3(std::string name, int64_t hidden, int layers, int64_t heads, int64_t inter,
                   double ropeFactor, bool tied) {
  LlamaConfig c;
  c.name = std::move(name);
  c.hidden = hidden;
  c.layers = layers;
  c.heads = heads;
  c.kvHeads = 8;
  c.intermediate = inter;
  c.vocab = 128256;
  c.ropeTheta = 500000;
  c.eps = 1e-5;
  c.tiedEmbeddings = tied;
  c.ropeFactor = ropeFactor;
  return c;
}

} // namespace

LlamaConfig llama32_1b() { return llama3("llama-3.2-1b", 2048, 16, 32, 8192, 32, true); }
LlamaConfig llama32_3b() { return llama3("llama-3.2-3b", 3072, 28, 24, 8192, 32, true); }
LlamaConfig llama31_8b() { return llama3("llama-3.1-8b", 4096, 32, 32, 14336, 8, false); }

LlamaConfig llama2_13b() {
  LlamaConfig c;
  c.name = "llama-2-13b";
  c.hidden = 5120;
  c.layers = 40;
  c.heads = 40;
  c.kvHeads = 40;
  c.intermediate = 13824;
  c.vocab = 32000;
  c.ropeTheta = 10000;
  c.eps = 1e-5;
  c.tiedEmbeddings = false;
  return c;
}

int64_t llamaParameterCount(const LlamaConfig &c) {
  int64_t kv = c.kvHeads * (c.hidden / c.heads);
  int64_t attn = 2 * c.hidden * c.hidden + 2 * c.hidden * kv;
  int64_t layer = attn + 3 * c.hidden * c.intermediate + 2 * c.hidden;
  int64_t head = c.tiedEmbeddings ? 0 : c.vocab * c.hidden;
  return c.vocab * c.hidden + c.layers * layer + c.hidden + head;
}

std::vector<double> llamaInvFreq(const LlamaConfig &c) {
  int64_t d = c.hidden / c.heads;
  const double pi = 3.14159265358979323846;
  double lowWave = static_cast<double>(c.originalMaxPositions) / c.lowFreqFactor;
  double highWave = static_cast<double>(c.originalMaxPositions) / c.highFreqFactor;
  std::vector<double> inv;
  for (int64_t i = 0; i < d / 2; ++i) {
    double f = 1.0 / std::pow(c.ropeTheta, static_cast<double>(2 * i) / static_cast<double>(d));
    double wave = 2 * pi / f;
    if (c.ropeFactor > 0 && wave > lowWave) {
      f /= c.ropeFactor;
    } else if (c.ropeFactor > 0 && wave >= highWave) {
      double smooth = (static_cast<double>(c.originalMaxPositions) / wave - c.lowFreqFactor) /
                      (c.highFreqFactor - c.lowFreqFactor);
      f = (1 - smooth) * f / c.ropeFactor + smooth * f;
    }
    inv.push_back(f);
  }
  return inv;
}

std::unique_ptr<Model> buildLlama(LlamaConfig cfg, const ModelConfig &c, bool layersOnly) {
  if (c.layers >= 0) cfg.layers = c.layers;
  validate(cfg);
  if (c.seq <= 0) throw Error(cfg.name + ": seq must be positive");
  ParamInit init(c.seed, c.dtype);
  if (layersOnly) {
    return std::make_unique<LlamaLayersModel>(cfg, c, std::move(init));
  }
  checkMemory(cfg.name, llamaParameterCount(cfg), c);
  return std::make_unique<LlamaModel>(cfg, c, std::move(init));
}

} // namespace rcjit::tools
