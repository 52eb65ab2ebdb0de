// A whole training step compiled as one graph: a function that runs zero_grad, the forward,
// backward() and the optimizer step is traced once (the backward and the updates recorded
// into the same graph) and every call runs the generated code and writes back the
// parameters, the optimizer state and grad(). Also copy_ inside compiled functions.
#include <gtest/gtest.h>

#include "tests/AutogradTestUtil.h"
#include "tests/TestUtil.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <vector>

#include <rcjit/rcjit.h>

using namespace rcjit;

namespace {

using rcjit::test::errorOf;

struct Mlp : nn::Module<Mlp> {
  nn::Linear a, b;
  explicit Mlp(uint64_t seed) : a(8, 16, true, seed), b(16, 4, true, seed + 1) {
    register_module("a", a);
    register_module("b", b);
  }
  Tensor forward(const Tensor &x) { return b(tanh(a(x))); }
};

// Parameters: allclose rtol 1e-4, atol 1e-4. AdamW divides by sqrt(v): where a gradient
// element is ~0, reassociation-sized differences in it move that element by up to lr per
// step (measured: 2.5e-5 in one bias element after 20 GPT-2 steps at lr 3e-3).
void expectSameParameters(const std::vector<Tensor> &got, const std::vector<Tensor> &want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_TRUE(allclose(got[i], want[i], 1e-4, 1e-4))
        << "parameter " << i << " " << shapeStr(got[i].shape()) << ": largest difference "
        << amax(abs(got[i] - want[i]), {}).item();
    ASSERT_TRUE(got[i].grad().defined()) << "parameter " << i;
    EXPECT_TRUE(allclose(got[i].grad(), want[i].grad(), 1e-4, 1e-5)) << "grad " << i;
  }
}

// 20 AdamW steps of a 2-layer GPT-2 (tokens, cross entropy): the compiled whole step gives
// the losses (1e-4 relative), grads (allclose rtol 1e-4, atol 1e-5) and parameters (see
// expectSameParameters) of eager training, with one compile and no recompile; regional
// mode compiles a whole step as full.
TEST(WholeStep, Gpt2AdamWTwentyStepsEqualEager) {
  std::vector<int64_t> tokens;
  for (int i = 0; i < 2 * 12; ++i) tokens.push_back((i * 11 + 5) % 50);
  Tensor ids = Tensor::from_vector(tokens, {2, 12});
  Tensor targets =
      Tensor::from_vector(std::vector<int64_t>(tokens.rbegin(), tokens.rend()), {2, 12});
  auto eagerModel = test::tinyGpt2(2, 12);
  const std::vector<double> want = test::eagerAdamWLosses(*eagerModel, ids, targets, 20, 3e-3);
  for (Mode mode : {Mode::full, Mode::regional}) {
    auto model = test::tinyGpt2(2, 12);
    optim::AdamW opt(model->module().parameters(), {.lr = 3e-3});
    CompileOptions o;
    o.mode = mode;
    auto step = test::compileWholeStep(*model, opt, o);
    for (int i = 0; i < 20; ++i) {
      double got = step(ids, targets).item();
      EXPECT_NEAR(got, want[i], 1e-4 * std::abs(want[i])) << "step " << i;
    }
    expectSameParameters(model->module().parameters(), eagerModel->module().parameters());
    EXPECT_EQ(step.stats().compiles, 1);
    EXPECT_EQ(step.stats().recompiles, 0);
    EXPECT_EQ(step.stats().graph_breaks, 0);
  }
  EXPECT_LT(want.back(), 0.7 * want.front());
}

