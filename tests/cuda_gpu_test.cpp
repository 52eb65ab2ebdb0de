// On a GPU (label `gpu`; every suite here skips itself without one): device tensors, the
// caching allocator, eager ops, the conformance suite compiled for cuda, toy64 and Llama
// layers in full and regional mode, CUDA graph replay, cuBLAS through linear.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <rcjit/rcjit.h>

#include "models/ModelLlama.h"
#include "models/Models.h"
#include "targets/cuda/CudaRuntime.h"
#include "tests/AutogradTestUtil.h"
#include "tests/GpuTest.h"
#include "tests/TestUtil.h"
#include "tests/conformance/Conformance.h"
#include "tests/conformance/OpCases.h"

namespace {

using namespace rcjit;
using rcjit::test::errorOf;

class GpuTensor : public rcjit::test::GpuTest {};
class GpuEager : public rcjit::test::GpuTest {};
class GpuCompile : public rcjit::test::GpuTest {};
class GpuModels : public rcjit::test::GpuTest {};
class GpuTraining : public rcjit::test::GpuTest {};

std::vector<Tensor> onGpu(const std::vector<Tensor> &v) {
  std::vector<Tensor> out;
  for (const Tensor &t : v) out.push_back(t.to(Device::cuda()));
  return out;
}

TEST_F(GpuTensor, RoundTripsAndFactories) {
  const Tensor x = Tensor::randn({3, 5}, 7);
  const Tensor g = x.to(Device::cuda());
  EXPECT_TRUE(g.device().is_cuda());
  EXPECT_EQ(g.shape(), x.shape());
  EXPECT_EQ(g.to_vector<float>(), x.to_vector<float>());
  EXPECT_EQ(g.to(Device::cpu()).to_vector<float>(), x.to_vector<float>());
  // a strided view comes back right
  const Tensor t = transpose(g, 0, 1);
  EXPECT_FALSE(t.is_contiguous());
  EXPECT_EQ(t.to_vector<float>(), transpose(x, 0, 1).contiguous().to_vector<float>());
  EXPECT_EQ(t.to(Device::cpu()).to_vector<float>(),
            transpose(x, 0, 1).contiguous().to_vector<float>());
  EXPECT_DOUBLE_EQ(g.to_vector<float>()[4], x.to_vector<float>()[4]);
  // factories: memset patterns of every width, randn and arange as on the CPU
  for (DType dt : conformance::kAll) {
    SCOPED_TRACE(dtypeName(dt));
    const double v = dt == DType::boolean ? 1 : -2.5;
    Tensor want = Tensor::full({1000}, v, dt);
    Tensor got = Tensor::full({1000}, v, dt, Device::cuda());
    EXPECT_EQ(got.to_vector<double>(), want.to_vector<double>());
    EXPECT_EQ(Tensor::zeros({7}, dt, Device::cuda()).to_vector<double>(),
              std::vector<double>(7, 0.0));
  }
  EXPECT_EQ(Tensor::randn({64}, 3, DType::f32, Device::cuda()).to_vector<float>(),
            Tensor::randn({64}, 3).to_vector<float>());
  EXPECT_EQ(Tensor::arange(10, DType::i64, Device::cuda()).to_vector<int64_t>(),
            Tensor::arange(10).to_vector<int64_t>());
  EXPECT_DOUBLE_EQ(Tensor::full({}, 4.5, DType::f64, Device::cuda()).item(), 4.5);
  // clone and copy_ stay on the device
  Tensor c = g.clone();
  EXPECT_FALSE(c.sharesStorage(g));
  Tensor dst = Tensor::zeros({3, 5}, DType::f32, Device::cuda());
  dst.copy_(x);
  EXPECT_EQ(dst.to_vector<float>(), x.to_vector<float>());
  // mixing devices is a clear Error
  std::string e = errorOf([&] { g + x; });
  EXPECT_NE(e.find("different devices"), std::string::npos) << e;
}

TEST_F(GpuTensor, TheAllocatorReusesBlocks) {
  cuda::DeviceContext &ctx = cuda::DeviceContext::get(0);
  { Tensor warm = Tensor::empty({1 << 20}, DType::f32, Device::cuda()); }
  const cuda::AllocatorStats before = ctx.stats();
  for (int i = 0; i < 10; ++i) {
    Tensor t = Tensor::empty({1 << 20}, DType::f32, Device::cuda());
  }
  const cuda::AllocatorStats after = ctx.stats();
  EXPECT_EQ(after.deviceMallocs, before.deviceMallocs) << "steady state: no cuMemAlloc";
  EXPECT_GE(after.reuses, before.reuses + 10);
}

TEST_F(GpuEager, OpsRunOnTheDeviceAndMatchTheCpu) {
  const Tensor a = Tensor::randn({4, 8}, 1), b = Tensor::randn({4, 8}, 2);
  const Tensor w = Tensor::randn({6, 8}, 3), bias = Tensor::randn({6}, 4);
  const Tensor ga = a.to(Device::cuda()), gb = b.to(Device::cuda());
  auto same = [](const Tensor &got, const Tensor &want) {
    EXPECT_TRUE(got.device().is_cuda());
    EXPECT_TRUE(allclose(got.to(Device::cpu()), want, 1e-4, 1e-5));
  };
  same(ga + gb * 2, a + b * 2);
  same(softmax(ga, -1), softmax(a, -1));
  same(sum(ga, {1}), sum(a, {1}));
  same(amax(ga, {0}, true), amax(a, {0}, true));
  same(matmul(ga, transpose(gb, 0, 1)), matmul(a, transpose(b, 0, 1)));
  same(linear(ga, w.to(Device::cuda()), bias.to(Device::cuda())), linear(a, w, bias));
  same(reshape(transpose(ga, 0, 1), {32}), reshape(transpose(a, 0, 1), {32}));
  same(cat({ga, gb}, 0), cat({a, b}, 0));
  same(gelu(ga).to(DType::bf16).to(DType::f32), gelu(a).to(DType::bf16).to(DType::f32));
}

// The conformance suite of the CPU target, compiled for cuda, against the CPU's eager
// results (inputs are made on the CPU and copied to the GPU, contiguous).
TEST_F(GpuCompile, ConformanceSuiteMatchesTheCpu) {
  using namespace rcjit::conformance;
  CompileOptions o;
  o.target = Target::cuda;
  int cases = 0;
  forEachEagerCase([&](const OpCase &c, DType dt, const std::string &what,
                       const std::vector<Tensor> &in, const std::vector<Tensor> &want) {
    auto cf = compile(c.fn, o);
    std::vector<Tensor> got;
    try {
      got = cf(onGpu(in));
      got = cf(onGpu(in)); // the second call runs the cached entry
    } catch (const std::exception &e) {
      const std::string why = e.what();
      if (!noGpuStepYet(c.name) || why.find("no GPU implementation yet") == std::string::npos)
        ADD_FAILURE() << what << ": " << why;
      return;
    }
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_TRUE(got[i].device().is_cuda());
      EXPECT_TRUE(sameResult(got[i], want[i], gpuTolScale(c, dt))) << what << " output " << i;
    }
    ++cases;
  });
  EXPECT_GT(cases, 450);
}

