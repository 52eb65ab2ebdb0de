// Compiled training: grad-mode calls compile a forward and a backward program whose
// gradients equal eager autograd's; guards on requires_grad; loss curves equal eager's.
#include <gtest/gtest.h>

#include <rcjit/rcjit.h>

#include "tests/AutogradTestUtil.h"

#include "models/ModelGpt2.h"
#include "models/Models.h"

using namespace rcjit;

namespace {

struct Mlp : nn::Module<Mlp> {
  nn::Linear fc1{8, 16, true, 1}, fc2{16, 4, true, 2};
  Mlp() {
    register_module("fc1", fc1);
    register_module("fc2", fc2);
  }
  Tensor forward(const Tensor &x) { return fc2(gelu(fc1(x))); }
};

// The gradients of m's parameters after one backward of `loss()` from zero.
std::vector<Tensor> gradsOf(const std::function<Tensor()> &loss, nn::ModuleBase &m,
                            double *value = nullptr) {
  m.zero_grad();
  std::vector<Tensor> params = m.parameters();
  Tensor l = loss();
  if (value) *value = l.item();
  l.backward();
  std::vector<Tensor> g;
  for (const Tensor &p : params) g.push_back(p.grad());
  return g;
}

TEST(CompiledTraining, MlpGradientsEqualEager) {
  Mlp net;
  Tensor x = Tensor::randn({5, 8}, 3), y = Tensor::randn({5, 4}, 4);
  auto cf = compile([&](const Tensor &a, const Tensor &b) { return mse_loss(net(a), b); });
  double eagerLoss = 0, compiledLoss = 0;
  std::vector<Tensor> want = gradsOf([&] { return mse_loss(net(x), y); }, net, &eagerLoss);
  for (int call = 0; call < 2; ++call) { // the second call reuses the entry
    std::vector<Tensor> got = gradsOf([&] { return cf(x, y); }, net, &compiledLoss);
    EXPECT_NEAR(compiledLoss, eagerLoss, 1e-5 * std::abs(eagerLoss));
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_TRUE(got[i].defined()) << "parameter " << i;
      EXPECT_TRUE(allclose(got[i], want[i], 1e-4, 1e-5)) << "parameter " << i;
    }
  }
  CompileStats st = cf.stats();
  EXPECT_EQ(st.compiles, 2) << "one forward and one backward program";
  EXPECT_EQ(st.recompiles, 0);
  EXPECT_NE(cf.explain().find("backward"), std::string::npos) << cf.explain();
}

TEST(CompiledTraining, InputGradientsAndGradMode) {
  auto cf = compile([](const Tensor &a, const Tensor &b) { return sum(tanh(a) * b, {}); });
  Tensor a = Tensor::randn({3, 4}, 1), b = Tensor::randn({4}, 2);
  a.requires_grad_();
  Tensor l = cf(a, b);
  EXPECT_TRUE(l.requires_grad());
  l.backward();
  Tensor t = tanh(a.detach());
  EXPECT_TRUE(allclose(a.grad(), (1.0 - t * t) * b, 1e-5, 1e-6));
  {
    NoGradGuard off; // another entry: inference, nothing requires grad
    Tensor r = cf(a, b);
    EXPECT_FALSE(r.requires_grad());
  }
  EXPECT_EQ(cf.stats().recompiles, 1);
  EXPECT_NE(cf.explain().find("requires_grad"), std::string::npos) << cf.explain();
}