// Peaks of the later steps, as `rcjit train` reports them, of a 2-layer GPT-2 (hidden x
// vocab, 4 x 128 tokens as in `rcjit train`'s gpt2 figures) trained by AdamW in full mode
// (whole = false) or as a whole step, with the losses of its three steps; under
// Autocast(bf16) when `bf16`.
struct StepPeak {
  int64_t peak = 0;
  std::vector<double> losses;
};
StepPeak peakOfGpt2Steps(int64_t hidden, int64_t vocab, bool bf16, bool whole) {
  std::vector<int64_t> tokens;
  for (int i = 0; i < 4 * 128; ++i) tokens.push_back((i * 977 + 5) % vocab);
  Tensor ids = Tensor::from_vector(tokens, {4, 128});
  Tensor targets =
      Tensor::from_vector(std::vector<int64_t>(tokens.rbegin(), tokens.rend()), {4, 128});
  auto model = test::smallGpt2("gpt2-scaled-down", hidden, vocab, 128, 4, 128);
  optim::AdamW opt(model->module().parameters(), {.lr = 1e-3});
  auto lossFn = [&](const Tensor &in, const Tensor &tg) {
    Autocast cast(DType::bf16, bf16);
    return cross_entropy(model->forward({in}), tg);
  };
  auto loss = compile(lossFn);
  auto step = compile([&](const Tensor &in, const Tensor &tg) {
    opt.zero_grad();
    Tensor l = lossFn(in, tg);
    l.backward();
    opt.step();
    return l.detach();
  });
  StepPeak r;
  for (int i = 0; i < 3; ++i) {
    if (i == 1) reset_peak_memory_stats();
    if (whole) {
      r.losses.push_back(step(ids, targets).item());
    } else {
      opt.zero_grad();
      Tensor l = loss(ids, targets);
      l.backward();
      opt.step();
      r.losses.push_back(l.item());
    }
    r.peak = memory_stats().peak_bytes;
  }
  return r;
}

void expectWholePeakNoHigherThanFull(int64_t hidden, int64_t vocab, bool bf16) {
  const StepPeak full = peakOfGpt2Steps(hidden, vocab, bf16, false);
  const StepPeak whole = peakOfGpt2Steps(hidden, vocab, bf16, true);
  for (size_t i = 0; i < full.losses.size(); ++i) {
    EXPECT_NEAR(whole.losses[i], full.losses[i], (bf16 ? 1e-2 : 1e-4) * std::abs(full.losses[i]))
        << "step " << i;
  }
  // within 0.1 %: at these proportions both modes peak at the LM head holding the same
  // blocks, and differ by a few small buffers either way (at gpt2's own size, 2 layers f32,
  // the whole step holds 16 KB more of 936 MB; the host's GEMM paths move such buffers),
  // where the faults this guards against cost MiBs (11 % under bf16 autocast before
  // 1c905d5)
  EXPECT_LE(whole.peak, full.peak + full.peak / 1000)
      << "whole step " << whole.peak << " bytes, full mode " << full.peak << " (hidden " << hidden
      << ", vocab " << vocab << (bf16 ? ", bf16 autocast)" : ")");
}

// A whole step's peak is no higher than full mode's (issue 35; within 0.1 %, see
// expectWholePeakNoHigherThanFull) on a GPT-2 of gpt2's proportions scaled down (vocab 64 x
// hidden, as 50257 / 768; gpt2's 4 x 128 tokens), where the LM head and the tied embedding
// make the largest blocks (32 MiB logits, 16 MiB weight). At 2 x 64 tokens the activations
// are small enough to stay in the call's arena, which the whole step holds to its end:
// since bf16 weight gradients are written in f32 by their products (Lowering::foldCast),
// lowering both modes' peaks at the LM head, that puts the whole step's peak 1.2 % above
// full mode's there (docs/performance.md). It fails with every intermediate kept in the
// arena (RCJIT_ARENA_MAX_BUFFER above the logits: 175.8 against 170.0 MB). Its large
// intermediates live only between their first and last steps (an arena held for the call
// had added the logits' block to the peak), the tied weight's two gradients are summed
// into one block (jit/passes/EmbeddingGradSum.h), and the loss's kernels compute the
// log-probabilities and their exp again instead of storing them (FusionGroup::recomputed;
// under bf16 autocast the whole step had held 11 % more than full mode at gpt2's size).
TEST(WholeStep, PeakIsNoHigherThanFullModes) {
  expectWholePeakNoHigherThanFull(256, 16384, false);
  expectWholePeakNoHigherThanFull(256, 16384, true);
}

TEST(WholeStep, SgdWithMomentumEqualsEagerAndSetLrNeedsNoRecompile) {
  Tensor x = Tensor::randn({6, 8}, 1), y = Tensor::randn({6, 4}, 2);
  Mlp eager(3), compiled(3);
  optim::SGDOptions so{.lr = 0.05, .momentum = 0.9, .weight_decay = 1e-3};
  optim::SGD eo(eager.parameters(), so), co(compiled.parameters(), so);
  auto step = compile([&](const Tensor &a, const Tensor &b) {
    co.zero_grad();
    Tensor l = mse_loss(compiled(a), b);
    l.backward();
    co.step();
    return l.detach();
  });
  for (int i = 0; i < 12; ++i) {
    if (i == 6) { // a schedule: the rate is a tensor the compiled step reads
      eo.set_lr(0.01);
      co.set_lr(0.01);
    }
    eo.zero_grad();
    Tensor l = mse_loss(eager(x), y);
    l.backward();
    eo.step();
    EXPECT_NEAR(step(x, y).item(), l.item(), 1e-4 * std::abs(l.item()) + 1e-6) << "step " << i;
  }
  expectSameParameters(compiled.parameters(), eager.parameters());
  EXPECT_EQ(step.stats().compiles, 1);
  EXPECT_EQ(step.stats().recompiles, 0);
}

