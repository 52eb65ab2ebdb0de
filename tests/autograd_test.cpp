// Eager autograd: recording, backward/grad semantics, modules' parameters, error paths.
#include <gtest/gtest.h>

#include "tests/AutogradTestUtil.h"
#include "tests/TestUtil.h"

#include <cmath>
#include <thread>
#include <vector>

#include <rcjit/rcjit.h>

using namespace rcjit;

namespace {

using rcjit::test::errorOf;
using rcjit::test::expectValues;
using rcjit::test::f64;
using rcjit::test::leaf;

TEST(Autograd, PolynomialGradient) {
  Tensor x = leaf({1, -2, 0.5}, {3});
  Tensor y = sum(x * x * x + 3.0 * x);
  EXPECT_TRUE(y.requires_grad());
  EXPECT_FALSE(y.is_leaf());
  y.backward();
  expectValues(x.grad(), {3 + 3, 12 + 3, 0.75 + 3});
}

TEST(Autograd, BroadcastGradientsAreSummedToTheInputShape) {
  Tensor a = leaf({1, 2, 3}, {3, 1});
  Tensor b = leaf({10, 20, 30, 40}, {4});
  sum(a * b).backward();
  ASSERT_EQ(a.grad().shape(), (Shape{3, 1}));
  ASSERT_EQ(b.grad().shape(), (Shape{4}));
  expectValues(a.grad(), {100, 100, 100});
  expectValues(b.grad(), {6, 6, 6, 6});
}

TEST(Autograd, GradAccumulatesOverTwoBackwardCalls) {
  Tensor x = leaf({1, 2}, {2});
  sum(x * x).backward();
  sum(x * 3.0).backward();
  expectValues(x.grad(), {2 + 3, 4 + 3});
}

TEST(Autograd, RetainGraphAllowsASecondBackward) {
  Tensor x = leaf({1, 2}, {2});
  Tensor y = sum(exp(x));
  y.backward(Tensor(), true);
  y.backward();
  expectValues(x.grad(), {2 * std::exp(1.0), 2 * std::exp(2.0)});
}

TEST(Autograd, GradReturnsGradientsWithoutTouchingGrad) {
  Tensor x = leaf({1, 2, 3}, {3});
  Tensor h = x * x;
  Tensor y = sum(h * 2.0);
  std::vector<Tensor> g = rcjit::grad({y}, {x, h});
  ASSERT_EQ(g.size(), 2u);
  expectValues(g[0], {4, 8, 12});
  expectValues(g[1], {2, 2, 2});
  EXPECT_FALSE(x.grad().defined());
}

TEST(Autograd, GradFollowsOnlyThePathsToItsInputs) {
  Tensor x = leaf({1, 2}, {2}), w = leaf({3, 4}, {2});
  Tensor h = x * w;
  Tensor y = sum(h + exp(w) * h);
  std::vector<Tensor> g = rcjit::grad({y}, {h}, {}, true);
  expectValues(g[0], {1 + std::exp(3.0), 1 + std::exp(4.0)});
  g = rcjit::grad({y}, {x});
  expectValues(g[0], {3 * (1 + std::exp(3.0)), 4 * (1 + std::exp(4.0))});
  EXPECT_FALSE(w.grad().defined());
}

TEST(Autograd, ALongChainBackpropagatesAndIsFreedWithoutRecursion) {
  Tensor x = leaf({1}, {1});
  Tensor y = x;
  for (int i = 0; i < 200000; ++i) y = y * 1.0;
  sum(y).backward(Tensor(), true);
  expectValues(x.grad(), {1});
  y = Tensor(); // frees 200000 nodes
}

TEST(Autograd, GradOfAnUnusedInputIsUndefined) {
  Tensor x = leaf({1}, {1}), z = leaf({2}, {1});
  std::vector<Tensor> g = rcjit::grad({sum(x * 2.0)}, {x, z});
  expectValues(g[0], {2});
  EXPECT_FALSE(g[1].defined());
}

TEST(Autograd, GradWithExplicitOutputGradients) {
  Tensor x = leaf({1, 2}, {2});
  Tensor y = x * 3.0;
  std::vector<Tensor> g = rcjit::grad({y}, {x}, {f64({1, 10}, {2})});
  expectValues(g[0], {3, 30});
}

TEST(Autograd, DetachStopsTheGradient) {
  Tensor x = leaf({2, 3}, {2});
  Tensor d = x.detach();
  EXPECT_FALSE(d.requires_grad());
  EXPECT_TRUE(d.sharesStorage(x));
  sum(d * x).backward();
  expectValues(x.grad(), {2, 3});
}

TEST(Autograd, NoGradGuardRecordsNothing) {
  Tensor x = leaf({1, 2}, {2});
  EXPECT_TRUE(is_grad_enabled());
  {
    NoGradGuard g;
    EXPECT_FALSE(is_grad_enabled());
    {
      NoGradGuard nested;
      EXPECT_FALSE(is_grad_enabled());
    }
    EXPECT_FALSE(is_grad_enabled());
    Tensor y = x * 2.0;
    EXPECT_FALSE(y.requires_grad());
    EXPECT_TRUE(y.is_leaf());
  }
  EXPECT_TRUE(is_grad_enabled());
  EXPECT_TRUE((x * 2.0).requires_grad());
}

TEST(Autograd, GradModeIsPerThread) {
  NoGradGuard g;
  bool other = false;
  std::thread t([&other] { other = is_grad_enabled(); });
  t.join();
  EXPECT_TRUE(other);
  EXPECT_FALSE(is_grad_enabled());
}

TEST(Autograd, NothingRequiresGradRecordsNothing) {
  Tensor a = f64({1, 2}, {2});
  Tensor y = exp(a) * a;
  EXPECT_FALSE(y.requires_grad());
  EXPECT_TRUE(y.is_leaf());
}

TEST(Autograd, IntegerResultsCarryNoGradient) {
  Tensor x = leaf({1, 2}, {2});
  EXPECT_FALSE(gt(x, 1.5).requires_grad());
  EXPECT_FALSE(argmax(x, 0).requires_grad());
}

// While compile traces, values that depend on a parameter carry an autograd tape of traced
// ops (so backward() inside the function traces the backward); the call's outputs carry
// the compiled backward instead.
TEST(Autograd, ATracedFunctionsTapeIsTracedAndItsOutputsUseTheCompiledBackward) {
  Tensor x = leaf({1, 2, 3}, {3});
  bool checked = false;
  auto f = compile([&checked](const std::vector<Tensor> &v) {
    Tensor y = v[0] * 2.0;
    EXPECT_TRUE(y.requires_grad()) << "the trace's own tape";
    checked = true;
    return std::vector<Tensor>{y};
  });
  std::vector<Tensor> out = f(std::vector<Tensor>{x});
  EXPECT_TRUE(checked);
  expectValues(out[0], {2, 4, 6});
  // the compiled call's output carries the compiled backward instead
  ASSERT_TRUE(out[0].requires_grad());
  sum(out[0], {}).backward();
  expectValues(x.grad(), {2, 2, 2});
}

TEST(Autograd, CastGradientIsCastBack) {
  Tensor x = leaf({1, 2}, {2});
  Tensor y = x.to(DType::f32);
  EXPECT_TRUE(y.requires_grad());
  std::vector<Tensor> g =
      rcjit::grad({sum(y * Tensor::from_vector(std::vector<float>{0.5f, -2.0f}, {2}))}, {x});
  EXPECT_EQ(g[0].dtype(), DType::f64);
  expectValues(g[0], {0.5, -2});
}

TEST(Autograd, CloneIsDifferentiable) {
  Tensor x = leaf({1, 2}, {2});
  Tensor c = x.clone();
  EXPECT_FALSE(c.sharesStorage(x));
  sum(c * c).backward();
  expectValues(x.grad(), {2, 4});
}

TEST(Autograd, ModuleParametersAreLeavesThatRequireGrad) {
  nn::Linear lin(3, 2);
  std::vector<Tensor> ps = lin.parameters();
  ASSERT_EQ(ps.size(), 2u);
  auto named = lin.named_parameters();
  for (size_t i = 0; i < ps.size(); ++i) {
    EXPECT_TRUE(ps[i].requires_grad());
    EXPECT_TRUE(ps[i].is_leaf());
    EXPECT_TRUE(ps[i].sharesStorage(named[i].second));
  }
  Tensor x = Tensor::randn({4, 3}, 1);
  sum(lin(x)).backward();
  EXPECT_EQ(lin.weight.grad().shape(), (Shape{2, 3}));
  EXPECT_TRUE(allclose(lin.bias.grad(), Tensor::full({2}, 4.0)));
  lin.zero_grad();
  EXPECT_FALSE(lin.weight.grad().defined());
  EXPECT_FALSE(lin.bias.grad().defined());
  lin.to(DType::f64);
  EXPECT_TRUE(lin.weight.is_leaf());
  EXPECT_TRUE(lin.weight.requires_grad());
  EXPECT_EQ(lin.weight.dtype(), DType::f64);
}

TEST(AutogradErrors, BackwardOnATensorThatNeedsNoGrad) {
  Tensor x = f64({1, 2}, {2});
  std::string msg = errorOf([&] { sum(x).backward(); });
  EXPECT_NE(msg.find("does not require grad"), std::string::npos) << msg;
  EXPECT_NE(msg.find("requires_grad_()"), std::string::npos) << msg;
}

TEST(AutogradErrors, BackwardOnANonScalarWithoutAGradient) {
  Tensor x = leaf({1, 2}, {2});
  std::string msg = errorOf([&] { (x * 2.0).backward(); });
  EXPECT_NE(msg.find("only for a one-element tensor"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[2]"), std::string::npos) << msg;
}

TEST(AutogradErrors, AGradientOfTheWrongShape) {
  Tensor x = leaf({1, 2}, {2});
  std::string msg = errorOf([&] { (x * 2.0).backward(f64({1, 2, 3}, {3})); });
  EXPECT_NE(msg.find("gradient's shape [3] does not match the tensor's shape [2]"),
            std::string::npos)
      << msg;
}

TEST(AutogradErrors, AnIntegerTensorCannotRequireGrad) {
  Tensor i = Tensor::arange(4);
  std::string msg = errorOf([&] { i.requires_grad_(); });
  EXPECT_NE(msg.find("only floating tensors can require gradients, got i64[4]"), std::string::npos)
      << msg;
}

TEST(AutogradErrors, ASecondBackwardThroughFreedSavedValues) {
  Tensor x = leaf({1, 2}, {2});
  Tensor y = sum(x * x);
  y.backward();
  std::string msg = errorOf([&] { y.backward(); });
  EXPECT_NE(msg.find("backward through the graph a second time"), std::string::npos) << msg;
  EXPECT_NE(msg.find("retain_graph"), std::string::npos) << msg;
}

TEST(AutogradErrors, ASavedValueWrittenInPlace) {
  Tensor x = leaf({1, 2}, {2});
  Tensor h = exp(x);
  Tensor y = sum(h * h);
  {
    NoGradGuard g;
    h.copy_(f64({0, 0}, {2}));
  }
  std::string msg = errorOf([&] { y.backward(); });
  EXPECT_NE(msg.find("modified in place"), std::string::npos) << msg;
}

TEST(AutogradErrors, ANonLeafCannotStopRequiringGrad) {
  Tensor x = leaf({1}, {1});
  Tensor y = x * 2.0;
  std::string msg = errorOf([&] { y.requires_grad_(false); });
  EXPECT_NE(msg.find("detach()"), std::string::npos) << msg;
}

TEST(AutogradErrors, Conv2dBackwardChecksTheGradShape) {
  Tensor g = Tensor::randn({1, 2, 3, 3}, 1), w = Tensor::randn({2, 1, 3, 3}, 2);
  std::string msg = errorOf([&] { conv2d_backward_input(g, w, {1, 1, 4, 4}); });
  EXPECT_NE(msg.find("is not the shape conv2d("), std::string::npos) << msg;
  EXPECT_EQ(conv2d_backward_input(g, w, {1, 1, 5, 5}).shape(), (Shape{1, 1, 5, 5}));
}

TEST(Autograd, Conv2dGradientsOfASumAreWindowCounts) {
  // d sum(conv2d(x, ones)) / dx = how many output windows cover each input element
  Tensor x = Tensor::randn({1, 1, 4, 4}, 1).requires_grad_();
  Tensor w = Tensor::ones({1, 1, 3, 3}).requires_grad_();
  Tensor b = Tensor::zeros({1}).requires_grad_();
  sum(conv2d(x, w, b)).backward();
  EXPECT_TRUE(allclose(x.grad(), Tensor::from_vector(std::vector<float>{1, 2, 2, 1, 2, 4, 4, 2, 2,
                                                                        4, 4, 2, 1, 2, 2, 1},
                                                     {1, 1, 4, 4})));
  EXPECT_TRUE(allclose(b.grad(), Tensor::full({1}, 4.0)));
  EXPECT_EQ(w.grad().shape(), (Shape{1, 1, 3, 3}));
}

} // namespace

namespace {

TEST(EmbeddingBackward, SumsRowsOfRepeatedIdsAndChecksShapes) {
  Tensor g = Tensor::from_vector(std::vector<float>{1, 2, 3, 4, 5, 6}, {3, 2});
  Tensor ids = Tensor::from_vector(std::vector<int64_t>{2, 0, 2}, {3});
  Tensor w = embedding_backward(g, ids, 4);
  EXPECT_TRUE(allclose(w, Tensor::from_vector(std::vector<float>{3, 4, 0, 0, 6, 8, 0, 0}, {4, 2})));
  std::string msg = rcjit::test::errorOf([&] { embedding_backward(g, ids, 2); });
  EXPECT_NE(msg.find("out of range"), std::string::npos) << msg;
  msg = rcjit::test::errorOf([&] {
    embedding_backward(g, Tensor::from_vector(std::vector<int64_t>{0, 1}, {2}), 4);
  });
  EXPECT_NE(msg.find("expected grad [..., dim] over ids [...]"), std::string::npos) << msg;
}

TEST(Autograd, ASecondGradientIsSummedIntoTheFirstsBlock) {
  // w (1 MiB) feeds two products, as a tied embedding feeds the embedding and the LM head:
  // its two gradients are summed into the first's block, with no third block for the sum
  Tensor w = Tensor::randn({512, 512}, 1).requires_grad_();
  Tensor a = Tensor::randn({8, 512}, 2), b = Tensor::randn({8, 512}, 3);
  Tensor loss = sum(matmul(a, w)) + sum(matmul(b, w));
  const int64_t block = 512 * 512 * 4;
  const int64_t before = memory_stats().current_bytes;
  reset_peak_memory_stats();
  loss.backward();
  EXPECT_LT(memory_stats().peak_bytes - before, 2 * block + block / 2) << "a third block";
  Tensor ones = Tensor::ones({8, 512});
  Tensor want = matmul(transpose(a, 0, 1), ones) + matmul(transpose(b, 0, 1), ones);
  EXPECT_TRUE(allclose(w.grad(), want, 1e-5, 1e-5));
  // a second backward() accumulates into grad()'s own block, which no one else holds
  const void *at = w.grad().data_ptr();
  (sum(matmul(a, w)) + sum(matmul(b, w))).backward();
  EXPECT_EQ(w.grad().data_ptr(), at);
  EXPECT_TRUE(allclose(w.grad(), want * 2.0, 1e-5, 1e-5));
  // a gradient someone holds is not written: the sum is a new tensor
  Tensor held = w.grad();
  (sum(matmul(a, w)) + sum(matmul(b, w))).backward();
  EXPECT_TRUE(allclose(held, want * 2.0, 1e-5, 1e-5));
  EXPECT_TRUE(allclose(w.grad(), want * 3.0, 1e-5, 1e-5));
  EXPECT_NE(w.grad().data_ptr(), held.data_ptr());
}

TEST(Autograd, AGradientKeepsNoLargerBlockAlive) {
  // a's gradient is the first slice of cat's gradient (a view at offset 0 of its 1004
  // floats); kept as grad() it would hold all of them after b's slice was copied out (a
  // ddp bucket's first gradient held the whole bucket): it is copied into a block of its
  // own. Eager and compiled; memory held after backward() is the two gradients.
  for (bool compiled : {false, true}) {
    SCOPED_TRACE(compiled ? "compiled" : "eager");
    Tensor a = Tensor::randn({4}, 1).requires_grad_(),
           b = Tensor::randn({1000}, 2).requires_grad_();
    Tensor w = Tensor::randn({1004}, 3);
    auto f = [&](const Tensor &x) { return sum(cat({a, b}, 0) * x); };
    auto c = compile(f);
    const int64_t before = memory_stats().current_bytes;
    (compiled ? c(w) : f(w)).backward();
    EXPECT_EQ(memory_stats().current_bytes - before, (4 + 1000) * 4);
    EXPECT_TRUE(allclose(a.grad(), slice(w, 0, 0, 4)));
    EXPECT_TRUE(allclose(b.grad(), slice(w, 0, 4, 1004)));
  }
}

TEST(Autograd, ATiedEmbeddingsRowsAreScatteredIntoTheOtherGradientsBlock) {
  // w (1 MiB) is an embedding and a linear's weight (gpt2's token embedding and LM head):
  // the embedding's backward adds its rows into the linear's weight gradient in place
  // instead of making a [4096, 64] block of its own for them
  Tensor ids = Tensor::from_vector(std::vector<int64_t>{3, 7, 3, 4095, 0, 7, 7, 12}, {2, 4});
  auto loss = [&](const Tensor &emb, const Tensor &head) {
    return sum(tanh(linear(embedding(emb, ids) * 2.0, head)));
  };
  Tensor wa = Tensor::randn({4096, 64}, 1).requires_grad_();
  Tensor wb = Tensor::randn({4096, 64}, 1).requires_grad_();
  loss(wa, wb).backward(); // two leaves: the two gradients apart
  Tensor want = wa.grad() + wb.grad();
  Tensor w = Tensor::randn({4096, 64}, 1).requires_grad_();
  Tensor l = loss(w, w);
  const int64_t block = 4096 * 64 * 4;
  const int64_t before = memory_stats().current_bytes;
  reset_peak_memory_stats();
  l.backward();
  EXPECT_LT(memory_stats().peak_bytes - before, block + block / 2) << "a second block";
  EXPECT_TRUE(allclose(w.grad(), want, 1e-5, 1e-5));
  // a gradient another leaf holds too (add hands one gradient to both of its inputs) is
  // not written: the rows get a block of their own
  Tensor w2 = Tensor::randn({4096, 64}, 1).requires_grad_();
  Tensor x = Tensor::zeros({4096, 64}).requires_grad_();
  Tensor c = Tensor::randn({4096, 64}, 5);
  (sum(embedding(w2, ids) * 2.0) + sum((w2 + x) * c)).backward();
  EXPECT_TRUE(allclose(x.grad(), c, 0, 0)) << "the shared gradient was written";
  Tensor rows = embedding_backward(Tensor::full({2, 4, 64}, 2.0), ids, 4096);
  EXPECT_TRUE(allclose(w2.grad(), c + rows, 1e-6, 1e-6));
}

} // namespace
