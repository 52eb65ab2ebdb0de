// The lazy backward of compiled training: a grad-mode call compiles the forward alone; the
// backward is compiled when a backward() first reaches it (cold and warm compile cache),
// and its gradients equal eager's.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>

#include <rcjit/rcjit.h>

#include "jit/Tiered.h"
#include "tests/TestUtil.h"

using namespace rcjit;
namespace fs = std::filesystem;

namespace {

struct Net : nn::Module<Net> {
  nn::Linear a{16, 32}, b{32, 8};
  Net() {
    register_module("a", a);
    register_module("b", b);
  }
  Tensor forward(const Tensor &x) { return b(tanh(a(x))); }
};

std::vector<Tensor> gradsOf(const std::function<Tensor()> &loss, Net &net) {
  net.zero_grad();
  loss().backward();
  std::vector<Tensor> g;
  for (const Tensor &p : net.parameters()) g.push_back(p.grad());
  return g;
}

void expectGradsEqual(const std::vector<Tensor> &got, const std::vector<Tensor> &want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_TRUE(got[i].defined()) << "parameter " << i;
    EXPECT_TRUE(allclose(got[i], want[i], 1e-4, 1e-5)) << "parameter " << i;
  }
}

TEST(LazyBackward, GradModeCallWithoutBackwardCompilesOneProgram) {
  test::IsolatedCache c("rcjit-lazy-backward");
  for (Mode mode : {Mode::full, Mode::regional}) {
    Net net;
    Tensor x = Tensor::randn({4, 16}, 1), y = Tensor::randn({4, 8}, 2);
    CompileOptions o;
    o.mode = mode;
    auto cf = compile([&](const Tensor &a, const Tensor &b) { return mse_loss(net(a), b); }, o);
    Tensor l = cf(x, y); // grad mode on, the parameters require grad, no backward()
    EXPECT_TRUE(l.requires_grad());
    EXPECT_EQ(cf.stats().compiles, 1) << cf.explain();
    EXPECT_NE(cf.explain().find("not"), std::string::npos) << cf.explain();
    // the first backward() compiles the backward; gradients equal eager's
    std::vector<Tensor> want = gradsOf([&] { return mse_loss(net(x), y); }, net);
    net.zero_grad();
    l.backward();
    std::vector<Tensor> got;
    for (const Tensor &p : net.parameters()) got.push_back(p.grad());
    expectGradsEqual(got, want);
    EXPECT_EQ(cf.stats().compiles, 2) << cf.explain();
    // later calls and backwards compile nothing more
    expectGradsEqual(gradsOf([&] { return cf(x, y); }, net), want);
    EXPECT_EQ(cf.stats().compiles, 2) << cf.explain();
    EXPECT_EQ(cf.stats().recompiles, 0);
  }
}

TEST(LazyBackward, WarmCacheLoadsTheBackwardLazily) {
  test::IsolatedCache c("rcjit-lazy-backward");
  Net net;
  Tensor x = Tensor::randn({3, 16}, 3), y = Tensor::randn({3, 8}, 4);
  auto fn = [&](const Tensor &a, const Tensor &b) { return mse_loss(net(a), b); };
  std::vector<Tensor> want = gradsOf([&] { return fn(x, y); }, net);
  CompileOptions o;
  o.tiered = false; // the caches hold exactly what the cold compile made
  {
    auto cold = compile(fn, o);
    expectGradsEqual(gradsOf([&] { return cold(x, y); }, net), want);
    EXPECT_EQ(cold.stats().compiles, 2) << cold.explain();
  }
  auto warm = compile(fn, o); // a new function: the same graphs, served by the caches
  Tensor l = warm(x, y);
  EXPECT_EQ(warm.stats().compiles, 1) << warm.explain();
  // (cache hits are not asserted: on a busy machine a compile groups its kernels into modules
  // otherwise than the cold one did, and the modules' keys differ; docs/cache.md)
  net.zero_grad();
  l.backward();
  std::vector<Tensor> got;
  for (const Tensor &p : net.parameters()) got.push_back(p.grad());
  expectGradsEqual(got, want);
  EXPECT_EQ(warm.stats().compiles, 2) << warm.explain();
}

} // namespace