// A learning-rate schedule inside the compiled step: warm-up then decay, computed from a
// step-count tensor argument and set with set_lr(Tensor), gives eager's losses and
// parameters with one compile; lr() after each call is the rate that call used, and an
// eager step in between reads it too. AdamW and SGD with momentum.
TEST(WholeStep, ALearningRateScheduleInsideTheStepEqualsEager) {
  Tensor x = Tensor::randn({6, 8}, 3), y = Tensor::randn({6, 4}, 4);
  auto schedule = [](const Tensor &t) { // 0.02 * min((t + 1) / 4, 4 / (t + 1))
    Tensor u = t + 1.0;
    return 0.02 * minimum(u / 4.0, 4.0 / u);
  };
  auto hostSchedule = [](int t) { return 0.02 * std::min((t + 1) / 4.0, 4.0 / (t + 1)); };
  for (bool adamw : {true, false}) {
    SCOPED_TRACE(adamw ? "AdamW" : "SGD");
    Mlp eager(5), compiled(5);
    auto make = [&](Mlp &m) -> std::unique_ptr<optim::Optimizer> {
      if (adamw) return std::make_unique<optim::AdamW>(m.parameters(), optim::AdamWOptions{});
      return std::make_unique<optim::SGD>(m.parameters(), optim::SGDOptions{.momentum = 0.9});
    };
    std::unique_ptr<optim::Optimizer> eo = make(eager), co = make(compiled);
    auto body = [](Mlp &m, optim::Optimizer &o, const Tensor &a, const Tensor &b,
                   const Tensor &lr) {
      o.set_lr(lr);
      o.zero_grad();
      Tensor l = mse_loss(m(a), b);
      l.backward();
      o.step();
      return l.detach();
    };
    auto step = compile([&](const Tensor &a, const Tensor &b, const Tensor &t) {
      return body(compiled, *co, a, b, schedule(t));
    });
    for (int i = 0; i < 10; ++i) {
      Tensor t = Tensor::full({}, i);
      if (i == 6) { // an eager step of both at the rate the last call set
        Tensor l = mse_loss(compiled(x), y);
        l.backward();
        co->step();
        Tensor le = mse_loss(eager(x), y);
        le.backward();
        eo->step();
      }
      Tensor want = body(eager, *eo, x, y, schedule(t));
      EXPECT_NEAR(step(x, y, t).item(), want.item(), 1e-4 * std::abs(want.item()) + 1e-6)
          << "step " << i;
      EXPECT_NEAR(co->lr(), hostSchedule(i), 1e-7) << "step " << i;
      EXPECT_NEAR(eo->lr(), hostSchedule(i), 1e-7) << "step " << i;
    }
    expectSameParameters(compiled.parameters(), eager.parameters());
    EXPECT_EQ(step.stats().compiles, 1);
    EXPECT_EQ(step.stats().recompiles, 0);
  }
}

