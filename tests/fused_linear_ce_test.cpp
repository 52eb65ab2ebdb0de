// The fused LM head: a traced cross_entropy over linear(x, w)'s f32 logits with a large class
// count records linear_ce_pick (row chunks, no logits held); its loss and gradients equal the
// unfused eager ones in full, regional and whole-step mode, and it applies only there.
#include <gtest/gtest.h>

#include <rcjit/rcjit.h>

#include "targets/eager/Eager.h"
#include "tracer/OpsInternal.h"

using namespace rcjit;

namespace {

// turns the fusion on for one test (it is off by default)
struct FusedOn {
  bool was = detail::setFusedLinearCe(true);
  ~FusedOn() { detail::setFusedLinearCe(was); }
};

constexpr int64_t kHidden = 16, kClasses = 5000; // past the 4096-class threshold

struct Head : nn::Module<Head> {
  nn::Linear proj{kHidden, kHidden, true, 1};
  Tensor w = Tensor::randn({kClasses, kHidden}, 2) * 0.5;
  bool bias = false;
  Tensor b = Tensor::randn({kClasses}, 3);
  Head() {
    register_module("proj", proj);
    register_parameter("w", w);
    register_parameter("b", b);
  }
  Tensor forward(const Tensor &x) {
    Tensor h = tanh(proj(x));
    return linear(h, w, bias ? b : Tensor());
  }
};

// i32 targets over [2, 6] below `classes`, two of them ignored (-100)
Tensor targets(int64_t classes = kClasses) {
  std::vector<int64_t> t = {3, 4999, -100, 0, 17, 2500, 4098, 1, -100, 999, 42, 4097};
  for (int64_t &v : t)
    if (v >= 0) v %= classes;
  return Tensor::from_blob(t.data(), {2, 6}, DType::i64).to(DType::i32); // a copy
}

std::vector<Tensor> gradsOf(const std::function<Tensor()> &loss, nn::ModuleBase &m, double *value) {
  m.zero_grad();
  Tensor l = loss();
  *value = l.item();
  l.backward();
  std::vector<Tensor> g;
  for (const Tensor &p : m.parameters()) g.push_back(p.grad());
  return g;
}

void expectGradsEqual(const std::vector<Tensor> &got, const std::vector<Tensor> &want,
                      const std::string &what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    if (!want[i].defined()) continue; // the unused bias
    ASSERT_TRUE(got[i].defined()) << what << " parameter " << i;
    EXPECT_TRUE(allclose(got[i], want[i], 1e-4, 1e-6)) << what << " parameter " << i;
  }
}

TEST(FusedLinearCe, LossAndGradientsEqualUnfusedInFullAndRegionalMode) {
  FusedOn on;
  Head head;
  Tensor x = Tensor::randn({2, 6, kHidden}, 4), t = targets();
  auto loss = [&](const Tensor &a, const Tensor &b) { return cross_entropy(head(a), b); };
  double want = 0, got = 0;
  std::vector<Tensor> wantGrads = gradsOf([&] { return loss(x, t); }, head, &want);
  for (Mode mode : {Mode::full, Mode::regional}) {
    CompileOptions o;
    o.mode = mode;
    auto cf = compile(loss, o);
    for (int call = 0; call < 2; ++call) {
      std::vector<Tensor> g = gradsOf([&] { return cf(x, t); }, head, &got);
      EXPECT_NEAR(got, want, 1e-4 * std::abs(want));
      expectGradsEqual(g, wantGrads, mode == Mode::full ? "full" : "regional");
    }
    const std::string ex = cf.explain();
    if (mode == Mode::full) {
      EXPECT_NE(ex.find("linear_ce_pick"), std::string::npos) << ex;
    } else { // explain() lists the stages, not their ops: the logits are not saved
      const size_t at = ex.find(" bytes saved");
      ASSERT_NE(at, std::string::npos) << ex;
      const size_t from = ex.rfind(' ', at - 1) + 1;
      EXPECT_LT(std::stoll(ex.substr(from, at - from)), 2 * 6 * kClasses * 4) << ex;
    }
  }
}

TEST(FusedLinearCe, WholeStepGradientsEqualUnfused) {
  FusedOn on;
  Head head;
  Tensor x = Tensor::randn({2, 6, kHidden}, 5), t = targets();
  double want = 0;
  std::vector<Tensor> wantGrads = gradsOf([&] { return cross_entropy(head(x), t); }, head, &want);
  auto step = compile([&](const Tensor &a, const Tensor &b) {
    head.zero_grad();
    Tensor l = cross_entropy(head(a), b);
    l.backward();
    return l.detach();
  });
  head.zero_grad();
  const double got = step(x, t).item();
  EXPECT_NEAR(got, want, 1e-4 * std::abs(want));
  std::vector<Tensor> g;
  for (const Tensor &p : head.parameters()) g.push_back(p.grad());
  expectGradsEqual(g, wantGrads, "whole step");
  // one op yields loss and gradients (jit/passes/LinearCeFold.h): the gradient op, no pick
  const std::string ex = step.explain();
  EXPECT_NE(ex.find("linear_ce_pick_backward"), std::string::npos) << ex;
  for (size_t at = ex.find("linear_ce_pick"); at != std::string::npos;
       at = ex.find("linear_ce_pick", at + 1)) {
    EXPECT_EQ(ex.compare(at, 23, "linear_ce_pick_backward"), 0) << ex;
  }
}

