// GPT-2: attention, MLP, blocks (optionally with cross-attention), model and LM head.
#include "models/ModelGpt2.h"

#include <cmath>

namespace rcjit::tools {

namespace {

// Hugging Face scales the residual projections' init by 1/sqrt(2 * layers).
double residualStd(const Gpt2Config &c) { return 0.02 / std::sqrt(2.0 * std::max(1, c.layers)); }

// GPT-2's "gelu_new": the tanh approximation of GELU.
Tensor geluTanh(const Tensor &x) {
  Tensor inner = (x + x * x * x * 0.044715) * 0.7978845608028654;
  return x * 0.5 * (tanh(inner) + 1.0);
}

void validate(const Gpt2Config &c) {
  if (c.hidden <= 0 || c.heads <= 0 || c.hidden % c.heads != 0 || c.layers < 0 || c.vocab <= 0 ||
      c.context <= 0) {
    throw Error(c.name + ": bad config (hidden " + std::to_string(c.hidden) + ", heads " +
                std::to_string(c.heads) + "): heads must divide hidden");
  }
}

class Gpt2 : public Model {
public:
  Gpt2(const Gpt2Config &cfg, ParamInit init) : cfg_(cfg), net_(cfg, init) {}
  std::vector<Tensor> makeInputs(const ModelConfig &c) const override {
    return {randomTokens(c.batch, c.seq, cfg_.vocab, c.seed)};
  }
  Tensor forward(const std::vector<Tensor> &inputs) override { return net_(inputs.at(0)); }
  nn::ModuleBase &module() override { return net_; }

private:
  Gpt2Config cfg_;
  Gpt2LMHeadModel net_;
};

} // namespace

Gpt2Attention::Gpt2Attention(const Gpt2Config &c, ParamInit &init, bool cross) : heads(c.heads) {
  init.linear(c_attn, c.hidden, (cross ? 2 : 3) * c.hidden);
  init.linear(c_proj, c.hidden, c.hidden, residualStd(c));
  register_module("c_attn", c_attn);
  register_module("c_proj", c_proj);
  if (cross) {
    q_attn = std::make_unique<nn::Linear>(1, 1);
    init.linear(*q_attn, c.hidden, c.hidden);
    register_module("q_attn", *q_attn);
  }
}

Tensor Gpt2Attention::forward(const Tensor &x) {
  Tensor qkv = c_attn(x);
  int64_t h = x.size(-1);
  Tensor q = splitHeads(slice(qkv, -1, 0, h), heads);
  Tensor k = splitHeads(slice(qkv, -1, h, 2 * h), heads);
  Tensor v = splitHeads(slice(qkv, -1, 2 * h, 3 * h), heads);
  return c_proj(mergeHeads(scaled_dot_product_attention(q, k, v, true)));
}

Tensor Gpt2Attention::forward(const Tensor &x, const Tensor &encoder) {
  Tensor kv = c_attn(encoder);
  int64_t h = x.size(-1);
  Tensor q = splitHeads((*q_attn)(x), heads);
  Tensor k = splitHeads(slice(kv, -1, 0, h), heads);
  Tensor v = splitHeads(slice(kv, -1, h, 2 * h), heads);
  return c_proj(mergeHeads(scaled_dot_product_attention(q, k, v, false)));
}

Tensor Gpt2MLP::forward(const Tensor &x) { return c_proj(geluTanh(c_fc(x))); }

Gpt2MLP::Gpt2MLP(const Gpt2Config &c, ParamInit &init) {
  init.linear(c_fc, c.hidden, 4 * c.hidden);
  init.linear(c_proj, 4 * c.hidden, c.hidden, residualStd(c));
  register_module("c_fc", c_fc);
  register_module("c_proj", c_proj);
}

Gpt2Block::Gpt2Block(const Gpt2Config &c, ParamInit &init)
    : ln_1(c.hidden, c.eps), ln_2(c.hidden, c.eps), attn(c, init, false), mlp(c, init) {
  init.norm(ln_1);
  init.norm(ln_2);
  register_module("ln_1", ln_1);
  register_module("attn", attn);
  if (c.crossAttention) {
    ln_cross_attn = std::make_unique<nn::LayerNorm>(c.hidden, c.eps);
    crossattention = std::make_unique<Gpt2Attention>(c, init, true);
    init.norm(*ln_cross_attn);
    register_module("ln_cross_attn", *ln_cross_attn);
    register_module("crossattention", *crossattention);
  }
  register_module("ln_2", ln_2);
  register_module("mlp", mlp);
}

Tensor Gpt2Block::forward(const Tensor &x) {
  Tensor h = x + attn(ln_1(x));
  return h + mlp(ln_2(h));
}

Tensor Gpt2Block::forward(const Tensor &x, const Tensor &encoder) {
  if (!crossattention) throw Error("Gpt2Block: an encoder input needs crossAttention");
  Tensor h = x + attn(ln_1(x));
  h = h + (*crossattention)((*ln_cross_attn)(h), encoder);
  return h + mlp(ln_2(h));
}

Gpt2Model::Gpt2Model(const Gpt2Config &c, ParamInit &init) : ln_f(c.hidden, c.eps), name(c.name) {
  init.embedding(wte, c.vocab, c.hidden);
  init.embedding(wpe, c.context, c.hidden);
  for (int i = 0; i < c.layers; ++i) h.emplace_back(c, init);
  init.norm(ln_f);
  register_module("wte", wte);
  register_module("wpe", wpe);
  register_module("h", h);
  register_module("ln_f", ln_f);
}

Tensor Gpt2Model::embed(const Tensor &ids) {
  if (ids.dim() != 2) throw Error(name + ": token ids must be [batch, seq]");
  int64_t seq = ids.size(1), context = wpe.weight.size(0);
  if (seq > context) {
    throw Error(name + ": sequence length " + std::to_string(seq) + " exceeds the context of " +
                std::to_string(context) + " positions");
  }
  // positions looked up like tokens (as GPT-2 does), not sliced: the gradient is then a
  // scatter-add into the whole table, whose size does not depend on the sequence length
  return wte(ids) + wpe(Tensor::arange(seq, DType::i64, ids.device()));
}

Tensor Gpt2Model::forward(const Tensor &ids) {
  Tensor x = embed(ids);
  for (Gpt2Block &block : h) x = block(x);
  return ln_f(x);
}

Tensor Gpt2Model::forward(const Tensor &ids, const Tensor &encoder) {
  Tensor x = embed(ids);
  for (Gpt2Block &block : h) x = block(x, encoder);
  return ln_f(x);
}

Gpt2LMHeadModel::Gpt2LMHeadModel(const Gpt2Config &c, ParamInit &init) : transformer(c, init) {
  register_module("transformer", transformer);
}

Gpt2Config gpt2Small() {
  Gpt2Config c;
  c.name = "gpt2";
  c.hidden = 768;
  c.layers = 12;
  c.heads = 12;
  c.vocab = 50257;
  c.context = 1024;
  return c;
}

Gpt2Config gpt2Xl() {
  Gpt2Config c = gpt2Small();
  c.name = "gpt2-xl";
  c.hidden = 1600;
  c.layers = 48;
  c.heads = 25;
  return c;
}

int64_t gpt2ParameterCount(const Gpt2Config &c) {
  int64_t h = c.hidden;
  int64_t attn = 3 * h * h + 3 * h + h * h + h;
  int64_t mlp = 4 * h * h + 4 * h + 4 * h * h + h;
  int64_t cross = c.crossAttention ? 2 * h + (h * h + h) + (2 * h * h + 2 * h) + (h * h + h) : 0;
  int64_t block = 4 * h + attn + mlp + cross;
  return c.vocab * h + c.context * h + c.layers * block + 2 * h;
}

std::unique_ptr<Model> buildGpt2(Gpt2Config cfg, const ModelConfig &c) {
  if (c.layers >= 0) cfg.layers = c.layers;
  validate(cfg);
  ParamInit init(c.seed, c.dtype);
  checkMemory(cfg.name, gpt2ParameterCount(cfg), c);
  return std::make_unique<Gpt2>(cfg, std::move(init));
}

} // namespace rcjit::tools