// Gradient clipping inside the compiled step (get_total_norm + clip_grads_with_norm_, no host
// read) gives eager training with clip_grad_norm_: the same norms, losses and parameters,
// one compile; a max_norm that always clips and one that never does.
TEST(WholeStep, ClippingInsideTheStepEqualsEagerClipGradNorm) {
  Tensor x = Tensor::randn({6, 8}, 5), y = Tensor::randn({6, 4}, 6);
  for (double maxNorm : {0.05, 1e3}) {
    SCOPED_TRACE("max_norm " + std::to_string(maxNorm));
    Mlp eager(9), compiled(9);
    optim::AdamW eo(eager.parameters(), {.lr = 1e-2}), co(compiled.parameters(), {.lr = 1e-2});
    auto step = compile([&](const Tensor &a, const Tensor &b) {
      co.zero_grad();
      Tensor l = mse_loss(compiled(a), b);
      l.backward();
      Tensor norm = get_total_norm(grads_of(compiled.parameters()));
      clip_grads_with_norm_(compiled.parameters(), maxNorm, norm);
      co.step();
      return std::vector<Tensor>{l.detach(), norm};
    });
    for (int i = 0; i < 8; ++i) {
      eo.zero_grad();
      Tensor l = mse_loss(eager(x), y);
      l.backward();
      const double norm = clip_grad_norm_(eager.parameters(), maxNorm);
      eo.step();
      std::vector<Tensor> got = step(x, y);
      EXPECT_NEAR(got[0].item(), l.item(), 1e-4 * std::abs(l.item()) + 1e-6) << "step " << i;
      EXPECT_EQ(got[1].dtype(), DType::f64);
      EXPECT_NEAR(got[1].item(), norm, 1e-4 * norm) << "step " << i;
      if (maxNorm < 1) {
        EXPECT_GT(norm, maxNorm) << "the step clips";
      }
    }
    expectSameParameters(compiled.parameters(), eager.parameters());
    EXPECT_EQ(step.stats().compiles, 1);
  }
  // memory: clipping in the step holds no second copy of a large gradient (the clipped
  // gradient is written over the unclipped one, which dies there, while the update writes
  // the parameter and its state over themselves)
  struct Wide : nn::Module<Wide> { // a 512 KiB weight: its gradient is no arena buffer
    nn::Linear a{8, 512, true, 21}, b{512, 256, true, 22}, c{256, 4, true, 23};
    Wide() {
      register_module("a", a);
      register_module("b", b);
      register_module("c", c);
    }
    Tensor forward(const Tensor &t) { return c(tanh(b(tanh(a(t))))); }
  };
  auto peakOf = [&](bool clip) {
    Wide m;
    optim::AdamW o(m.parameters());
    auto s = compile([&](const Tensor &a, const Tensor &b) {
      o.zero_grad();
      Tensor l = mse_loss(m(a), b);
      l.backward();
      if (clip)
        clip_grads_with_norm_(m.parameters(), 0.05, get_total_norm(grads_of(m.parameters())));
      o.step();
      return l.detach();
    });
    s(x, y);
    s(x, y);
    const int64_t before = memory_stats().current_bytes;
    reset_peak_memory_stats();
    s(x, y);
    return memory_stats().peak_bytes - before;
  };
  // (the small gradients are arena buffers: a few KiB more; a second copy of b's weight
  // gradient would be 512 KiB)
  EXPECT_LT(peakOf(true), peakOf(false) + (256 << 10));
  // eager: the same norm as clip_grad_norm_'s, and the clipped gradients' norm is max_norm
  Mlp m(11);
  mse_loss(m(x), y).backward();
  const double before = get_total_norm(grads_of(m.parameters())).item();
  clip_grads_with_norm_(m.parameters(), 0.01, get_total_norm(grads_of(m.parameters())));
  EXPECT_NEAR(get_total_norm(grads_of(m.parameters())).item(), 0.01, 1e-6);
  EXPECT_GT(before, 0.01);
  EXPECT_EQ(get_total_norm({}).item(), 0.0);
  std::string msg = errorOf([&] { clip_grads_with_norm_(m.parameters(), 0, Tensor::ones({})); });
  EXPECT_NE(msg.find("clip_grads_with_norm_: max_norm 0"), std::string::npos) << msg;
  msg = errorOf([&] { clip_grads_with_norm_(m.parameters(), 1, Tensor()); });
  EXPECT_NE(msg.find("total_norm must be a one-element floating tensor"), std::string::npos) << msg;
}

