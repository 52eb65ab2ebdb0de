// Training a captioner on variable-length captions (the torch.compile guide's workflow, at
// example size; `rcjit train --model vit-gpt2 --strategy all` runs every strategy on a
// ViT + GPT-2): images through a patch encoder, captions through the causal decoder of
// caption_decoder.h, AdamW, labels padded with -100. Each batch is padded to its longest
// caption rounded up to 8 and the sequence dim is marked dynamic, so one symbolic entry
// (regional: one program pair per distinct layer) serves every length. The compiled run
// must give eager's losses on the same batches and never fall back (exit 1 otherwise).
//
//   example_caption_training [--steps N]
#include "caption_decoder.h"

#include <rcjit/rcjit.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

using namespace rcjit;

namespace {

// 16x16 images in 4x4 patches -> one image vector added to every caption position.
struct Captioner : nn::Module<Captioner> {
  nn::Linear patch{3 * 4 * 4, caption::kHidden, true, 40};
  caption::Decoder decoder;
  Captioner() {
    register_module("patch", patch);
    register_module("decoder", decoder);
  }
  Tensor forward(const Tensor &pixels, const Tensor &ids) {
    const int64_t b = pixels.size(0);
    // [b, 3, 16, 16] -> [b, 16 patches, 48] -> mean over patches -> [b, 1, hidden]
    Tensor p = permute(reshape(pixels, {b, 3, 4, 4, 4, 4}), {0, 2, 4, 1, 3, 5});
    Tensor image = mean(patch(reshape(p, {b, 16, 48})), {1}, true);
    caption::Decoder &d = decoder;
    // positions looked up like tokens (not a slice of the table), so the backward's sizes
    // stay a multiple of the sequence length and one symbolic entry trains every length
    Tensor x = d.tok(ids) + d.pos(Tensor::arange(ids.size(1))) + image;
    for (caption::Block &blk : d.blocks) x = blk(x);
    return d.head(d.ln_f(x));
  }
};

uint64_t splitmix(uint64_t &s) {
  uint64_t z = (s += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

struct Batch {
  Tensor pixels, ids, labels;
};

// Caption lengths as the guide draws them: 90 % 5-32 tokens, 9 % 33-64, 1 % 65-255.
Batch makeBatch(int step, int64_t batch) {
  uint64_t s = 1000 + static_cast<uint64_t>(step);
  std::vector<std::vector<int64_t>> caps;
  int64_t longest = 0;
  for (int64_t i = 0; i < batch; ++i) {
    uint64_t u = splitmix(s) % 100;
    int64_t len = u < 90   ? 5 + static_cast<int64_t>(splitmix(s) % 28)
                  : u < 99 ? 33 + static_cast<int64_t>(splitmix(s) % 32)
                           : 65 + static_cast<int64_t>(splitmix(s) % 191);
    int64_t start = static_cast<int64_t>(splitmix(s) % 500), stride = 1 + i % 5;
    std::vector<int64_t> c;
    for (int64_t k = 0; k <= len; ++k)
      c.push_back(1 + (start + k * stride) % (caption::kVocab - 1));
    longest = std::max(longest, len);
    caps.push_back(std::move(c));
  }
  const int64_t padded = (longest + 7) / 8 * 8;
  std::vector<int64_t> ids(static_cast<size_t>(batch * padded), 0), labels(ids.size(), -100);
  for (int64_t i = 0; i < batch; ++i) {
    for (size_t k = 0; k + 1 < caps[i].size(); ++k) {
      ids[static_cast<size_t>(i * padded) + k] = caps[i][k];
      labels[static_cast<size_t>(i * padded) + k] = caps[i][k + 1];
    }
  }
  Batch b{Tensor::randn({batch, 3, 16, 16}, s), Tensor::from_vector(ids, {batch, padded}),
          Tensor::from_vector(labels, {batch, padded})};
  mark_dynamic(b.ids, 1, 8, caption::kContext);
  mark_dynamic(b.labels, 1, 8, caption::kContext);
  return b;
}

} // namespace

int main(int argc, char **argv) {
  int steps = 20;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--steps") == 0) steps = std::atoi(argv[i + 1]);
  }
  const int64_t batch = 4;
  bool ok = true;
  std::vector<double> eagerLoss;
  for (const Mode mode : {Mode::eager, Mode::regional}) {
    Captioner net;
    optim::AdamW opt(net.parameters(), {.lr = 1e-3});
    CompileOptions o;
    o.mode = mode;
    o.name = "captioner";
    auto loss = compile([&](const Tensor &px, const Tensor &ids,
                            const Tensor &labels) { return cross_entropy(net(px, ids), labels); },
                        o);
    auto t0 = std::chrono::steady_clock::now();
    double warmup = 0;
    for (int step = 0; step < steps; ++step) {
      Batch b = makeBatch(step, batch);
      opt.zero_grad();
      Tensor l = loss(b.pixels, b.ids, b.labels);
      l.backward();
      opt.step();
      const double v = l.item();
      if (mode == Mode::eager) {
        eagerLoss.push_back(v);
      } else if (std::abs(v - eagerLoss[step]) > 1e-3 * std::abs(eagerLoss[step])) {
        std::printf("step %d: loss %.6f, eager %.6f\n", step, v, eagerLoss[step]);
        ok = false;
      }
      if (step == std::min(steps, 10) - 1)
        warmup = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
    double total = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    CompileStats st = loss.stats();
    std::printf("%-8s %d steps in %.2f s (first 10: %.2f s), %d compiles, %d recompiles, %d "
                "fallbacks\n",
                mode == Mode::eager ? "eager" : "regional", steps, total, warmup, st.compiles,
                st.recompiles, st.fallbacks);
    if (mode != Mode::eager) ok = ok && st.fallbacks == 0 && st.recompiles == 0;
  }
  std::printf("%s\n", ok ? "losses match eager" : "MISMATCH");
  return ok ? 0 : 1;
}
