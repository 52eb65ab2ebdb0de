// A fused loop kernel holds at most 256 nodes: a long elementwise chain is cut into several
// kernels (LLVM's compile time then grows linearly with the graph), with eager's results.
#include <gtest/gtest.h>

#include <rcjit/rcjit.h>

using namespace rcjit;

namespace {

TEST(FuseCap, LongElementwiseChainIsCutIntoKernels) {
  NoGradGuard noGrad;
  auto chain = [](const Tensor &x) {
    Tensor h = x;
    for (int i = 0; i < 300; ++i) h = i % 3 == 0 ? tanh(h) : i % 3 == 1 ? h * 0.9 : h + 0.01;
    return h;
  };
  Tensor x = Tensor::randn({8, 16}, 7);
  CompileOptions o;
  o.tiered = false;
  auto cf = compile(chain, o);
  Tensor got = cf(x);
  EXPECT_TRUE(allclose(got, chain(x), 1e-4, 1e-5));
  const std::string ex = cf.explain();
  EXPECT_NE(ex.find("2 kernels"), std::string::npos) << ex; // 300 nodes: 256 + 44
}

} // namespace