// set_lr with a host number while compile traces would be baked into the program (every
// later call would keep the traced rate): an Error that says what to do instead. A
// learning-rate tensor that is not one floating element is an Error too.
TEST(WholeStep, SetLrWithAHostNumberInsideACompiledFunctionIsAnError) {
  Mlp m(7);
  optim::AdamW adam(m.parameters());
  optim::SGD sgd(m.parameters());
  Tensor x = Tensor::randn({2, 8}, 1);
  for (optim::Optimizer *o : std::vector<optim::Optimizer *>{&adam, &sgd}) {
    double lr = 0.1;
    auto fn = compile([&](const Tensor &a) {
      o->set_lr(lr);
      return m(a);
    });
    std::string msg = errorOf([&] { fn(x); });
    EXPECT_NE(msg.find("::set_lr(0.1) inside a compiled function"), std::string::npos) << msg;
    EXPECT_NE(msg.find("set_lr(Tensor)"), std::string::npos) << msg;
  }
  EXPECT_NE(errorOf([&] {
              adam.set_lr(Tensor());
            }).find("AdamW::set_lr: the learning rate tensor is undefined"),
            std::string::npos);
  std::string msg = errorOf([&] { sgd.set_lr(Tensor::full({2}, 0.1)); });
  EXPECT_NE(
      msg.find("SGD::set_lr: the learning rate must be a one-element floating tensor, got f32[2]"),
      std::string::npos)
      << msg;
  msg = errorOf([&] { adam.set_lr(Tensor::full({}, 1, DType::i64)); });
  EXPECT_NE(msg.find("one-element floating tensor, got i64[]"), std::string::npos) << msg;
  msg =
      errorOf([&] { adam.set_lr(Tensor::full({1}, -1.0)); }); // eager: checked like set_lr(double)
  EXPECT_NE(msg.find("AdamW::set_lr: invalid lr -1"), std::string::npos) << msg;
  adam.set_lr(Tensor::full({1}, 0.25));
  EXPECT_EQ(adam.lr(), 0.25);
}

// The optimizer step alone, compiled: every parameter's update is generated code; eager and
// compiled steps can alternate (the step count and the moments are shared state).
TEST(WholeStep, CompiledAdamWStepEqualsEagerAndAlternatesWithIt) {
  std::vector<Tensor> pe, pc;
  for (int i = 0; i < 10; ++i) {
    pe.push_back(Tensor::randn({32, 32}, 10 + i).requires_grad_());
    pc.push_back(Tensor::randn({32, 32}, 10 + i).requires_grad_());
  }
  optim::AdamW oe(pe, {.lr = 1e-2}), oc(pc, {.lr = 1e-2});
  auto compiledStep = compile([&]() {
    oc.step();
    return std::vector<Tensor>{};
  });
  for (int s = 0; s < 6; ++s) {
    for (size_t i = 0; i < pe.size(); ++i) { // the same gradients for both
      Tensor g = Tensor::randn({32, 32}, 100 * s + i);
      sum(pe[i] * g, {}).backward();
      sum(pc[i] * g, {}).backward();
    }
    oe.step();
    if (s == 3) {
      oc.step(); // an eager step in between
    } else {
      compiledStep();
    }
    oe.zero_grad();
    oc.zero_grad();
    for (size_t i = 0; i < pe.size(); ++i)
      EXPECT_TRUE(allclose(pc[i], pe[i], 1e-5, 1e-6)) << "step " << s << " parameter " << i;
  }
  EXPECT_EQ(compiledStep.stats().compiles, 1);
}

// A whole AdamW step of a one-Linear model with an mse loss: the constant 1 of the loss
// gradient's seed and of AdamW's bias corrections is one node (CSE); the scalars' early
// kernel once loaded it from memory before the step that stores it for the seed's view
// (NaN parameters after the first call). Losses and parameters equal eager training.
TEST(WholeStep, AdamWOfAOneLinearModelEqualsEager) {
  nn::Linear ea(10, 10, true, 1), ca(10, 10, true, 1);
  Tensor x = Tensor::randn({8, 4, 10}, 3), y = Tensor::randn({8, 4, 10}, 4);
  optim::AdamW oe(ea.parameters()), oc(ca.parameters());
  auto step = [&](nn::Linear &m, optim::AdamW &o) {
    o.zero_grad();
    Tensor l = mse_loss(m(x), y);
    l.backward();
    o.step();
    return l.detach();
  };
  auto whole = compile([&]() { return step(ca, oc); });
  for (int s = 0; s < 3; ++s) {
    const double want = step(ea, oe).item(), got = whole().item();
    EXPECT_NEAR(got, want, 1e-5 * std::abs(want)) << "step " << s;
    expectSameParameters(ca.parameters(), ea.parameters());
  }
}