TEST_F(GpuCompile, GraphsReplayAndMatchDirectLaunches) {
  nn::Linear l1(64, 64), l2(64, 64);
  l1.to(Device::cuda());
  l2.to(Device::cuda());
  auto fn = [&](const Tensor &x) { return l2(gelu(l1(x)) * 0.5 + x); };
  CompileOptions on, off;
  on.target = off.target = Target::cuda;
  off.cuda_graphs = false;
  auto withGraphs = compile(fn, on);
  auto direct = compile(fn, off);
  const Tensor x = Tensor::randn({32, 64}, 9).to(Device::cuda());
  const Tensor want = fn(x);
  for (int i = 0; i < 6; ++i) {
    EXPECT_TRUE(allclose(withGraphs(x).to(Device::cpu()), want.to(Device::cpu()), 1e-4, 1e-5));
    EXPECT_TRUE(allclose(direct(x).to(Device::cpu()), want.to(Device::cpu()), 1e-4, 1e-5));
  }
  EXPECT_EQ(withGraphs.stats().compiles, 1);
}

TEST_F(GpuCompile, CpuInputsAreAClearError) {
  CompileOptions o;
  o.target = Target::cuda;
  auto cf = compile([](const Tensor &x) { return x * 2; }, o);
  std::string e = errorOf([&] { cf(Tensor::ones({4})); });
  EXPECT_NE(e.find("needs every input on the GPU"), std::string::npos) << e;
}

