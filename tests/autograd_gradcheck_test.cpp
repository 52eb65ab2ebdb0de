// Gradients against central finite differences in f64: every case of the conformance op
// table (so a new op without a gradient case fails here), every OpKind classified by the
// rule table, and random DAGs of the conformance generator.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <rcjit/rcjit.h>

#include "autograd/Autograd.h"
#include "autograd/GradRules.h"
#include "tests/conformance/OpCases.h"
#include "tests/conformance/RandomDag.h"

namespace {

using namespace rcjit;
using namespace rcjit::conformance;
using autograd::GradKind;

// A leaf in f64 (contiguous, the storage of the input) and the input seen by the case: the
// leaf with the case's layout applied by ops (so layouts are differentiated through too).
struct GradInput {
  Tensor leaf; // requires grad when floating
  Layout layout;
  Shape shape; // the logical shape
  Tensor laidOut(const Tensor &base) const {
    switch (layout) {
    case Layout::contiguous:
      return base;
    case Layout::transposed:
      return transpose(base, -1, -2);
    case Layout::sliced:
      return slice(base, -1, 1, 1 + shape.back());
    case Layout::expanded:
      return expand(base, shape);
    }
    return base;
  }
};

GradInput makeGradInput(const In &in, uint64_t seed) {
  In spec = in;
  if (!spec.dtype || isFloating(*spec.dtype)) spec.dtype = DType::f64;
  Layout layout = spec.layout;
  if (spec.shape.empty() || (layout == Layout::transposed && spec.shape.size() < 2)) {
    layout = Layout::contiguous;
  }
  Shape storage = spec.shape;
  if (layout == Layout::transposed)
    std::swap(storage[storage.size() - 1], storage[storage.size() - 2]);
  if (layout == Layout::sliced) storage.back() = 2 * storage.back() + 1;
  if (layout == Layout::expanded) storage[0] = 1;
  In base = spec;
  base.shape = storage;
  base.layout = Layout::contiguous;
  Tensor t = makeInput(base, *spec.dtype, seed);
  if (isFloating(t.dtype())) t.requires_grad_();
  return {t, layout, spec.shape};
}

// sum_i sum(out_i * w_i) over the outputs of dtype `dt`, with fixed random weights w_i.
Tensor weightedLoss(const std::vector<Tensor> &outs, uint64_t seed, DType dt = DType::f64) {
  Tensor loss;
  for (size_t i = 0; i < outs.size(); ++i) {
    const Tensor &o = outs[i];
    if (!o.defined() || o.dtype() != dt) continue;
    Tensor w = makeInput(In{o.shape()}, dt, seed + 101 * i);
    Tensor term = sum(o * w);
    loss = loss.defined() ? loss + term : term;
  }
  return loss;
}

struct Check {
  int compared = 0;
  int skippedKinks = 0;
};

// Compares rcjit::grad of `loss(inputs)` with central differences at up to `maxPerInput`
// sampled elements of each floating input; an element where the one-sided differences
// disagree (a kink: relu, abs, max at a tie) is skipped.
struct FdOptions {
  int maxPerInput = 24;
  double h = 1e-6;
  double rtol = 1e-5;
};

template <class LossFn>
Check checkAgainstFiniteDifferences(const std::vector<Tensor> &leaves, LossFn loss,
                                    const std::string &what, FdOptions o = {}) {
  Check check;
  std::vector<Tensor> wrt;
  for (const Tensor &t : leaves) {
    if (t.requires_grad()) wrt.push_back(t);
  }
  if (wrt.empty()) return check;
  Tensor l = loss(leaves);
  if (!l.defined() || !l.requires_grad()) return check;
  const std::vector<Tensor> grads = rcjit::grad({l}, wrt);
  const double base = l.item();
  NoGradGuard noGrad;
  const double h = o.h;
  std::mt19937_64 rng(seedOf(what));
  for (size_t k = 0; k < wrt.size(); ++k) {
    const Tensor &x = wrt[k];
    std::vector<double> analytic =
        grads[k].defined() ? grads[k].to_vector<double>() : std::vector<double>(x.numel(), 0.0);
    if (static_cast<int64_t>(analytic.size()) != x.numel()) {
      ADD_FAILURE() << what << ": gradient " << analytic.size() << " elements for " << x.numel();
      return check;
    }
    std::vector<int64_t> idx;
    for (int64_t i = 0; i < x.numel(); ++i) idx.push_back(i);
    std::shuffle(idx.begin(), idx.end(), rng);
    if (static_cast<int64_t>(idx.size()) > o.maxPerInput) idx.resize(o.maxPerInput);
    double *p = x.data<double>();
    for (int64_t i : idx) {
      const double orig = p[i];
      p[i] = orig + h;
      const double up = loss(leaves).item();
      p[i] = orig - h;
      const double down = loss(leaves).item();
      p[i] = orig;
      const double central = (up - down) / (2 * h);
      const double right = (up - base) / h, left = (base - down) / h;
      if (!std::isfinite(central)) continue;
      if (std::abs(right - left) > 1e-3 * (1 + std::abs(central))) {
        ++check.skippedKinks;
        continue;
      }
      ++check.compared;
      EXPECT_NEAR(analytic[static_cast<size_t>(i)], central, o.rtol * (1 + std::abs(central)))
          << what << ": input " << k << " " << shapeStr(x.shape()) << ", flat element " << i;
    }
  }
  return check;
}

std::vector<size_t> floatingCases() {
  std::vector<size_t> out;
  for (size_t i = 0; i < cases().size(); ++i) {
    for (DType d : cases()[i].dtypes) {
      if (isFloating(d)) {
        out.push_back(i);
        break;
      }
    }
  }
  return out;
}

// The f64 inputs of case `c` and its forward on them.
std::vector<GradInput> inputsOf(const OpCase &c) {
  std::vector<GradInput> in;
  for (size_t i = 0; i < c.ins.size(); ++i) {
    in.push_back(makeGradInput(c.ins[i], seedOf(c.name) + 7 * i));
  }
  return in;
}

std::vector<Tensor> forward(const OpCase &c, const std::vector<GradInput> &in,
                            const std::vector<Tensor> &leaves) {
  std::vector<Tensor> views;
  for (size_t i = 0; i < in.size(); ++i) views.push_back(in[i].laidOut(leaves[i]));
  return c.fn(views);
}

bool usesOp(const std::vector<Tensor> &outs, GradKind kind) {
  for (const Tensor &o : outs) {
    for (OpKind op : autograd::graphOps(o)) {
      if (autograd::gradKind(op) == kind) return true;
    }
  }
  return false;
}

bool usesOp(const std::vector<Tensor> &outs, OpKind kind) {
  for (const Tensor &o : outs) {
    for (OpKind op : autograd::graphOps(o)) {
      if (op == kind) return true;
    }
  }
  return false;
}

class OpGradient : public ::testing::TestWithParam<size_t> {};

TEST_P(OpGradient, MatchesFiniteDifferences) {
  const OpCase &c = cases()[GetParam()];
  std::vector<GradInput> in = inputsOf(c);
  std::vector<Tensor> leaves;
  for (const GradInput &g : in) leaves.push_back(g.leaf);
  auto loss = [&](const std::vector<Tensor> &ls) {
    return weightedLoss(forward(c, in, ls), seedOf(c.name));
  };
  if (usesOp(forward(c, in, leaves), GradKind::notImplemented)) {
    try {
      Tensor l = loss(leaves);
      rcjit::grad({l}, {leaves[0]});
      ADD_FAILURE() << c.name << ": expected an Error from an op without a gradient";
    } catch (const Error &e) {
      EXPECT_NE(std::string(e.what()).find("gradient not implemented yet"), std::string::npos)
          << e.what();
    }
    return;
  }
  FdOptions o;
  if (usesOp(forward(c, in, leaves), OpKind::conv2d)) {
    // conv2d computes f64 through f32 (oneDNN): differences of a wider step (exact for the
    // conv, which is linear) keep its rounding small against the step
    o.h = 1e-2;
    o.rtol = 1e-3;
  }
  Check r = checkAgainstFiniteDifferences(leaves, loss, c.name, o);
  RecordProperty("compared", r.compared);
  RecordProperty("skipped_kinks", r.skippedKinks);
}

// The floating leaves as f32 leaves that require grad (the same values); others as they are.
std::vector<Tensor> f32Leaves(const std::vector<Tensor> &leaves) {
  std::vector<Tensor> out;
  for (const Tensor &l : leaves) {
    if (!isFloating(l.dtype())) {
      out.push_back(l);
      continue;
    }
    Tensor t = l.detach().to(DType::f32);
    t.requires_grad_();
    out.push_back(t);
  }
  return out;
}

// Gradients of `loss` at `leaves` through rcjit::compile (a training entry: forward and
// backward programs) equal eager autograd's: allclose rtol 1e-4, atol 1e-5 in f32.
using LossFn = std::function<Tensor(const std::vector<Tensor> &)>;

void expectCompiledGradientsEqualEager(const std::string &what, const LossFn &lossFn,
                                       const std::vector<Tensor> &leaves) {
  std::vector<Tensor> wrt;
  for (const Tensor &l : leaves) {
    if (l.requires_grad()) wrt.push_back(l);
  }
  Tensor eagerLoss = lossFn(leaves);
  if (!eagerLoss.defined()) GTEST_SKIP() << what << ": no floating output to differentiate";
  std::vector<Tensor> eager = rcjit::grad({eagerLoss}, wrt);
  auto compiled = compile([&](const std::vector<Tensor> &ls) { return lossFn(ls); });
  std::vector<Tensor> got = rcjit::grad({compiled(leaves)}, wrt);
  EXPECT_GT(compiled.stats().compiles, 0) << what;
  ASSERT_EQ(got.size(), eager.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    // an input the loss does not use: eager autograd leaves its gradient undefined, the
    // compiled backward may return zeros
    Tensor zeros = Tensor::zeros(wrt[i].shape(), wrt[i].dtype());
    const Tensor &g = got[i].defined() ? got[i] : zeros;
    const Tensor &e = eager[i].defined() ? eager[i] : zeros;
    EXPECT_TRUE(allclose(g, e, 1e-4, 1e-5))
        << what << ": gradient of input " << i << " " << shapeStr(wrt[i].shape()) << " compiled "
        << (got[i].defined() ? "defined" : "undefined") << ", eager "
        << (eager[i].defined() ? "defined" : "undefined") << ", compiled sum " << sum(g).item()
        << ", eager sum " << sum(e).item();
  }
}

TEST_P(OpGradient, CompiledEqualsEagerInF32) {
  const OpCase &c = cases()[GetParam()];
  std::vector<GradInput> in = inputsOf(c);
  std::vector<Tensor> leaves64;
  for (const GradInput &g : in) leaves64.push_back(g.leaf);
  if (usesOp(forward(c, in, leaves64), GradKind::notImplemented)) {
    GTEST_SKIP() << c.name << " has no gradient (checked by MatchesFiniteDifferences)";
  }
  std::vector<Tensor> leaves = f32Leaves(leaves64);
  bool anyGrad = false;
  for (const Tensor &l : leaves) anyGrad = anyGrad || l.requires_grad();
  if (!anyGrad) GTEST_SKIP() << c.name << " has no floating input";
  expectCompiledGradientsEqualEager(
      c.name,
      [&](const std::vector<Tensor> &ls) {
        return weightedLoss(forward(c, in, ls), seedOf(c.name), DType::f32);
      },
      leaves);
}

std::string caseName(const ::testing::TestParamInfo<size_t> &info) {
  std::string n = cases()[info.param].name + "_" + std::to_string(info.param);
  for (char &ch : n) {
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  }
  return n;
}

INSTANTIATE_TEST_SUITE_P(OpCases, OpGradient, ::testing::ValuesIn(floatingCases()), caseName);

TEST(GradRules, EveryOpIsClassifiedAndEveryDifferentiableOpHasAGradientCase) {
  std::set<OpKind> covered;
  for (size_t i : floatingCases()) {
    const OpCase &c = cases()[i];
    std::vector<GradInput> in = inputsOf(c);
    std::vector<Tensor> leaves;
    for (const GradInput &g : in) leaves.push_back(g.leaf);
    for (const Tensor &o : forward(c, in, leaves)) {
      if (o.defined() && o.dtype() == DType::f64) {
        for (OpKind op : autograd::graphOps(o)) covered.insert(op);
      }
    }
  }
  covered.insert(
      OpKind::cast); // f64 cases cast to lower precision only: Autograd.CastGradientIsCastBack
  // the collectives need an MPI job: tests/mpi/compiled_collectives_test.cpp checks each rule
  // (CompiledCollectives.GradientRulesMatchTheReference) on 1, 2 and 4 ranks
  for (OpKind op : opsOfCategory(OpCategory::Collective)) covered.insert(op);
  // f32 only (the fused LM head): FusedLinearCe.* compares its gradients with the unfused
  // cross_entropy(linear(...))'s, and OpGradient's linear_cross_entropy case with eager's
  covered.insert(OpKind::linear_ce_pick);
  for (int k = 0; k < kNumOps; ++k) {
    const OpKind op = static_cast<OpKind>(k);
    const GradKind g = autograd::gradKind(op);
    if (g == GradKind::differentiable) {
      EXPECT_TRUE(covered.count(op)) << opName(op)
                                     << " has a gradient rule but no case of tests/conformance/"
                                        "OpCases.h differentiates it in f64";
    }
    const OpCategory cat = opInfo(op).category;
    if (cat == OpCategory::Source || cat == OpCategory::Compare) {
      EXPECT_EQ(g, GradKind::none) << opName(op);
    }
  }
  EXPECT_EQ(autograd::gradKind(OpKind::argmax), GradKind::none);
}

TEST(GradRules, SumToShapeUndoesBroadcasting) {
  Tensor g = Tensor::ones({2, 3, 4});
  EXPECT_TRUE(allclose(autograd::sumToShape(g, {3, 1}), Tensor::full({3, 1}, 8.0)));
  EXPECT_TRUE(allclose(autograd::sumToShape(g, {}), Tensor::full({}, 24.0)));
  EXPECT_EQ(autograd::sumToShape(g, {2, 3, 4}).impl(), g.impl());
}

TEST(GradRules, MaximumSplitsTiesEvenly) {
  Tensor a = Tensor::from_vector(std::vector<float>{1.0f, 2.0f, 3.0f}, {3}).requires_grad_();
  Tensor b = Tensor::from_vector(std::vector<float>{1.0f, 5.0f, 0.0f}, {3}).requires_grad_();
  std::vector<Tensor> g = rcjit::grad({sum(maximum(a, b))}, {a, b});
  EXPECT_TRUE(allclose(g[0], Tensor::from_vector(std::vector<float>{0.5f, 0.0f, 1.0f}, {3})));
  EXPECT_TRUE(allclose(g[1], Tensor::from_vector(std::vector<float>{0.5f, 1.0f, 0.0f}, {3})));
}

class DagGradient : public ::testing::TestWithParam<uint64_t> {};

TEST_P(DagGradient, MatchesFiniteDifferences) {
  const uint64_t seed = GetParam();
  const Dag d = generate(seed);
  std::vector<Tensor> leaves = makeInputs(d, DType::f64, 5);
  for (Tensor &t : leaves) t.requires_grad_();
  auto loss = [&](const std::vector<Tensor> &ls) { return weightedLoss(run(d, ls), seed); };
  const bool failedBefore = HasFailure();
  checkAgainstFiniteDifferences(leaves, loss, "DAG seed " + std::to_string(seed),
                                {.maxPerInput = 32});
  if (HasFailure() && !failedBefore) ADD_FAILURE() << d.str();
}

TEST_P(DagGradient, CompiledEqualsEagerInF32) {
  const uint64_t seed = GetParam();
  const Dag d = generate(seed);
  std::vector<Tensor> leaves = makeInputs(d, DType::f32, 5);
  for (Tensor &t : leaves) t.requires_grad_();
  expectCompiledGradientsEqualEager(
      "DAG seed " + std::to_string(seed) + "\n" + d.str(),
      [&](const std::vector<Tensor> &ls) { return weightedLoss(run(d, ls), seed, DType::f32); },
      leaves);
}

INSTANTIATE_TEST_SUITE_P(RandomDag, DagGradient, ::testing::Range<uint64_t>(1, 41));

} // namespace