// A stack of 1-3 Linears of random sizes with random activations, optionally a LayerNorm.
struct RandomNet : nn::Module<RandomNet> {
  std::vector<std::unique_ptr<nn::Linear>> layers;
  std::vector<int> acts;
  std::unique_ptr<nn::LayerNorm> norm;
  RandomNet(const std::vector<int64_t> &dims, std::vector<int> a, bool withNorm, uint64_t seed)
      : acts(std::move(a)) {
    for (size_t i = 0; i + 1 < dims.size(); ++i) {
      layers.push_back(
          std::make_unique<nn::Linear>(dims[i], dims[i + 1], (seed + i) % 2 == 0, seed + i));
      register_module("l" + std::to_string(i), *layers.back());
    }
    if (withNorm) {
      norm = std::make_unique<nn::LayerNorm>(dims[1]);
      register_module("norm", *norm);
    }
  }
  Tensor forward(const Tensor &x) {
    Tensor h = x;
    for (size_t i = 0; i < layers.size(); ++i) {
      h = (*layers[i])(h);
      if (i == 0 && norm) h = (*norm)(h);
      if (i + 1 == layers.size()) break;
      const int a = acts[i] % 5;
      h = a == 0 ? relu(h) : a == 1 ? tanh(h) : a == 2 ? gelu(h) : a == 3 ? silu(h) : sigmoid(h);
    }
    return h;
  }
};

// 60 random small models (sizes 1-40, batch 1-9, seq 1-5; mse or cross-entropy; AdamW, SGD,
// or SGD with momentum and weight decay), 4 steps each, compiled as a whole step or in full
// mode with backward() and the step outside: losses and parameters equal eager training's.
// A third of the trials clip the gradients (in a whole step with clip_grads_with_norm_,
// eagerly with clip_grad_norm_) and a third warm the rate up with set_lr(Tensor) from a
// step-count argument.
// Small graphs are where fusion's corner cases live (the shared constant of
// AdamWOfAOneLinearModelEqualsEager; nothing else failed in 600 such trials).
TEST(WholeStep, RandomSmallModelsTrainAsEager) {
  for (int t = 0; t < 60; ++t) {
    std::mt19937 rng(1000 + t);
    auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
    const int depth = pick(1, 3);
    std::vector<int64_t> dims;
    for (int i = 0; i <= depth; ++i) dims.push_back(pick(1, 40));
    std::vector<int> acts;
    for (int i = 0; i < depth; ++i) acts.push_back(pick(0, 4));
    const bool withNorm = pick(0, 3) == 0, ce = pick(0, 1) == 1 && dims.back() >= 2;
    const int opt = pick(0, 2);
    const bool full = pick(0, 1) == 1;
    const int64_t batch = pick(1, 9), seq = pick(1, 5), classes = dims.back();
    Tensor x = Tensor::randn({batch, seq, dims[0]}, 7 + t), y;
    if (ce) {
      std::vector<int64_t> ids;
      for (int64_t i = 0; i < batch * seq; ++i)
        ids.push_back(pick(0, static_cast<int>(classes) - 1));
      y = Tensor::from_vector(ids, {batch * seq});
    } else {
      y = Tensor::randn({batch, seq, classes}, 9 + t);
    }
    const bool clip = pick(0, 2) == 0, sched = pick(0, 2) == 0;
    const double bound = 0.05 * pick(1, 20), baseLr = opt == 0 ? 1e-2 : 0.05;
    RandomNet e(dims, acts, withNorm, 5 + t), c(dims, acts, withNorm, 5 + t);
    auto optimizer = [&](RandomNet &n) -> std::unique_ptr<optim::Optimizer> {
      if (opt == 0)
        return std::make_unique<optim::AdamW>(n.parameters(), optim::AdamWOptions{.lr = 1e-2});
      return std::make_unique<optim::SGD>(n.parameters(),
                                          optim::SGDOptions{.lr = 0.05,
                                                            .momentum = opt == 2 ? 0.9 : 0.0,
                                                            .weight_decay = opt == 2 ? 0.01 : 0.0});
    };
    std::unique_ptr<optim::Optimizer> oe = optimizer(e), oc = optimizer(c);
    auto lossOf = [&](RandomNet &n) {
      Tensor o = n(x);
      return ce ? cross_entropy(reshape(o, {batch * seq, classes}), y) : mse_loss(o, y);
    };
    auto clipGrads = [&](RandomNet &n, bool traced) {
      if (!clip) return;
      if (traced) {
        clip_grads_with_norm_(n.parameters(), bound, get_total_norm(grads_of(n.parameters())));
      } else {
        clip_grad_norm_(n.parameters(), bound);
      }
    };
    auto step = [&](RandomNet &n, optim::Optimizer &o, const Tensor &st, bool traced) {
      if (sched) o.set_lr(baseLr * (st + 1.0) / 4.0);
      o.zero_grad();
      Tensor l = lossOf(n);
      l.backward();
      clipGrads(n, traced);
      o.step();
      return l.detach();
    };
    auto whole = compile([&](const Tensor &st) { return step(c, *oc, st, true); });
    auto loss = compile([&]() { return lossOf(c); });
    const std::string what = "trial " + std::to_string(t) +
                             (full ? " (full mode" : " (whole step") + (clip ? ", clipped" : "") +
                             (sched ? ", scheduled)" : ")");
    for (int s = 0; s < 4; ++s) {
      const Tensor st = Tensor::full({}, s);
      const double want = step(e, *oe, st, false).item();
      double got = 0;
      if (full) {
        if (sched) oc->set_lr(baseLr * (st + 1.0) / 4.0);
        oc->zero_grad();
        Tensor l = loss();
        l.backward();
        clipGrads(c, false);
        oc->step();
        got = l.item();
      } else {
        got = whole(st).item();
      }
      ASSERT_NEAR(got, want, 1e-4 * std::max(1.0, std::abs(want))) << what << " step " << s;
    }
    std::vector<Tensor> pe = e.parameters(), pc = c.parameters();
    for (size_t k = 0; k < pe.size(); ++k)
      ASSERT_TRUE(allclose(pc[k], pe[k], 1e-3, 1e-3)) << what << " parameter " << k;
  }
}