// Regional mode compiles each stage's forward and backward; a graph break splits both the
// forward and the backward into segments. Gradients equal eager autograd's.
TEST(CompiledTraining, RegionalAndGraphBreakGradientsEqualEager) {
  Mlp net;
  Tensor x = Tensor::randn({5, 8}, 3), y = Tensor::randn({5, 4}, 4);
  std::vector<Tensor> want = gradsOf([&] { return mse_loss(net(x), y); }, net);
  CompileOptions regional;
  regional.mode = Mode::regional;
  auto cr =
      compile([&](const Tensor &a, const Tensor &b) { return mse_loss(net(a), b); }, regional);
  auto cb = compile([&](const Tensor &a, const Tensor &b) {
    Tensor h = net(a);
    if (sum(h, {}).item() > 1e9) h = h * 0.0; // a host read: a graph break
    return mse_loss(h, b);
  });
  std::vector<std::function<Tensor()>> calls = {[&] { return cr(x, y); }, [&] { return cb(x, y); }};
  for (int round = 0; round < 2; ++round) { // the second round runs what the first compiled
    for (const auto &call : calls) {
      std::vector<Tensor> got = gradsOf(call, net);
      for (size_t i = 0; i < got.size(); ++i) {
        ASSERT_TRUE(got[i].defined()) << "parameter " << i;
        EXPECT_TRUE(allclose(got[i], want[i], 1e-4, 1e-5)) << "parameter " << i;
      }
    }
  }
  EXPECT_NE(cr.explain().find("backward steps"), std::string::npos) << cr.explain();
  EXPECT_EQ(cr.stats().recompiles, 0);
  // two segments (before and after the host read), each a forward and a backward
  EXPECT_EQ(cb.stats().compiles, 4) << cb.explain();
  EXPECT_GE(cb.stats().cache_hits, 4) << cb.explain();
  EXPECT_NE(cb.explain().find("a forward and a backward per segment"), std::string::npos)
      << cb.explain();
}

// PyTorch's regional-compilation recipe, trained: the glue (the first linear) and one layer
// each compile a forward and a backward; the other 63 layers reuse both.
TEST(CompiledTraining, RegionalToy64CompilesOneLayerForwardAndBackward) {
  tools::ModelConfig c;
  c.batch = 2;
  c.seq = 5; // training stages are keyed apart from inference ones (and by shape)
  auto m = tools::findModel("toy64").build(c);
  Tensor x = Tensor::randn({2, 5, 10}, 6), y = Tensor::randn({2, 5, 10}, 7);
  std::vector<Tensor> want = gradsOf([&] { return mse_loss(m->forward({x}), y); }, m->module());
  CompileOptions o;
  o.mode = Mode::regional;
  auto cf = compile([&](const Tensor &t) { return m->forward({t}); }, o);
  for (int call = 0; call < 2; ++call) {
    std::vector<Tensor> got = gradsOf([&] { return mse_loss(cf(x), y); }, m->module());
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_TRUE(got[i].defined()) << "parameter " << i;
      EXPECT_TRUE(allclose(got[i], want[i], 1e-4, 1e-5)) << "parameter " << i;
    }
  }
  CompileStats st = cf.stats();
  EXPECT_EQ(st.compiles, 4) << "the glue's and the layer's forward and backward\n" << cf.explain();
  EXPECT_GE(st.cache_hits, 2 * 63) << "63 layers reuse the forward and the backward";
  EXPECT_EQ(st.recompiles, 0);
}

// A mark_dynamic sequence dim: one forward and one backward program serve every length,
// in full and regional mode, and their gradients equal eager's at each length.
TEST(CompiledTraining, SymbolicBackwardServesEveryLength) {
  auto model = test::tinyGpt2(2, 8);
  auto loss = [&](const Tensor &in, const Tensor &tg) {
    return cross_entropy(model->forward({in}), tg);
  };
  for (Mode mode : {Mode::full, Mode::regional}) {
    CompileOptions o;
    o.mode = mode;
    auto cf = compile(loss, o);
    for (int64_t len : {6, 9, 7, 12}) {
      std::vector<int64_t> tokens;
      for (int64_t i = 0; i < 2 * len; ++i) tokens.push_back((i * 7 + 3) % 50);
      Tensor ids = Tensor::from_vector(tokens, {2, len});
      Tensor targets =
          Tensor::from_vector(std::vector<int64_t>(tokens.rbegin(), tokens.rend()), {2, len});
      mark_dynamic(ids, 1, 2, 16);
      mark_dynamic(targets, 1, 2, 16);
      std::vector<Tensor> want = gradsOf([&] { return loss(ids, targets); }, model->module());
      std::vector<Tensor> got = gradsOf([&] { return cf(ids, targets); }, model->module());
      ASSERT_EQ(got.size(), want.size());
      for (size_t i = 0; i < got.size(); ++i) {
        ASSERT_TRUE(got[i].defined()) << "parameter " << i << " at length " << len;
        EXPECT_TRUE(allclose(got[i], want[i], 1e-4, 1e-5))
            << "parameter " << i << " at length " << len;
      }
    }
    EXPECT_EQ(cf.stats().recompiles, 0) << cf.explain();
    if (mode == Mode::full) {
      EXPECT_EQ(cf.stats().compiles, 2) << cf.explain();
    }
  }
}