// Not fused: a biased linear, a small class count, bf16 logits under autocast, and eager
// code (no trace to look back into); the compiled results still equal eager's. Nor when
// turned off (the default).
TEST(FusedLinearCe, AppliesOnlyToABiasFreeF32LinearOverManyClassesWhenOn) {
  FusedOn on;
  Head head;
  head.bias = true;
  Tensor x = Tensor::randn({2, 6, kHidden}, 6), t = targets();
  auto biased =
      compile([&](const Tensor &a, const Tensor &b) { return cross_entropy(head(a), b); });
  EXPECT_NEAR(biased(x, t).item(), cross_entropy(head(x), t).item(), 1e-4);
  EXPECT_EQ(biased.explain().find("linear_ce_pick"), std::string::npos) << biased.explain();

  Tensor w = Tensor::randn({100, kHidden}, 7), few = targets(100);
  auto small = compile(
      [&](const Tensor &a, const Tensor &b) { return cross_entropy(linear(a, w, Tensor()), b); });
  EXPECT_NEAR(small(x, few).item(), cross_entropy(linear(x, w, Tensor()), few).item(), 1e-4);
  EXPECT_EQ(small.explain().find("linear_ce_pick"), std::string::npos) << small.explain();

  head.bias = false;
  auto mixed = compile([&](const Tensor &a, const Tensor &b) {
    Autocast ac(DType::bf16);
    return cross_entropy(head(a), b);
  });
  mixed(x, t);
  EXPECT_EQ(mixed.explain().find("linear_ce_pick"), std::string::npos) << mixed.explain();

  detail::setFusedLinearCe(false);
  auto off = compile([&](const Tensor &a, const Tensor &b) { return cross_entropy(head(a), b); });
  EXPECT_NEAR(off(x, t).item(), cross_entropy(head(x), t).item(), 1e-4);
  EXPECT_EQ(off.explain().find("linear_ce_pick"), std::string::npos) << off.explain();
}

// The kernels check the result size they are handed (a compiled program from another build
// must get an Error, not an overrun): the gradient op's packed [dw | dx | values] and the
// pick's per-row values.
TEST(FusedLinearCe, KernelsRefuseAResultOfTheWrongSize) {
  Tensor x = Tensor::randn({2, 6, kHidden}, 8), w = Tensor::randn({kClasses, kHidden}, 9);
  Tensor t = targets().to(DType::i64), g = Tensor::randn({2, 6}, 10);
  const int64_t packed = (12 + kClasses) * kHidden + 12;
  Tensor ok = eager::run(OpKind::linear_ce_pick_backward, {x, w, t, g}, {},
                         TensorMeta{DType::f32, {packed}});
  EXPECT_EQ(ok.numel(), packed);
  EXPECT_TRUE(
      allclose(reshape(slice(ok, 0, packed - 12, packed), {2, 6}),
               eager::run(OpKind::linear_ce_pick, {x, w, t}, {}, TensorMeta{DType::f32, {2, 6}}),
               1e-5, 1e-6));
  try {
    eager::run(OpKind::linear_ce_pick_backward, {x, w, t, g}, {},
               TensorMeta{DType::f32, {packed - 12}}); // the layout before the values
    ADD_FAILURE() << "no Error";
  } catch (const Error &e) {
    EXPECT_NE(std::string(e.what()).find("expected a result of"), std::string::npos) << e.what();
  }
  EXPECT_THROW(eager::run(OpKind::linear_ce_pick, {x, w, t}, {}, TensorMeta{DType::f32, {13}}),
               Error);
}

// A tied head (one weight for the embedding and the LM head): the compiled backward scatters
// the embedding's gradient into the head's weight gradient where it lies, at the front of the
// gradient op's packed result, and that block becomes the weight's gradient as it is. The
// peak of a call is one weight-sized block, not two (before dw led the packed result, the
// sum took a block of its own: llama-3.2-1b's peak +1 GB); gradients equal eager's.
TEST(FusedLinearCe, ATiedHeadsGradientIsSummedInThePackedBlock) {
  FusedOn on;
  constexpr int64_t kN = 8192, kK = 256, kBytes = kN * kK * 4; // an 8 MiB weight
  struct TiedLm : nn::Module<TiedLm> {
    Tensor w = Tensor::randn({kN, kK}, 5) * 0.1;
    TiedLm() { register_parameter("w", w); }
    Tensor forward(const Tensor &ids) { return linear(tanh(embedding(w, ids)), w); }
  } lm;
  std::vector<int64_t> idv;
  for (int i = 0; i < 12; ++i) idv.push_back((i * 677) % kN);
  const Tensor ids = Tensor::from_vector(idv, {2, 6}), t = targets(kN);
  auto loss = [&](const Tensor &i, const Tensor &tt) { return cross_entropy(lm(i), tt); };
  double want = 0, got = 0;
  const std::vector<Tensor> wantGrads = gradsOf([&] { return loss(ids, t); }, lm, &want);
  auto cf = compile(loss);
  for (int call = 0; call < 2; ++call) {
    SCOPED_TRACE("call " + std::to_string(call));
    lm.zero_grad();
    const int64_t before = memory_stats().current_bytes;
    reset_peak_memory_stats();
    std::vector<Tensor> g = gradsOf([&] { return cf(ids, t); }, lm, &got);
    const int64_t peak = memory_stats().peak_bytes - before;
    EXPECT_NEAR(got, want, 1e-4 * std::abs(want));
    expectGradsEqual(g, wantGrads, "tied head");
    if (call == 1) { // (the first call also compiles and packs)
      EXPECT_LT(peak, kBytes + kBytes / 2) << "peak " << peak << " bytes over the call";
    }
  }
}

} // namespace
