// Autocast: which ops run in bf16 and which in f32, gradients in the parameters' dtype,
// compiled code equal to eager autocast, the guard on the scope, and a GPT-2 trained under
// autocast tracking its f32 loss curve.
#include <gtest/gtest.h>

#include "tests/AutogradTestUtil.h"
#include "tests/TestUtil.h"

#include <cmath>
#include <vector>

#include <rcjit/rcjit.h>

#include "targets/eager/DnnlContext.h"

using namespace rcjit;

namespace {

using rcjit::test::errorOf;

Tensor param(Shape s, uint64_t seed) {
  Tensor t = Tensor::randn(std::move(s), seed) * 0.5;
  t.requires_grad_();
  return t;
}

TEST(Autocast, MatmulLikeOpsRunInBf16AndReductionsNormsAndLossesInF32) {
  Tensor x = Tensor::randn({4, 8}, 1), w = Tensor::randn({6, 8}, 2), b = Tensor::randn({6}, 3);
  Tensor nw = Tensor::ones({6}), nb = Tensor::zeros({6});
  Autocast ac;
  ASSERT_EQ(autocast_dtype(), DType::bf16);
  Tensor y = linear(x, w, b);
  EXPECT_EQ(y.dtype(), DType::bf16);
  EXPECT_EQ(matmul(x, transpose(w, 0, 1)).dtype(), DType::bf16);
  Tensor q = Tensor::randn({2, 5, 4}, 4);
  EXPECT_EQ(scaled_dot_product_attention(q, q, q, true).dtype(), DType::bf16);
  EXPECT_EQ(
      conv2d(Tensor::randn({1, 2, 5, 5}, 5), Tensor::randn({3, 2, 3, 3}, 6), Tensor()).dtype(),
      DType::bf16);
  EXPECT_EQ(softmax(y, -1).dtype(), DType::f32);
  EXPECT_EQ(log_softmax(y, -1).dtype(), DType::f32);
  EXPECT_EQ(layer_norm(y, nw, nb, 1e-5).dtype(), DType::f32);
  EXPECT_EQ(rms_norm(y, nw, 1e-6).dtype(), DType::f32);
  EXPECT_EQ(sum(y, {}).dtype(), DType::f32);
  EXPECT_EQ(mean(y, {1}).dtype(), DType::f32);
  EXPECT_EQ(cross_entropy(y, Tensor::from_vector(std::vector<int64_t>{0, 1, 2, 3}, {4})).dtype(),
            DType::f32);
  EXPECT_EQ(mse_loss(y, Tensor::zeros({4, 6})).dtype(), DType::f32);
  EXPECT_EQ(gelu(y).dtype(), DType::bf16) << "other ops keep their input's dtype";
  EXPECT_EQ((y + b).dtype(), DType::f32) << "bf16 with f32 promotes to f32";
  EXPECT_EQ(amax(y, {1}).dtype(), DType::bf16);
  // the bf16 result is the f32 one rounded: close to the f32 computation
  Tensor ref;
  {
    Autocast off(DType::bf16, false);
    EXPECT_FALSE(autocast_dtype().has_value());
    ref = linear(x, w, b);
    EXPECT_EQ(ref.dtype(), DType::f32);
  }
  EXPECT_EQ(autocast_dtype(), DType::bf16) << "the inner scope restored the outer one";
  EXPECT_TRUE(allclose(y.to(DType::f32), ref, 2e-2, 5e-2));
}

TEST(Autocast, OutsideAScopeNothingChangesAndBadDtypesAreErrors) {
  {
    Autocast ac(DType::f16);
    EXPECT_EQ(linear(Tensor::ones({2, 3}), Tensor::ones({4, 3}), Tensor()).dtype(), DType::f16);
  }
  EXPECT_FALSE(autocast_dtype().has_value());
  EXPECT_EQ(linear(Tensor::ones({2, 3}), Tensor::ones({4, 3}), Tensor()).dtype(), DType::f32);
  EXPECT_NE(errorOf([] { Autocast ac(DType::f32); })
                .find("Autocast: dtype f32 is not a "
                      "reduced-precision float"),
            std::string::npos);
  EXPECT_FALSE(autocast_dtype().has_value()) << "a constructor that threw changed nothing";
  // f64 inputs of an f32-list op stay f64
  Autocast ac;
  EXPECT_EQ(softmax(Tensor::randn({3}, 1, DType::f64), 0).dtype(), DType::f64);
}

// Parameters stay f32 and their gradients come back in f32, close to the f32 gradients.
TEST(Autocast, GradientsComeBackInTheParametersDtype) {
  Tensor w = param({16, 32}, 1), b = param({16}, 2);
  Tensor x = Tensor::randn({8, 32}, 3);
  auto lossOf = [&] { return mean(softmax(linear(x, w, b), -1) * Tensor::randn({8, 16}, 4), {}); };
  Tensor l32 = lossOf();
  std::vector<Tensor> g32 = grad({l32}, {w, b});
  Tensor l16;
  {
    Autocast ac;
    l16 = lossOf();
  }
  EXPECT_EQ(l16.dtype(), DType::f32);
  l16.backward(); // outside the scope, as torch recommends; the casts carry the dtypes
  ASSERT_TRUE(w.grad().defined() && b.grad().defined());
  EXPECT_EQ(w.grad().dtype(), DType::f32);
  EXPECT_EQ(b.grad().dtype(), DType::f32);
  EXPECT_TRUE(allclose(w.grad(), g32[0], 5e-2, 2e-3));
  EXPECT_TRUE(allclose(b.grad(), g32[1], 5e-2, 2e-3));
}

// Every autocast op compiled under autocast equals the same op run eagerly under autocast
// (the same casts at the same places; the kernels may round intermediates differently).
TEST(Autocast, CompiledOpsEqualEagerAutocast) {
  Tensor x = Tensor::randn({4, 6, 8}, 1), w = Tensor::randn({5, 8}, 2), b = Tensor::randn({5}, 3);
  Tensor nw = Tensor::randn({8}, 4), nb = Tensor::randn({8}, 5);
  Tensor img = Tensor::randn({2, 3, 6, 6}, 6), kw = Tensor::randn({4, 3, 3, 3}, 7);
  Tensor kb = Tensor::randn({4}, 8);
  Tensor w8 = Tensor::randn({8, 8}, 9);
  std::vector<int64_t> classes;
  for (int i = 0; i < 24; ++i) classes.push_back(i % 5);
  Tensor tg = Tensor::from_vector(classes, {4, 6});
  using Fn = std::function<Tensor(const Tensor &)>;
  std::vector<std::pair<const char *, Fn>> cases = {
      {"matmul", [&](const Tensor &a) { return matmul(a, transpose(w, 0, 1)); }},
      {"linear", [&](const Tensor &a) { return linear(a, w, b); }},
      {"sdpa", [&](const Tensor &a) { return scaled_dot_product_attention(a, a, a, true); }},
      {"conv2d", [&](const Tensor &) { return conv2d(img, kw, kb, 1, 1); }},
      {"softmax", [&](const Tensor &a) { return softmax(linear(a, w, b), -1); }},
      {"log_softmax", [&](const Tensor &a) { return log_softmax(linear(a, w, b), -1); }},
      {"layer_norm",
       [&](const Tensor &a) { return layer_norm(linear(a, w8, Tensor()), nw, nb, 1e-5); }},
      {"rms_norm", [&](const Tensor &a) { return rms_norm(linear(a, w8, Tensor()), nw, 1e-6); }},
      {"sum", [&](const Tensor &a) { return sum(linear(a, w, b), {-1}); }},
      {"mean", [&](const Tensor &a) { return mean(linear(a, w, b), {}); }},
      {"cross_entropy", [&](const Tensor &a) { return cross_entropy(linear(a, w, b), tg); }},
      {"mse_loss",
       [&](const Tensor &a) {
         return mse_loss(linear(a, w, b), Tensor::zeros({4, 6, 5}));
       }},
      {"gelu of linear", [&](const Tensor &a) { return gelu(linear(a, w, b)) + 1.0; }},
  };
  for (const auto &[name, fn] : cases) {
    Autocast ac;
    Tensor want = fn(x);
    auto cf = compile(fn);
    Tensor got = cf(x);
    EXPECT_EQ(got.dtype(), want.dtype()) << name;
    EXPECT_TRUE(allclose(got.to(DType::f32), want.to(DType::f32), 1e-2, 1e-2)) << name;
  }
}

// An entry traced inside a scope does not serve calls outside it (and the reverse): the
// recompile names the autocast guard.
// Where bf16 products run natively (AVX-512 BF16, AMX), a compiled bf16 linear or matmul is
// a oneDNN library step of its own (prepared at compile time, its weight packed like an f32
// one's) instead of an eager call; its values are eager's within bf16's rounding.
TEST(Autocast, CompiledBf16ProductsAreLibrarySteps) {
  if (!eager::bf16MatmulsNative()) GTEST_SKIP() << "no native bf16 products on this CPU";
  NoGradGuard noGrad;
  Tensor x = Tensor::randn({64, 256}, 1).to(DType::bf16);
  Tensor w = (Tensor::randn({192, 256}, 2) * 0.1).to(DType::bf16);
  Tensor b = Tensor::randn({192}, 3).to(DType::bf16);
  Tensor v = (Tensor::randn({192, 96}, 4) * 0.1).to(DType::bf16);
  auto fn = [&](const Tensor &t) { return matmul(gelu(linear(t, w, b)), v); };
  CompileOptions o;
  o.tiered = false;
  auto cf = compile(fn, o);
  Tensor want = fn(x);
  for (int call = 0; call < 3; ++call) { // the third call runs over packed weights
    Tensor got = cf(x);
    ASSERT_EQ(got.dtype(), DType::bf16);
    EXPECT_TRUE(allclose(got.to(DType::f32), want.to(DType::f32), 3e-2, 3e-2)) << "call " << call;
  }
  const std::string ex = cf.explain();
  const size_t at = ex.find("library steps run as:");
  ASSERT_NE(at, std::string::npos) << ex;
  EXPECT_NE(ex.find("step 0: ", at), std::string::npos) << ex;
  EXPECT_NE(ex.find("oneDNN matmul", at), std::string::npos) << ex;
}

TEST(Autocast, CompiledEntriesGuardOnTheScope) {
  Tensor w = Tensor::randn({8, 8}, 1);
  auto cf = compile([&](const Tensor &x) { return matmul(x, w); });
  Tensor x = Tensor::randn({4, 8}, 2);
  EXPECT_EQ(cf(x).dtype(), DType::f32);
  {
    Autocast ac;
    EXPECT_EQ(cf(x).dtype(), DType::bf16);
    EXPECT_EQ(cf(x).dtype(), DType::bf16);
  }
  EXPECT_EQ(cf(x).dtype(), DType::f32);
  EXPECT_EQ(cf.stats().compiles, 2);
  EXPECT_EQ(cf.stats().recompiles, 1);
  EXPECT_NE(cf.explain().find("autocast: expected off, got bf16"), std::string::npos)
      << cf.explain();
  EXPECT_NE(cf.explain().find("autocast: bf16"), std::string::npos) << "the guard is listed";
}

// A 2-layer GPT-2 trained 50 AdamW steps under autocast (eager, and compiled in full mode)
// tracks the f32 loss curve within 2 % at every step.
TEST(Autocast, Gpt2TrainedUnderAutocastTracksTheF32LossCurve) {
  std::vector<int64_t> tokens;
  for (int i = 0; i < 4 * 12; ++i) tokens.push_back((i * 11 + 5) % 50);
  Tensor ids = Tensor::from_vector(tokens, {4, 12});
  Tensor targets =
      Tensor::from_vector(std::vector<int64_t>(tokens.rbegin(), tokens.rend()), {4, 12});
  auto run = [&](bool autocast, bool compiled) {
    auto model = test::tinyGpt2(4, 12);
    auto loss = [&](const Tensor &in, const Tensor &tg) {
      return cross_entropy(model->forward({in}), tg);
    };
    auto cf = compile(loss);
    optim::AdamW opt(model->module().parameters(), {.lr = 3e-3});
    std::vector<double> losses;
    for (int step = 0; step < 50; ++step) {
      opt.zero_grad();
      Tensor l;
      {
        Autocast ac(DType::bf16, autocast);
        l = compiled ? cf(ids, targets) : loss(ids, targets);
      }
      EXPECT_EQ(l.dtype(), DType::f32);
      l.backward();
      opt.step();
      losses.push_back(l.item());
    }
    for (const Tensor &p : model->module().parameters()) EXPECT_EQ(p.dtype(), DType::f32);
    if (compiled) {
      EXPECT_EQ(cf.stats().recompiles, 0);
    }
    return losses;
  };
  std::vector<double> f32 = run(false, false), eager = run(true, false), full = run(true, true);
  for (size_t i = 0; i < f32.size(); ++i) {
    EXPECT_NEAR(eager[i], f32[i], 0.02 * f32[i]) << "eager autocast, step " << i;
    EXPECT_NEAR(full[i], f32[i], 0.02 * f32[i]) << "compiled autocast, step " << i;
  }
  EXPECT_LT(eager.back(), 0.5 * eager.front());
  std::printf("loss f32 %.4f -> %.4f, eager autocast %.4f -> %.4f, compiled %.4f -> %.4f\n",
              f32.front(), f32.back(), eager.front(), eager.back(), full.front(), full.back());
}

} // namespace
