// Helpers of the autograd and training tests: exact f64 tensors, leaves, value checks.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include <rcjit/rcjit.h>

#include "models/ModelGpt2.h"
#include "models/Models.h"

namespace rcjit::test {

/// An f64 tensor holding exactly `v` (no float rounding on the way).
inline Tensor f64(std::vector<double> v, Shape shape) {
  return Tensor::from_blob(v.data(), std::move(shape), DType::f64).clone();
}

/// f64(v, shape) as a leaf that requires grad.
inline Tensor leaf(const std::vector<double> &v, Shape shape) {
  Tensor t = f64(v, std::move(shape));
  t.requires_grad_();
  return t;
}

/// Every element of t equals want within tol * (1 + |want|).
inline void expectValues(const Tensor &t, const std::vector<double> &want, double tol = 1e-9) {
  ASSERT_TRUE(t.defined());
  std::vector<double> got = t.to_vector<double>();
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_NEAR(got[i], want[i], tol * (1 + std::abs(want[i]))) << "element " << i;
  }
}

/// A 2-layer, 4-head GPT-2 named `name` of the given width, vocabulary and context, for
/// `batch` x `seq` token ids.
inline std::unique_ptr<tools::Model> smallGpt2(const std::string &name, int64_t hidden,
                                               int64_t vocab, int64_t context, int64_t batch,
                                               int64_t seq) {
  tools::Gpt2Config cfg;
  cfg.name = name;
  cfg.hidden = hidden;
  cfg.layers = 2;
  cfg.heads = 4;
  cfg.vocab = vocab;
  cfg.context = context;
  tools::ModelConfig c;
  c.batch = batch;
  c.seq = seq;
  return tools::buildGpt2(cfg, c);
}

/// A 2-layer GPT-2 small enough to train in a test (hidden 32, vocab 50), for `batch` x `seq`
/// token ids.
inline std::unique_ptr<tools::Model> tinyGpt2(int64_t batch, int64_t seq) {
  return smallGpt2("tiny-gpt2", 32, 50, 16, batch, seq);
}

/// A whole training step of `model` by `opt` compiled as one function (zero_grad, cross
/// entropy of the forward, backward, step): called with ids and targets, it returns the loss.
template <class Opt> auto compileWholeStep(tools::Model &model, Opt &opt, CompileOptions o = {}) {
  return compile(
      [&model, &opt](const Tensor &in, const Tensor &tg) {
        opt.zero_grad();
        Tensor l = cross_entropy(model.forward({in}), tg);
        l.backward();
        opt.step();
        return l.detach();
      },
      o);
}

/// `steps` eager AdamW steps (lr `lr`) of `model` on cross entropy(model(ids), targets): the
/// losses, the reference a compiled step's are checked against.
inline std::vector<double> eagerAdamWLosses(tools::Model &model, const Tensor &ids,
                                            const Tensor &targets, int steps, double lr) {
  optim::AdamW opt(model.module().parameters(), {.lr = lr});
  std::vector<double> losses;
  for (int step = 0; step < steps; ++step) {
    opt.zero_grad();
    Tensor l = cross_entropy(model.forward({ids}), targets);
    l.backward();
    opt.step();
    losses.push_back(l.item());
  }
  return losses;
}

} // namespace rcjit::test
