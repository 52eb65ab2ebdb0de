// Training pieces: losses and optimizers against hand-computed references, gradient
// clipping, memory accounting, and small models whose training loss falls.
#include <gtest/gtest.h>

#include "tests/AutogradTestUtil.h"
#include "tests/TestUtil.h"

#include <cmath>
#include <memory>
#include <optional>
#include <vector>

#include <rcjit/rcjit.h>

#include "models/ModelGpt2.h"
#include "models/Models.h"

using namespace rcjit;

namespace {

using rcjit::test::errorOf;
using rcjit::test::expectValues;
using rcjit::test::f64;
using rcjit::test::leaf;

// ---- losses --------------------------------------------------------------------------

TEST(Losses, CrossEntropyValueAndGradientAreSoftmaxMinusOneHotOverTheCount) {
  Tensor logits = leaf({1, 2, 3, 0.5, -1, 2, 0, 0, 0}, {3, 3});
  Tensor target = Tensor::from_vector(std::vector<int64_t>{2, -100, 0}, {3});
  Tensor loss = cross_entropy(logits, target);
  std::vector<double> l = logits.to_vector<double>();
  auto lse = [&](int r) {
    double s = 0;
    for (int c = 0; c < 3; ++c) s += std::exp(l[r * 3 + c]);
    return std::log(s);
  };
  const double want = ((lse(0) - l[2]) + (lse(2) - l[6])) / 2;
  EXPECT_NEAR(loss.item(), want, 1e-12);
  loss.backward();
  std::vector<double> g(9, 0);
  for (int r : {0, 2}) {
    const int t = r == 0 ? 2 : 0;
    for (int c = 0; c < 3; ++c) g[r * 3 + c] = (std::exp(l[r * 3 + c] - lse(r)) - (c == t)) / 2;
  }
  expectValues(logits.grad(), g);
}

TEST(Losses, CrossEntropyWithEveryTargetIgnoredIsNaNWithAZeroGradient) {
  Tensor logits = leaf({1, 2, 3, 4}, {2, 2});
  Tensor target = Tensor::from_vector(std::vector<int64_t>{-1, -1}, {2});
  Tensor loss = cross_entropy(logits, target, -1);
  EXPECT_TRUE(std::isnan(loss.item()));
  loss.backward();
  expectValues(logits.grad(), {0, 0, 0, 0});
}

TEST(Losses, CrossEntropyOverBatchAndSequenceDims) {
  Tensor logits = Tensor::randn({2, 3, 5}, 4);
  Tensor target = Tensor::from_vector(std::vector<int64_t>{0, 1, 2, 3, 4, 0}, {2, 3});
  Tensor flat = cross_entropy(reshape(logits, {6, 5}), reshape(target, {6}));
  EXPECT_NEAR(cross_entropy(logits, target).item(), flat.item(), 1e-6);
}

TEST(Losses, CrossEntropyRejectsBadTargets) {
  Tensor logits = Tensor::randn({2, 3}, 1);
  std::string msg = errorOf([&] {
    cross_entropy(logits, Tensor::from_vector(std::vector<int64_t>{0, 3}, {2}));
  });
  EXPECT_NE(msg.find("target 3 is out of range for 3 classes"), std::string::npos) << msg;
  msg = errorOf([&] { cross_entropy(logits, Tensor::from_vector(std::vector<int64_t>{0}, {1})); });
  EXPECT_NE(msg.find("target shape [1] must be the logits' shape without the class dim, [2]"),
            std::string::npos)
      << msg;
  msg = errorOf([&] { cross_entropy(logits, Tensor::zeros({2})); });
  EXPECT_NE(msg.find("class indices"), std::string::npos) << msg;
}

TEST(Losses, MseLossValueAndGradient) {
  Tensor x = leaf({1, 2, 3, 4}, {2, 2});
  Tensor t = f64({0, 2, 5, 1}, {2, 2});
  Tensor loss = mse_loss(x, t);
  EXPECT_NEAR(loss.item(), (1 + 0 + 4 + 9) / 4.0, 1e-12);
  loss.backward();
  expectValues(x.grad(), {2 * 1 / 4.0, 0, 2 * -2 / 4.0, 2 * 3 / 4.0});
}

// ---- optimizers ----------------------------------------------------------------------

// Gives p the gradient c (by backward of sum(p * c)).
void setGradTo(Tensor &p, const std::vector<double> &c) { sum(p * f64(c, p.shape())).backward(); }

TEST(Optim, SgdWithMomentumAndWeightDecayMatchesTheFormula) {
  Tensor p = leaf({1, -2}, {2});
  optim::SGD opt({p}, {0.1, 0.9, 0.01});
  std::vector<double> ref = {1, -2}, buf = {0, 0};
  const std::vector<std::vector<double>> grads = {{0.5, 1}, {-1, 2}, {0.25, 0.25}};
  for (size_t step = 0; step < grads.size(); ++step) {
    opt.zero_grad();
    setGradTo(p, grads[step]);
    opt.step();
    for (int i = 0; i < 2; ++i) {
      double g = grads[step][i] + 0.01 * ref[i];
      buf[i] = step == 0 ? g : 0.9 * buf[i] + g;
      ref[i] -= 0.1 * buf[i];
    }
    expectValues(p, ref, 1e-12);
  }
  EXPECT_TRUE(p.is_leaf());
  EXPECT_TRUE(p.requires_grad());
}

TEST(Optim, AdamWThreeStepsMatchTheFormula) {
  Tensor p = leaf({0.5, -1, 2}, {3});
  optim::AdamWOptions o;
  o.lr = 0.1;
  o.weight_decay = 0.1;
  optim::AdamW opt({p}, o);
  std::vector<double> ref = {0.5, -1, 2}, m(3, 0), v(3, 0);
  const std::vector<std::vector<double>> grads = {{1, -0.5, 0.1}, {0.2, 0.3, -2}, {-1, 0, 0.5}};
  for (int t = 1; t <= 3; ++t) {
    opt.zero_grad();
    setGradTo(p, grads[t - 1]);
    opt.step();
    for (int i = 0; i < 3; ++i) {
      const double g = grads[t - 1][i];
      ref[i] *= 1 - o.lr * o.weight_decay;
      m[i] = o.beta1 * m[i] + (1 - o.beta1) * g;
      v[i] = o.beta2 * v[i] + (1 - o.beta2) * g * g;
      const double mhat = m[i] / (1 - std::pow(o.beta1, t));
      const double vhat = v[i] / (1 - std::pow(o.beta2, t));
      ref[i] -= o.lr * mhat / (std::sqrt(vhat) + o.eps);
    }
    expectValues(p, ref, 1e-12);
  }
}

TEST(Optim, ParametersWithoutAGradAreSkippedAndSetLrApplies) {
  Tensor a = leaf({1}, {1}), b = leaf({1}, {1});
  optim::AdamW opt({a, b}, {});
  setGradTo(a, {1});
  opt.step();
  expectValues(b, {1});
  EXPECT_LT(a.item(), 1);
  optim::SGD sgd({b});
  sgd.set_lr(0.5);
  setGradTo(b, {1});
  sgd.step();
  expectValues(b, {0.5});
  sgd.zero_grad();
  EXPECT_FALSE(b.grad().defined());
}

// Both optimizers through their base class: the same updates as called directly.
TEST(Optim, TheBaseClassStepsEitherOptimizer) {
  Tensor a = leaf({1, -2}, {2}), b = leaf({1, -2}, {2}), c = leaf({3}, {1}), d = leaf({3}, {1});
  optim::AdamW direct({a}, {.lr = 0.1});
  optim::SGD directSgd({c}, {.lr = 0.5, .momentum = 0.9});
  std::vector<std::unique_ptr<optim::Optimizer>> opts;
  opts.push_back(
      std::make_unique<optim::AdamW>(std::vector<Tensor>{b}, optim::AdamWOptions{.lr = 0.1}));
  opts.push_back(std::make_unique<optim::SGD>(std::vector<Tensor>{d},
                                              optim::SGDOptions{.lr = 0.5, .momentum = 0.9}));
  EXPECT_EQ(opts[0]->lr(), 0.1);
  EXPECT_EQ(opts[1]->parameters().size(), 1u);
  for (int step = 0; step < 3; ++step) {
    if (step == 2) {
      direct.set_lr(0.05);
      opts[0]->set_lr(0.05);
    }
    for (Tensor *p : {&a, &b}) setGradTo(*p, {0.5, -1});
    for (Tensor *p : {&c, &d}) setGradTo(*p, {2});
    direct.step();
    directSgd.step();
    for (auto &o : opts) o->step();
  }
  EXPECT_EQ(opts[0]->lr(), 0.05);
  EXPECT_EQ(a.to_vector<float>(), b.to_vector<float>());
  EXPECT_EQ(c.to_vector<float>(), d.to_vector<float>());
  for (auto &o : opts) o->zero_grad();
  EXPECT_FALSE(b.grad().defined());
  EXPECT_FALSE(d.grad().defined());
}

TEST(Optim, RejectsParametersThatDoNotRequireGrad) {
  std::string msg = errorOf([] { optim::SGD({Tensor::zeros({2})}); });
  EXPECT_NE(msg.find("must be a leaf that requires grad"), std::string::npos) << msg;
}

// Each invalid setting is refused by name and value (PyTorch raises for each); a NaN
// setting would otherwise fill the parameters with NaN silently.
TEST(Optim, RejectsInvalidOptionsNamingTheOptionAndValue) {
  const double nan = std::nan(""), inf = INFINITY;
  auto adamw = [](optim::AdamWOptions o) {
    return errorOf([&] { optim::AdamW({leaf({1}, {1})}, o); });
  };
  auto sgd = [](optim::SGDOptions o) { return errorOf([&] { optim::SGD({leaf({1}, {1})}, o); }); };
  const std::vector<std::pair<std::string, std::string>> cases = {
      {adamw({.lr = -0.1}), "AdamW: invalid lr -0.1 (must be a finite number >= 0)"},
      {adamw({.lr = nan}), "AdamW: invalid lr nan"},
      {adamw({.lr = inf}), "AdamW: invalid lr inf"},
      {adamw({.beta1 = -0.5}), "AdamW: invalid beta1 -0.5 (must be in [0, 1))"},
      {adamw({.beta1 = 1}), "AdamW: invalid beta1 1 (must be in [0, 1))"},
      {adamw({.beta2 = 1.5}), "AdamW: invalid beta2 1.5"},
      {adamw({.beta2 = nan}), "AdamW: invalid beta2 nan"},
      {adamw({.eps = 0}), "AdamW: invalid eps 0 (must be a finite number > 0)"},
      {adamw({.eps = -1e-8}), "AdamW: invalid eps -1e-08"},
      {adamw({.eps = nan}), "AdamW: invalid eps nan"},
      {adamw({.weight_decay = -0.01}), "AdamW: invalid weight_decay -0.01"},
      {adamw({.weight_decay = nan}), "AdamW: invalid weight_decay nan"},
      {sgd({.lr = -1}), "SGD: invalid lr -1"},
      {sgd({.lr = nan}), "SGD: invalid lr nan"},
      {sgd({.lr = -inf}), "SGD: invalid lr -inf"},
      {sgd({.momentum = -0.9}), "SGD: invalid momentum -0.9"},
      {sgd({.momentum = nan}), "SGD: invalid momentum nan"},
      {sgd({.weight_decay = -1}), "SGD: invalid weight_decay -1"},
      {sgd({.weight_decay = nan}), "SGD: invalid weight_decay nan"},
  };
  for (const auto &[msg, expected] : cases) {
    EXPECT_NE(msg.find(expected), std::string::npos) << msg << "\nexpected: " << expected;
  }
  Tensor p = leaf({1}, {1});
  optim::SGD opt({p});
  std::string msg = errorOf([&] { opt.set_lr(nan); });
  EXPECT_NE(msg.find("SGD::set_lr: invalid lr nan"), std::string::npos) << msg;
  optim::AdamW adam({p});
  msg = errorOf([&] { adam.set_lr(-1); });
  EXPECT_NE(msg.find("AdamW::set_lr: invalid lr -1"), std::string::npos) << msg;
  EXPECT_EQ(adam.options().lr, 1e-3) << "a refused lr is not kept";
}

TEST(Optim, RejectsAParameterListedTwice) {
  Tensor a = leaf({1, 2}, {2}), b = leaf({1}, {1});
  std::string msg = errorOf([&] { optim::AdamW({a, b, a}); });
  EXPECT_NE(msg.find("AdamW: parameter 2 (f64[2]) is the same tensor as parameter 0: list each "
                     "parameter once"),
            std::string::npos)
      << msg;
  msg = errorOf([&] { optim::SGD({b, b}); });
  EXPECT_NE(msg.find("SGD: parameter 1 (f64[1]) is the same tensor as parameter 0"),
            std::string::npos)
      << msg;
}

TEST(Optim, ClipGradNormScalesToMaxNormAndReturnsTheNormBefore) {
  Tensor a = leaf({0, 0}, {2}), b = leaf({0}, {1}), unused = leaf({0}, {1});
  setGradTo(a, {3, 0});
  setGradTo(b, {4});
  EXPECT_NEAR(clip_grad_norm_({a, b, unused}, 10.0), 5.0, 1e-12);
  expectValues(a.grad(), {3, 0}); // below max_norm: unchanged
  EXPECT_NEAR(clip_grad_norm_({a, b, unused}, 1.0), 5.0, 1e-12);
  const double scale = 1.0 / (5.0 + 1e-6);
  expectValues(a.grad(), {3 * scale, 0});
  expectValues(b.grad(), {4 * scale});
  EXPECT_FALSE(unused.grad().defined());
}

// A large gradient (8 M floats, 32 MiB) is clipped without an f64 copy or a second copy
// of it (chunks of 256 K elements, scaled in its own block), and the norm is exact; a
// gradient someone holds keeps its value (the clipped one is a new tensor).
TEST(Optim, ClipGradNormOfALargeGradientMakesNoCopyOfIt) {
  const int64_t n = 8 << 20;
  Tensor w;
  for (bool viaTensor : {false, true}) {
    w = Tensor::zeros({n}).requires_grad_();
    sum(w * Tensor::full({n}, 2.0)).backward(); // grad: all 2, norm 2 sqrt(n)
    const double norm = 2 * std::sqrt(static_cast<double>(n));
    const int64_t before = memory_stats().current_bytes;
    reset_peak_memory_stats();
    if (viaTensor) {
      Tensor total = get_total_norm(grads_of({w}));
      EXPECT_NEAR(total.item(), norm, 1e-9 * norm);
      clip_grads_with_norm_({w}, 1.0, total);
    } else {
      EXPECT_NEAR(clip_grad_norm_({w}, 1.0), norm, 1e-9 * norm);
    }
    EXPECT_LT(memory_stats().peak_bytes - before, n) << "a quarter of the gradient's bytes";
    EXPECT_NEAR(get_total_norm(grads_of({w})).item(), 1.0, 1e-5);
  }
  Tensor held = w.grad();
  const double value = held.to_vector<float>()[0];
  clip_grad_norm_({w}, 0.5);
  EXPECT_EQ(held.to_vector<float>()[0], value) << "a held gradient keeps its value";
  EXPECT_NEAR(get_total_norm(grads_of({w})).item(), 0.5, 1e-5);
}

// ---- memory accounting ---------------------------------------------------------------

TEST(MemoryStats, CountsLiveStorageAndThePeak) {
  reset_peak_memory_stats();
  const MemoryStats before = memory_stats();
  EXPECT_EQ(before.peak_bytes, before.current_bytes);
  const int64_t bytes = 4 << 20;
  {
    Tensor t = Tensor::empty({bytes / 4});
    Tensor view = reshape(t, {2, -1}); // a view: no new storage
    const MemoryStats during = memory_stats();
    EXPECT_EQ(during.current_bytes, before.current_bytes + bytes);
    EXPECT_GE(during.peak_bytes, before.current_bytes + bytes);
  }
  const MemoryStats after = memory_stats();
  EXPECT_EQ(after.current_bytes, before.current_bytes);
  EXPECT_GE(after.peak_bytes, before.current_bytes + bytes);
  reset_peak_memory_stats();
  EXPECT_EQ(memory_stats().peak_bytes, memory_stats().current_bytes);
}

TEST(MemoryStats, BackwardFreesTheSavedValues) {
  Tensor x = Tensor::randn({256, 256}, 1).requires_grad_();
  const int64_t base = memory_stats().current_bytes;
  Tensor y = sum(exp(tanh(x * 2.0)));
  EXPECT_GT(memory_stats().current_bytes, base); // saved intermediates
  y.backward();
  y = Tensor();
  const int64_t gradBytes = x.grad().numel() * 4;
  EXPECT_EQ(memory_stats().current_bytes, base + gradBytes);
}

TEST(MemoryStats, OpsWhoseRulesReadNoValuesSaveNone) {
  Tensor x = Tensor::randn({256, 256}, 1).requires_grad_();
  const int64_t base = memory_stats().current_bytes;
  Tensor y = sum(reshape(x + 1.0, {-1})); // add, reshape and sum need only shapes
  EXPECT_LT(memory_stats().current_bytes - base, 1024) << "the [256, 256] sum was kept";
  y.backward();
  EXPECT_TRUE(allclose(x.grad(), Tensor::ones({256, 256})));
}

// A compiled call's arena counts while the call runs; between calls the pooled arena is
// held like the block cache's blocks and not counted.
TEST(MemoryStats, CompiledArenasCountWhileInUse) {
  NoGradGuard noGrad;
  Tensor x = Tensor::randn({256, 256}, 1), w = Tensor::randn({256, 256}, 2);
  auto cf = compile([&](const Tensor &a) { return matmul(softmax(matmul(a, w), -1), w); });
  cf(x); // compiled; the arena is pooled
  reset_peak_memory_stats();
  const int64_t base = memory_stats().current_bytes;
  Tensor y = cf(x);
  const int64_t out = 256 * 256 * 4;
  EXPECT_GE(memory_stats().peak_bytes - base, out + 256 * 256 * 4)
      << "the output and at least one [256, 256] intermediate in the arena";
  EXPECT_EQ(memory_stats().current_bytes, base + out) << "the idle arena is not counted";
}

// The first call traces on shapes only: the trace's intermediates hold no memory, so the
// first call (trace + compile + run) peaks no higher than a later call, inference and
// training alike. Before, each traced intermediate was allocated (uninitialized). Untiered,
// so that both calls run the same program: a tiered first call runs the fast tier, whose
// eager kernels hold their intermediates, and a later one whichever tier is ready.
TEST(MemoryStats, FirstCompiledCallPeaksNoHigherThanLaterCalls) {
  for (bool train : {false, true}) {
    SCOPED_TRACE(train ? "training" : "inference");
    Tensor x = Tensor::randn({1024, 1024}, 3), w = Tensor::randn({1024, 1024}, 4);
    if (train) w.requires_grad_();
    std::optional<optim::SGD> grads; // zero_grad() before each call: each makes w's gradient
    if (train) grads.emplace(std::vector<Tensor>{w});
    // five elementwise steps fused into one kernel, then a sum: 4 MiB intermediates
    CompileOptions untiered;
    untiered.tiered = false;
    auto cf =
        compile([&](const Tensor &a) { return sum(exp(((a * w + 1) * 3 - 1) * 0.01)); }, untiered);
    auto callPeak = [&] {
      if (train) grads->zero_grad();
      reset_peak_memory_stats();
      const int64_t base = memory_stats().current_bytes;
      Tensor y = cf(x);
      if (train) y.backward();
      return memory_stats().peak_bytes - base;
    };
    const int64_t first = callPeak(), later = callPeak();
    EXPECT_LE(first, later + (int64_t{1} << 20)) << first << " vs " << later;
  }
}

// ---- training ------------------------------------------------------------------------

struct Mlp : nn::Module<Mlp> {
  nn::Linear fc1, fc2;
  Mlp() : fc1(8, 32, true, 1), fc2(32, 4, true, 2) {
    register_module("fc1", fc1);
    register_module("fc2", fc2);
  }
  Tensor forward(const Tensor &x) { return fc2(relu(fc1(x))); }
};

TEST(Training, TwoLayerMlpLossFallsWithAdamW) {
  Mlp net;
  Tensor x = Tensor::randn({16, 8}, 7);
  std::vector<int64_t> labels;
  for (int i = 0; i < 16; ++i) labels.push_back(i % 4);
  Tensor y = Tensor::from_vector(labels, {16});
  optim::AdamW opt(net.parameters(), {.lr = 1e-2});
  double first = 0, last = 0;
  for (int step = 0; step < 50; ++step) {
    opt.zero_grad();
    Tensor loss = cross_entropy(net(x), y);
    loss.backward();
    opt.step();
    (step == 0 ? first : last) = loss.item();
  }
  EXPECT_LT(last, 0.25 * first) << "first " << first << ", last " << last;
}

TEST(Training, Bf16MlpLossFallsWithSgdMomentum) {
  Mlp net;
  net.to(DType::bf16);
  for (const Tensor &p : net.parameters()) {
    ASSERT_EQ(p.dtype(), DType::bf16);
    ASSERT_TRUE(p.requires_grad() && p.is_leaf());
  }
  Tensor x = Tensor::randn({16, 8}, 7, DType::bf16);
  std::vector<int64_t> labels;
  for (int i = 0; i < 16; ++i) labels.push_back(i % 4);
  Tensor y = Tensor::from_vector(labels, {16});
  optim::SGD opt(net.parameters(), {.lr = 0.1, .momentum = 0.9});
  double first = 0, last = 0;
  for (int step = 0; step < 50; ++step) {
    opt.zero_grad();
    Tensor loss = cross_entropy(net(x), y);
    EXPECT_EQ(loss.dtype(), DType::bf16);
    loss.backward();
    EXPECT_EQ(net.fc1.weight.grad().dtype(), DType::bf16);
    opt.step();
    (step == 0 ? first : last) = loss.item();
  }
  EXPECT_LT(last, 0.5 * first) << "first " << first << ", last " << last;
}

TEST(Training, TinyGpt2LossFallsWithAdamW) {
  auto model = test::tinyGpt2(2, 9);
  std::vector<int64_t> tokens;
  for (int i = 0; i < 18; ++i) tokens.push_back((i * 7 + 3) % 50);
  Tensor ids = Tensor::from_vector(tokens, {2, 9});
  Tensor inputs = contiguous(slice(ids, 1, 0, 8)), targets = contiguous(slice(ids, 1, 1, 9));
  std::vector<Tensor> params = model->module().parameters();
  for (const Tensor &p : params) ASSERT_TRUE(p.requires_grad() && p.is_leaf());
  optim::AdamW opt(params, {.lr = 1e-2});
  double first = 0, last = 0;
  for (int step = 0; step < 50; ++step) {
    opt.zero_grad();
    Tensor loss = cross_entropy(model->forward({inputs}), targets);
    loss.backward();
    clip_grad_norm_(params, 1.0);
    opt.step();
    (step == 0 ? first : last) = loss.item();
  }
  EXPECT_LT(last, 0.5 * first) << "first " << first << ", last " << last;
}

} // namespace