// toy64 and Llama decoder layers on the GPU: full and regional mode equal the CPU.
void checkModel(tools::Model &m, const tools::ModelConfig &c, const std::string &what) {
  SCOPED_TRACE(what);
  std::vector<Tensor> in = m.makeInputs(c);
  const Tensor want = m.forward(in);
  m.to(Device::cuda());
  std::vector<Tensor> gin = onGpu(in);
  for (Mode mode : {Mode::full, Mode::regional}) {
    CompileOptions o;
    o.target = Target::cuda;
    o.mode = mode;
    auto cf = compile([&](const std::vector<Tensor> &v) { return m.forward(v); }, o);
    for (int call = 0; call < 3; ++call) {
      Tensor got = cf(gin);
      EXPECT_TRUE(allclose(got.to(Device::cpu()), want, 1e-3, 1e-4))
          << (mode == Mode::full ? "full" : "regional") << " call " << call;
    }
  }
  Tensor eager = m.forward(gin);
  EXPECT_TRUE(allclose(eager.to(Device::cpu()), want, 1e-3, 1e-4)) << "eager on the GPU";
  m.to(Device::cpu());
}

// Compiled training on the GPU (full and regional): a 2-layer GPT-2's parameter gradients
// equal the CPU's eager ones.
TEST_F(GpuTraining, Gpt2GradientsMatchTheCpu) {
  auto model = test::tinyGpt2(2, 8);
  std::vector<int64_t> tokens(16);
  for (int i = 0; i < 16; ++i) tokens[i] = (i * 7 + 3) % 50;
  Tensor ids = Tensor::from_vector(tokens, {2, 8});
  auto loss = [&](const Tensor &in, const Tensor &tg) {
    return cross_entropy(model->forward({in}), tg);
  };
  std::vector<Tensor> params = model->module().parameters();
  model->module().zero_grad();
  loss(ids, ids).backward();
  std::vector<Tensor> want;
  for (const Tensor &p : params) want.push_back(p.grad().clone());
  model->to(Device::cuda());
  params = model->module().parameters();
  Tensor gids = ids.to(Device::cuda());
  for (Mode mode : {Mode::full, Mode::regional}) {
    CompileOptions o;
    o.target = Target::cuda;
    o.mode = mode;
    auto cf = compile(loss, o);
    for (int call = 0; call < 2; ++call) {
      model->module().zero_grad();
      cf(gids, gids).backward();
      for (size_t i = 0; i < params.size(); ++i) {
        ASSERT_TRUE(params[i].grad().defined()) << "parameter " << i;
        EXPECT_TRUE(allclose(params[i].grad().to(Device::cpu()), want[i], 1e-3, 1e-4))
            << (mode == Mode::full ? "full" : "regional") << " call " << call << " parameter " << i;
      }
    }
  }
  model->to(Device::cpu());
}

// A whole training step (zero_grad, forward, backward, AdamW) compiled for cuda: the losses
// and parameters of the same steps run eagerly on the CPU. The optimizer's step count and
// learning rate live on the parameters' device.
TEST_F(GpuTraining, Gpt2WholeStepWithAdamWMatchesTheCpu) {
  std::vector<int64_t> tokens;
  for (int i = 0; i < 2 * 12; ++i) tokens.push_back((i * 11 + 5) % 50);
  Tensor ids = Tensor::from_vector(tokens, {2, 12});
  auto eagerModel = test::tinyGpt2(2, 12);
  const std::vector<double> want = test::eagerAdamWLosses(*eagerModel, ids, ids, 8, 3e-3);
  auto model = test::tinyGpt2(2, 12);
  model->to(Device::cuda());
  optim::AdamW opt(model->module().parameters(), {.lr = 3e-3});
  CompileOptions o;
  o.target = Target::cuda;
  auto step = test::compileWholeStep(*model, opt, o);
  Tensor gids = ids.to(Device::cuda());
  for (int i = 0; i < 8; ++i) {
    double got = step(gids, gids).item();
    EXPECT_NEAR(got, want[i], 1e-3 * std::abs(want[i])) << "step " << i;
  }
  std::vector<Tensor> got = model->module().parameters(), ref = eagerModel->module().parameters();
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_TRUE(allclose(got[i].to(Device::cpu()), ref[i], 1e-3, 1e-4)) << "parameter " << i;
  EXPECT_EQ(step.stats().compiles, 1);
}

TEST_F(GpuModels, Toy64AndLlamaLayersMatchTheCpu) {
  tools::ModelConfig c;
  c.batch = 4;
  c.seq = 128;
  auto toy = tools::findModel("toy64").build(c);
  checkModel(*toy, c, "toy64");
  tools::LlamaConfig lc;
  lc.hidden = 256;
  lc.heads = 8;
  lc.kvHeads = 2;
  lc.intermediate = 512;
  c.layers = 4;
  auto layers = tools::buildLlama(lc, c, /*layersOnly=*/true);
  checkModel(*layers, c, "llama layers");
}

} // namespace
