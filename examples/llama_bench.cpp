// A Llama-style decoder (RMSNorm, RoPE-free grouped-query attention, SwiGLU) timed eager
// vs full vs regional: the Llama benchmark in code, at a size that runs in a second.
#include <rcjit/rcjit.h>

#include <chrono>
#include <cstdio>

using namespace rcjit;

constexpr int64_t kHidden = 256, kHeads = 8, kKvHeads = 2, kHeadDim = kHidden / kHeads;
constexpr int64_t kFfn = 688, kLayers = 6, kSeq = 64;

struct Decoder : nn::Module<Decoder> {
  nn::RMSNorm norm1{kHidden}, norm2{kHidden};
  nn::Linear q, k, v, o, gate, up, down;
  explicit Decoder(uint64_t s)
      : q(kHidden, kHidden, false, s), k(kHidden, kKvHeads * kHeadDim, false, s + 1),
        v(kHidden, kKvHeads * kHeadDim, false, s + 2), o(kHidden, kHidden, false, s + 3),
        gate(kHidden, kFfn, false, s + 4), up(kHidden, kFfn, false, s + 5),
        down(kFfn, kHidden, false, s + 6) {
    for (auto [name, m] : {std::pair<const char *, nn::ModuleBase *>{"norm1", &norm1},
                           {"norm2", &norm2},
                           {"q", &q},
                           {"k", &k},
                           {"v", &v},
                           {"o", &o},
                           {"gate", &gate},
                           {"up", &up},
                           {"down", &down}}) {
      register_module(name, *m);
    }
  }
  static Tensor heads(const Tensor &x, int64_t n) { // [b, s, n*d] -> [b, n, s, d]
    return transpose(reshape(x, {x.size(0), x.size(1), n, kHeadDim}), 1, 2);
  }
  static Tensor repeatKv(const Tensor &x) { // [b, kv, s, d] -> [b, heads, s, d]
    Tensor e =
        expand(unsqueeze(x, 2), {x.size(0), kKvHeads, kHeads / kKvHeads, x.size(2), kHeadDim});
    return reshape(e, {x.size(0), kHeads, x.size(2), kHeadDim});
  }
  Tensor forward(const Tensor &x) {
    Tensor h = norm1(x);
    Tensor a = scaled_dot_product_attention(heads(q(h), kHeads), repeatKv(heads(k(h), kKvHeads)),
                                            repeatKv(heads(v(h), kKvHeads)), true);
    Tensor y = x + o(reshape(transpose(a, 1, 2), {x.size(0), x.size(1), kHidden}));
    return y + down(silu(gate(norm2(y))) * up(norm2(y)));
  }
};

struct Llama : nn::Module<Llama> {
  nn::ModuleList<Decoder> layers;
  nn::RMSNorm norm{kHidden};
  Llama() {
    for (int i = 0; i < kLayers; ++i) layers.emplace_back(10 * i + 1);
    register_module("layers", layers);
    register_module("norm", norm);
  }
  Tensor forward(Tensor x) {
    for (Decoder &d : layers) x = d(x);
    return norm(x);
  }
};

template <class F> double ms(F &&f) {
  auto t0 = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

int main() {
  rcjit::NoGradGuard noGrad; // inference: parameters require grad, record nothing
  Llama model;
  Tensor x = Tensor::randn({1, kSeq, kHidden}, 3);
  Tensor ref = model(x);
  std::printf("%-9s %12s %14s %8s\n", "mode", "first ms", "inference ms", "matches");
  double eager = ms([&] { model(x); });
  std::printf("%-9s %12s %14.3f %8s\n", "eager", "-", eager, "-");
  bool ok = true;
  for (Mode mode : {Mode::full, Mode::regional}) {
    CompileOptions opts;
    opts.mode = mode;
    auto fast = compile(model, opts);
    Tensor y;
    double first = ms([&] { y = fast(x); });
    double steady = 1e30;
    for (int i = 0; i < 5; ++i) steady = std::min(steady, ms([&] { y = fast(x); }));
    bool same = allclose(y, ref, 1e-3, 1e-4);
    ok = ok && same;
    std::printf("%-9s %12.3f %14.3f %8s\n", mode == Mode::full ? "full" : "regional", first, steady,
                same ? "yes" : "NO");
  }
  return ok ? 0 : 1;
}