TEST(CompiledTraining, AdamWLossCurveEqualsEager) {
  auto run = [](bool compiled) {
    Mlp net;
    Tensor x = Tensor::randn({16, 8}, 7), y = Tensor::randn({16, 4}, 8);
    auto cf = compile([&](const Tensor &a, const Tensor &b) { return mse_loss(net(a), b); });
    optim::AdamW opt(net.parameters(), {.lr = 1e-2});
    std::vector<double> losses;
    for (int step = 0; step < 20; ++step) {
      opt.zero_grad();
      Tensor l = compiled ? cf(x, y) : mse_loss(net(x), y);
      l.backward();
      opt.step();
      losses.push_back(l.item());
    }
    return losses;
  };
  std::vector<double> eager = run(false), compiled = run(true);
  for (size_t i = 0; i < eager.size(); ++i) {
    EXPECT_NEAR(compiled[i], eager[i], 1e-3 * std::abs(eager[i])) << "step " << i;
  }
  EXPECT_LT(eager.back(), 0.8 * eager.front());
}

// 50 AdamW steps of a 2-layer GPT-2 on one synthetic batch: the loss curves of eager,
// full and regional training agree to 1e-3 relative at every step, and the loss falls.
TEST(CompiledTraining, Gpt2AdamWLossCurvesOfEveryModeAgree) {
  std::vector<int64_t> tokens;
  for (int i = 0; i < 4 * 12; ++i) tokens.push_back((i * 11 + 5) % 50);
  Tensor ids = Tensor::from_vector(tokens, {4, 12});
  Tensor targets =
      Tensor::from_vector(std::vector<int64_t>(tokens.rbegin(), tokens.rend()), {4, 12});
  auto run = [&](int mode) { // 0 eager, 1 full, 2 regional
    auto model = test::tinyGpt2(4, 12);
    auto loss = [&](const Tensor &in, const Tensor &tg) {
      return cross_entropy(model->forward({in}), tg);
    };
    CompileOptions o;
    o.mode = mode == 2 ? Mode::regional : Mode::full;
    auto cf = compile(loss, o);
    optim::AdamW opt(model->module().parameters(), {.lr = 3e-3});
    std::vector<double> losses;
    for (int step = 0; step < 50; ++step) {
      opt.zero_grad();
      Tensor l = mode ? cf(ids, targets) : loss(ids, targets);
      l.backward();
      opt.step();
      losses.push_back(l.item());
    }
    if (mode) {
      EXPECT_EQ(cf.stats().recompiles, 0);
    }
    return losses;
  };
  std::vector<double> eager = run(0), full = run(1), regional = run(2);
  for (size_t i = 0; i < eager.size(); ++i) {
    EXPECT_NEAR(full[i], eager[i], 1e-3 * std::abs(eager[i])) << "full, step " << i;
    EXPECT_NEAR(regional[i], eager[i], 1e-3 * std::abs(eager[i])) << "regional, step " << i;
  }
  EXPECT_LT(eager.back(), 0.5 * eager.front());
}