namespace {

// The rules are written with public ops, so under the tracer they record IR: compiled, a
// function that runs a rule must give what the rule gives eagerly (the basis of the compiled
// backward).
TEST(GradRules, RunUnderTheTracerAndCompile) {
  struct RuleCase {
    const char *name;
    OpKind op;
    std::vector<In> ins; // inputs, then the output gradient last
    std::function<Tensor(const std::vector<Tensor> &, Attrs &)> forward;
  };
  const std::vector<RuleCase> rules = {
      {"mul_bcast",
       OpKind::mul,
       {{{3, 1}}, {{4}}, {{3, 4}}},
       [](const std::vector<Tensor> &v, Attrs &) { return v[0] * v[1]; }},
      {"softmax",
       OpKind::softmax,
       {{{3, 5}}, {{3, 5}}},
       [](const std::vector<Tensor> &v, Attrs &a) {
         a.dim = 1;
         return softmax(v[0], 1);
       }},
      {"layer_norm",
       OpKind::layer_norm,
       {{{2, 8}}, {{8}}, {{8}}, {{2, 8}}},
       [](const std::vector<Tensor> &v, Attrs &a) {
         a.eps = 1e-5;
         return layer_norm(v[0], v[1], v[2], 1e-5);
       }},
      {"matmul_3d_2d",
       OpKind::matmul,
       {{{2, 3, 4}}, {{4, 5}}, {{2, 3, 5}}},
       [](const std::vector<Tensor> &v, Attrs &) { return matmul(v[0], v[1]); }},
      {"sdpa_causal",
       OpKind::sdpa,
       {{{2, 4, 8}}, {{2, 4, 8}}, {{2, 4, 8}}, {{2, 4, 8}}},
       [](const std::vector<Tensor> &v, Attrs &a) {
         a.causal = true;
         return scaled_dot_product_attention(v[0], v[1], v[2], true);
       }},
  };
  for (const RuleCase &rc : rules) {
    const size_t n = rc.ins.size() - 1;
    Fn fn = [&rc, n](const std::vector<Tensor> &v) {
      std::vector<Tensor> in(v.begin(), v.begin() + static_cast<int64_t>(n));
      Attrs a;
      Tensor out = rc.forward(in, a);
      return autograd::applyGradRule(rc.op, a, in, out, v[n], std::vector<bool>(n, true));
    };
    std::vector<Tensor> x, y;
    for (size_t i = 0; i < rc.ins.size(); ++i) {
      x.push_back(makeInput(rc.ins[i], DType::f32, 11 + i));
      y.push_back(makeInput(rc.ins[i], DType::f32, 23 + i));
    }
    checkCompiledMatchesEager(std::string("gradient rule of ") + rc.name, fn, x, y, 4);
  }
}

} // namespace
