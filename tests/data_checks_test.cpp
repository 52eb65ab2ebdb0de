// Ops whose eager form validates data check it in compiled code too, on every call:
// cross_entropy's targets (inference and training entries, full and regional mode, static
// and dynamic shapes) and embedding's ids raise the Error eager raises.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include <rcjit/rcjit.h>

#include "tests/TestUtil.h"

using namespace rcjit;

namespace {

using rcjit::test::errorOf;

constexpr int64_t kClasses = 10;

struct Head : nn::Module<Head> {
  nn::Linear fc{6, kClasses, true, 7};
  Head() { register_module("fc", fc); }
  Tensor forward(const Tensor &x) { return fc(x); }
};

Tensor targets(std::vector<int64_t> v) {
  const int64_t n = static_cast<int64_t>(v.size());
  return Tensor::from_vector(std::move(v), {n});
}

// What eager says about `bad` among good targets.
std::string eagerError(Head &head, const Tensor &x, const Tensor &bad) {
  NoGradGuard noGrad;
  return errorOf([&] { cross_entropy(head(x), bad); });
}

const std::vector<int64_t> kBadTargets = {kClasses, -1, -5, int64_t{1} << 40,
                                          std::numeric_limits<int64_t>::min()};

TEST(DataChecks, CompiledCrossEntropyRaisesEagersErrorForEveryBadTarget) {
  Head head;
  for (Mode mode : {Mode::full, Mode::regional}) {
    for (Dynamic dyn : {Dynamic::never, Dynamic::always}) {
      for (bool training : {false, true}) {
        SCOPED_TRACE(std::string(mode == Mode::full ? "full" : "regional") +
                     (dyn == Dynamic::always ? ", dynamic" : ", static") +
                     (training ? ", training" : ", inference"));
        CompileOptions o;
        o.mode = mode;
        o.dynamic = dyn;
        auto cf =
            compile([&](const Tensor &x, const Tensor &t) { return cross_entropy(head(x), t); }, o);
        Tensor x = Tensor::randn({4, 6}, 11);
        auto call = [&](const Tensor &t) {
          if (training) {
            head.zero_grad();
            Tensor loss = cf(x, t);
            loss.backward();
            return loss;
          }
          NoGradGuard noGrad;
          return cf(x, t);
        };
        // compiled with good targets: the trace sees nothing wrong
        Tensor good = targets({1, 9, -100, 0});
        Tensor want;
        {
          NoGradGuard noGrad;
          want = cross_entropy(head(x), good);
        }
        EXPECT_TRUE(allclose(call(good), want, 1e-5, 1e-6));
        for (int64_t v : kBadTargets) {
          Tensor bad = targets({1, v, -100, 0});
          const std::string expected = eagerError(head, x, bad);
          ASSERT_NE(expected.find("is out of range for 10 classes"), std::string::npos) << expected;
          EXPECT_EQ(errorOf([&] { call(bad); }), expected) << "target " << v;
        }
        EXPECT_TRUE(allclose(call(good), want, 1e-5, 1e-6)) << "still usable after an Error";
        EXPECT_EQ(cf.stats().fallbacks, 0);
      }
    }
  }
}

// A whole training step compiled as one graph (forward, backward, AdamW): a bad target is
// the eager Error, and the step it stopped updated no parameter.
TEST(DataChecks, CompiledWholeStepRaisesEagersErrorAndLeavesTheParameters) {
  for (Mode mode : {Mode::full, Mode::regional}) {
    Head head;
    optim::AdamW opt(head.parameters(), {.lr = 1e-2});
    CompileOptions o;
    o.mode = mode;
    auto step = compile(
        [&](const Tensor &x, const Tensor &t) {
          opt.zero_grad();
          Tensor loss = cross_entropy(head(x), t);
          loss.backward();
          opt.step();
          return loss;
        },
        o);
    Tensor x = Tensor::randn({4, 6}, 11);
    step(x, targets({1, 9, -100, 0}));
    step(x, targets({2, 8, 3, -100}));
    const std::vector<double> w = head.fc.weight.to_vector<double>();
    for (int64_t v : kBadTargets) {
      Tensor bad = targets({1, 2, v, 0});
      EXPECT_EQ(errorOf([&] { step(x, bad); }), eagerError(head, x, bad)) << "target " << v;
    }
    EXPECT_EQ(head.fc.weight.to_vector<double>(), w) << "no update from a refused step";
  }
}

// A 2-D target [batch, seq] as language models give it, with another ignore_index.
TEST(DataChecks, CompiledCrossEntropyChecksEveryTargetOfA2dBatch) {
  auto cf = compile([](const Tensor &logits, const Tensor &t) {
    return cross_entropy(logits, t, /*ignore_index=*/-1);
  });
  Tensor logits = Tensor::randn({2, 3, kClasses}, 5);
  Tensor good = Tensor::from_vector(std::vector<int64_t>{0, 1, -1, 9, 8, 7}, {2, 3});
  EXPECT_TRUE(allclose(cf(logits, good), cross_entropy(logits, good, -1), 1e-5, 1e-6));
  Tensor bad = Tensor::from_vector(std::vector<int64_t>{0, 1, -1, 9, 8, -100}, {2, 3});
  const std::string expected = errorOf([&] { cross_entropy(logits, bad, -1); });
  EXPECT_EQ(expected, "cross_entropy: target -100 is out of range for 10 classes (expected [0, "
                      "9] or ignore_index -1)");
  EXPECT_EQ(errorOf([&] { cf(logits, bad); }), expected);
  Tensor bad32 =
      Tensor::from_vector(std::vector<int64_t>{0, 1, 10, 9, 8, 7}, {2, 3}).to(DType::i32);
  auto cf32 =
      compile([](const Tensor &logits, const Tensor &t) { return cross_entropy(logits, t); });
  Tensor good32 =
      Tensor::from_vector(std::vector<int64_t>{0, 1, 2, 9, 8, 7}, {2, 3}).to(DType::i32);
  EXPECT_TRUE(allclose(cf32(logits, good32), cross_entropy(logits, good32), 1e-5, 1e-6));
  EXPECT_EQ(errorOf([&] { cf32(logits, bad32); }), errorOf([&] { cross_entropy(logits, bad32); }));
}

// Embedding's ids: compiled code runs the eager gather, which checks them on every call.
TEST(DataChecks, CompiledEmbeddingRaisesEagersErrorForBadIds) {
  nn::Embedding emb(10, 4);
  for (Mode mode : {Mode::full, Mode::regional}) {
    CompileOptions o;
    o.mode = mode;
    auto cf = compile([&](const Tensor &ids) { return sum(emb(ids) * 2.0); }, o);
    Tensor good = Tensor::from_vector(std::vector<int64_t>{0, 9, 3}, {3});
    EXPECT_TRUE(allclose(cf(good), sum(emb(good) * 2.0), 1e-5, 1e-6));
    for (int64_t v : kBadTargets) {
      Tensor bad = Tensor::from_vector(std::vector<int64_t>{0, v, 3}, {3});
      // the functional op's message (a module call adds "(in module ...)" in eager mode)
      const std::string expected = errorOf([&] { embedding(emb.weight, bad); });
      EXPECT_NE(expected.find("is out of range for a weight of 10 rows"), std::string::npos);
      const std::string got = errorOf([&] { cf(bad); });
      EXPECT_EQ(got.substr(0, expected.size()), expected) << "id " << v;
    }
  }
}

} // namespace