// The compiled AdamW step is horizontally fused: each parameter's whole update is one
// kernel (the branches that start from g and from m merge instead of meeting through
// memory), the scalars every update needs (step count, bias corrections) are one kernel,
// and the parameters' kernels run as one launch (one "run of N kernels" step in the
// profile, not N steps). Parameters of two shapes; results equal eager.
TEST(WholeStep, CompiledAdamWIsOneKernelPerParameterRunAsOneLaunch) {
  std::vector<Tensor> pe, pc;
  for (int i = 0; i < 6; ++i) {
    Shape shape = i % 2 ? Shape{256} : Shape{256, 256};
    pe.push_back(Tensor::randn(shape, 20 + i).requires_grad_());
    pc.push_back(Tensor::randn(shape, 20 + i).requires_grad_());
  }
  optim::AdamW oe(pe, {.lr = 1e-2}), oc(pc, {.lr = 1e-2});
  auto compiledStep = compile([&]() {
    oc.step();
    return std::vector<Tensor>{};
  });
  const std::string path = testing::TempDir() + "rcjit_adamw_runs_" +
                           std::to_string(static_cast<long>(::getpid())) + ".json";
  for (int s = 0; s < 3; ++s) {
    for (size_t i = 0; i < pe.size(); ++i) {
      Tensor g = Tensor::randn(pe[i].shape(), 100 * s + i);
      sum(pe[i] * g, {}).backward();
      sum(pc[i] * g, {}).backward();
    }
    oe.step();
    if (s == 2) profiler::start(path);
    compiledStep();
    if (s == 2) profiler::stop();
    oe.zero_grad();
    oc.zero_grad();
    for (size_t i = 0; i < pe.size(); ++i)
      EXPECT_TRUE(allclose(pc[i], pe[i], 1e-5, 1e-6)) << "step " << s << " parameter " << i;
  }
  std::ifstream in(path);
  nlohmann::json trace = nlohmann::json::parse(in);
  std::vector<std::string> kernels;
  for (const auto &e : trace["traceEvents"])
    if (e["cat"] == "kernel") kernels.push_back(e["name"].get<std::string>());
  std::remove(path.c_str());
  ASSERT_EQ(kernels.size(), 2u) << "one scalar kernel and one run of the parameters' kernels";
  EXPECT_EQ(kernels[1].rfind("run of 6 kernels: ", 0), 0u) << kernels[1];
}

