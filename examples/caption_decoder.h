// A small GPT-style caption decoder (token + position embeddings, pre-norm blocks with causal
// self-attention and a GELU MLP, LM head), shared by examples/captioning.cpp and
// bench/dynamic_bench.cpp. Public API only. The sequence dim is never spelled as a number
// inside the model (reshapes infer it with -1), so it can be symbolic.
#pragma once
#include <rcjit/rcjit.h>

#include <cstdint>

namespace caption {

constexpr int64_t kVocab = 1024, kHidden = 128, kHeads = 4, kLayers = 2, kContext = 256;

struct Attention : rcjit::nn::Module<Attention> {
  rcjit::nn::Linear qkv, proj;
  explicit Attention(uint64_t seed)
      : qkv(kHidden, 3 * kHidden, true, seed), proj(kHidden, kHidden, true, seed + 1) {
    register_module("qkv", qkv);
    register_module("proj", proj);
  }
  // [b, s, hidden] -> [b, heads, s, hidden / heads]
  static rcjit::Tensor heads(const rcjit::Tensor &x) {
    return rcjit::transpose(rcjit::reshape(x, {x.size(0), -1, kHeads, kHidden / kHeads}), 1, 2);
  }
  rcjit::Tensor forward(const rcjit::Tensor &x) {
    rcjit::Tensor t = qkv(x);
    rcjit::Tensor q = heads(rcjit::slice(t, -1, 0, kHidden));
    rcjit::Tensor k = heads(rcjit::slice(t, -1, kHidden, 2 * kHidden));
    rcjit::Tensor v = heads(rcjit::slice(t, -1, 2 * kHidden, 3 * kHidden));
    rcjit::Tensor a = rcjit::scaled_dot_product_attention(q, k, v, /*causal=*/true);
    return proj(rcjit::reshape(rcjit::transpose(a, 1, 2), {x.size(0), -1, kHidden}));
  }
};

struct Block : rcjit::nn::Module<Block> {
  rcjit::nn::LayerNorm ln1{kHidden}, ln2{kHidden};
  Attention attn;
  rcjit::nn::Linear fc, out;
  explicit Block(uint64_t seed)
      : attn(seed), fc(kHidden, 4 * kHidden, true, seed + 2),
        out(4 * kHidden, kHidden, true, seed + 3) {
    register_module("ln1", ln1);
    register_module("attn", attn);
    register_module("ln2", ln2);
    register_module("fc", fc);
    register_module("out", out);
  }
  rcjit::Tensor forward(const rcjit::Tensor &x) {
    rcjit::Tensor h = x + attn(ln1(x));
    return h + out(rcjit::gelu(fc(ln2(h))));
  }
};

/// ids [batch, seq] (i64, seq <= kContext) -> logits [batch, seq, kVocab]. Causal: row i
/// depends on tokens 0..i only, so padding appended after a request leaves its rows unchanged.
struct Decoder : rcjit::nn::Module<Decoder> {
  rcjit::nn::Embedding tok{kVocab, kHidden, 1}, pos{kContext, kHidden, 2};
  rcjit::nn::ModuleList<Block> blocks;
  rcjit::nn::LayerNorm ln_f{kHidden};
  rcjit::nn::Linear head{kHidden, kVocab, false, 3};
  Decoder() {
    for (int64_t i = 0; i < kLayers; ++i) blocks.emplace_back(static_cast<uint64_t>(10 * i + 10));
    register_module("tok", tok);
    register_module("pos", pos);
    register_module("blocks", blocks);
    register_module("ln_f", ln_f);
    register_module("head", head);
  }
  rcjit::Tensor forward(const rcjit::Tensor &ids) {
    rcjit::Tensor x = tok(ids) + rcjit::slice(pos.weight, 0, 0, ids.size(1));
    for (Block &b : blocks) x = b(x);
    return head(ln_f(x));
  }
};

} // namespace caption