TEST(CompiledTraining, TinyGpt2GradientsEqualEager) {
  auto model = test::tinyGpt2(2, 8);
  std::vector<int64_t> tokens;
  for (int i = 0; i < 16; ++i) tokens.push_back((i * 7 + 3) % 50);
  Tensor ids = Tensor::from_vector(tokens, {2, 8});
  Tensor targets =
      Tensor::from_vector(std::vector<int64_t>(tokens.rbegin(), tokens.rend()), {2, 8});
  auto loss = [&](const Tensor &in, const Tensor &tg) {
    return cross_entropy(model->forward({in}), tg);
  };
  auto cf = compile(loss);
  std::vector<Tensor> want = gradsOf([&] { return loss(ids, targets); }, model->module());
  std::vector<Tensor> got = gradsOf([&] { return cf(ids, targets); }, model->module());
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_TRUE(got[i].defined()) << "parameter " << i;
    EXPECT_TRUE(allclose(got[i], want[i], 1e-4, 1e-5)) << "parameter " << i;
  }
}

} // namespace

// An input that requires grad but that the function does not use: its gradient is zero (or
// undefined, as eager autograd leaves it), never another input's or uninitialized memory.
TEST(CompiledTraining, ATiedWeightsGradientsFromTwoCompiledCallsShareOneBlock) {
  // w (1 MiB) is an embedding in one compiled function and a linear's weight in another, as
  // gpt2's tied token embedding is in regional mode: the first's backward scatters its rows
  // into the second's gradient of w in that gradient's block, so the sum takes no block
  Tensor ids = Tensor::from_vector(std::vector<int64_t>{3, 7, 3, 4095, 0, 7, 7, 12}, {2, 4});
  auto embedFn = [](const Tensor &w, const Tensor &i) { return embedding(w, i) * 2.0; };
  auto headFn = [](const Tensor &h, const Tensor &w) { return sum(tanh(linear(h, w))); };
  Tensor wa = Tensor::randn({4096, 64}, 1).requires_grad_();
  Tensor wb = Tensor::randn({4096, 64}, 1).requires_grad_();
  headFn(embedFn(wa, ids), wb).backward(); // eager, two leaves: the two gradients apart
  Tensor want = wa.grad() + wb.grad();
  auto embed = compile(embedFn);
  auto head = compile(headFn);
  const int64_t block = 4096 * 64 * 4;
  for (int call = 0; call < 2; ++call) { // the first compiles both backwards
    Tensor w = Tensor::randn({4096, 64}, 1).requires_grad_();
    Tensor l = head(embed(w, ids), w);
    const int64_t before = memory_stats().current_bytes;
    reset_peak_memory_stats();
    l.backward();
    if (call == 1) {
      EXPECT_LT(memory_stats().peak_bytes - before, block + block / 2) << "a second block";
    }
    EXPECT_TRUE(allclose(w.grad(), want, 1e-4, 1e-3)) << "call " << call; // rows of ~100
  }
  // alone (no other gradient of w reached it first), the rows get a block of their own
  Tensor w = Tensor::randn({4096, 64}, 1).requires_grad_();
  sum(embed(w, ids)).backward();
  Tensor rows = embedding_backward(Tensor::full({2, 4, 64}, 2.0), ids, 4096);
  EXPECT_TRUE(allclose(w.grad(), rows, 0, 0));
}

TEST(CompiledTraining, UnusedInputsGetNoGradient) {
  Tensor a = Tensor::randn({8}, 1), b = Tensor::randn({8}, 2), c = Tensor::randn({8}, 3);
  for (Tensor *t : {&a, &b, &c}) t->requires_grad_();
  auto f = compile([](const Tensor &x, const Tensor &y, const Tensor &z) {
    (void)x;
    (void)z;
    return sum(exp(y));
  });
  std::vector<Tensor> g = rcjit::grad({f(a, b, c)}, {a, b, c});
  for (int i : {0, 2}) {
    if (g[i].defined()) {
      EXPECT_TRUE(allclose(g[i], Tensor::zeros({8}))) << "input " << i;
    }
  }
  EXPECT_TRUE(allclose(g[1], exp(b.detach()), 1e-5, 1e-6));
}