// A step that accumulates into grad() (no zero_grad inside) depends on whether grad() was
// defined: the guard says so, and both variants equal eager.
// A step that calls zero_grad and backward() replaces every gradient without reading it:
// the old gradients are dropped before the program runs, so they are not alive beside the
// new ones during the call. Measured as the call's peak above the bytes held before it:
// when the caller keeps the old gradients alive, the same call peaks higher by exactly
// their bytes.
TEST(WholeStep, ReplacedGradientsAreFreedBeforeTheStepRuns) {
  Mlp model(3);
  std::vector<Tensor> params = model.parameters();
  optim::SGD opt(params, {.lr = 0.01});
  auto step = compile([&](const Tensor &x, const Tensor &y) {
    opt.zero_grad();
    Tensor l = mse_loss(model(x), y);
    l.backward();
    opt.step();
    return l.detach();
  });
  Tensor x = Tensor::randn({512, 8}, 1), y = Tensor::randn({512, 4}, 2);
  step(x, y); // compiles; the gradients are defined afterwards
  auto peakOfACall = [&] {
    reset_peak_memory_stats();
    const int64_t before = memory_stats().current_bytes;
    step(x, y);
    return memory_stats().peak_bytes - before;
  };
  const int64_t freed = peakOfACall();
  int64_t gradBytes = 0;
  std::vector<Tensor> held; // the caller keeps the old gradients
  for (const Tensor &p : params) {
    ASSERT_TRUE(p.grad().defined());
    gradBytes += p.grad().numel() * 4;
    held.push_back(p.grad());
  }
  const int64_t kept = peakOfACall();
  EXPECT_GT(gradBytes, 0);
  EXPECT_EQ(kept, freed + gradBytes);
  for (size_t i = 0; i < params.size(); ++i) // and the new gradients are new tensors
    EXPECT_NE(params[i].grad().data_ptr(), held[i].data_ptr());
}

TEST(WholeStep, AccumulatingIntoGradIsGuarded) {
  Tensor x = Tensor::randn({6, 8}, 1), y = Tensor::randn({6, 4}, 2);
  Mlp eager(5), compiled(5);
  optim::SGD eo(eager.parameters(), {.lr = 0.05}), co(compiled.parameters(), {.lr = 0.05});
  auto step = compile([&](const Tensor &a, const Tensor &b) {
    Tensor l = mse_loss(compiled(a), b);
    l.backward();
    co.step();
    return l.detach();
  });
  for (int i = 0; i < 4; ++i) {
    Tensor l = mse_loss(eager(x), y);
    l.backward(); // accumulates after the first step
    eo.step();
    step(x, y);
  }
  expectSameParameters(compiled.parameters(), eager.parameters());
  EXPECT_EQ(step.stats().compiles, 2);
  EXPECT_NE(step.explain().find("expected undefined, got defined"), std::string::npos)
      << step.explain();
}

TEST(WholeStep, HostReadsInsideAWholeStepAreAClearError) {
  Tensor x = Tensor::randn({6, 8}, 1), y = Tensor::randn({6, 4}, 2);
  Mlp net(7);
  optim::AdamW opt(net.parameters());
  auto step = compile([&](const Tensor &a, const Tensor &b) {
    opt.zero_grad();
    Tensor l = mse_loss(net(a), b);
    l.backward();
    clip_grad_norm_(net.parameters(), 1.0); // item(): a host read
    opt.step();
    return l.detach();
  });
  std::string err = errorOf([&] { step(x, y); });
  EXPECT_NE(err.find("is a whole step"), std::string::npos) << err;
  EXPECT_NE(err.find("clip_grad_norm_"), std::string::npos) << err;
  EXPECT_NE(err.find("clip_grads_with_norm_(params, max_norm, get_total_norm(grads_of(params)))"),
            std::string::npos)
      << err;
  for (const Tensor &p : net.parameters()) EXPECT_FALSE(p.grad().defined()) << "grads restored";
}

// copy_ into a captured tensor inside a compiled function is written back after each call;
// into an argument or a view it is a clear Error.
TEST(WholeStep, CopyIntoACapturedTensorIsWrittenBack) {
  Tensor acc = Tensor::zeros({4});
  auto f = compile([&](const Tensor &x) {
    acc.copy_(acc + x);
    return acc * 2.0;
  });
  Tensor x = Tensor::from_vector(std::vector<float>{1, 2, 3, 4}, {4});
  for (int i = 1; i <= 3; ++i) {
    Tensor r = f(x);
    EXPECT_TRUE(allclose(acc, x * static_cast<double>(i))) << "call " << i;
    EXPECT_TRUE(allclose(r, x * (2.0 * i))) << "call " << i;
  }
  EXPECT_EQ(f.stats().compiles, 1);
  auto g = compile([](const Tensor &a) {
    Tensor(a).copy_(a + 1.0);
    return a;
  });
  EXPECT_NE(errorOf([&] { g(x); }).find("copy_: argument 0 of a compiled function is written"),
            std::string::npos);
  Tensor big = Tensor::zeros({8});
  auto h = compile([&](const Tensor &a) {
    Tensor v = slice(big, 0, 0, 4);
    v.copy_(a);
    return a * 1.0;
  });
  EXPECT_NE(errorOf([&] { h(x); }).find("is a view of a larger tensor"), std::string::npos);
}

} // namespace
