// Graph passes, the pipeline and the interpreter: structure of each rewrite, and values
// (interpretGraph before vs after) on random inputs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include <rcjit/rcjit.h>

#include "jit/Interpreter.h"
#include "jit/Pipeline.h"
#include "jit/passes/ConstantFold.h"
#include "jit/passes/Cse.h"
#include "jit/passes/Dce.h"
#include "jit/passes/Decompose.h"
#include "jit/passes/EmbeddingGradSum.h"
#include "jit/passes/LinearCeFold.h"
#include "jit/passes/Remat.h"
#include "targets/Lower.h"
#include "targets/Target.h"
#include "targets/cpu/CpuProgram.h"
#include "tracer/GraphIO.h"
#include "tracer/OpsInternal.h"
#include "tracer/ShapeInference.h"
#include "tracer/Tracer.h"

using namespace rcjit;

namespace {

using Fn = std::function<std::vector<Tensor>(const std::vector<Tensor> &)>;

struct Traced {
  Graph graph;
  std::vector<Tensor> inputs; // args then captured
};

Traced trace(const Fn &fn, const std::vector<Tensor> &args) {
  Trace t = traceFunction(fn, args);
  std::vector<Tensor> in = t.args;
  in.insert(in.end(), t.captured.begin(), t.captured.end());
  return {t.graph, in};
}

/// Tolerances for comparing a rewritten graph with the original.
struct Tol {
  double rtol = 1e-4, atol = 1e-5;
};
Tol tolFor(DType t) {
  if (t == DType::f16) return {2e-3, 2e-3};      // one f16 ulp is 2^-11 relative
  if (t == DType::bf16) return {1.6e-2, 1.6e-2}; // one bf16 ulp is 2^-8 relative
  return {};
}

void expectSameValues(const Graph &before, const Graph &after, const std::vector<Tensor> &in,
                      Tol tol = {}) {
  std::vector<Tensor> a = interpretGraph(before, in), b = interpretGraph(after, in);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].dtype(), b[i].dtype()) << "output " << i;
    EXPECT_EQ(a[i].shape(), b[i].shape()) << "output " << i;
    Tensor x = a[i].to(DType::f64), y = b[i].to(DType::f64);
    EXPECT_TRUE(allclose(y, x, tol.rtol, tol.atol)) << "output " << i << "\n" << printGraph(after);
  }
}

/// Every non-source node's dtype and shape agree with inferMeta over its operands.
void expectConsistentMetas(const Graph &g) {
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node &n = g.nodes[i];
    if (opInfo(n.op).category == OpCategory::Source) continue;
    std::vector<TensorMeta> in;
    for (int j : n.inputs) {
      ASSERT_LT(j, static_cast<int>(i));
      in.push_back({g.nodes[j].dtype, concreteShape(g.nodes[j].shape)});
    }
    TensorMeta m = inferMeta(n.op, in, n.attrs);
    if (n.op != OpKind::cast) {
      EXPECT_EQ(m.dtype, n.dtype) << "node " << i;
    }
    EXPECT_EQ(m.shape, concreteShape(n.shape)) << "node " << i;
  }
}

int count(const Graph &g, OpKind op) {
  return static_cast<int>(
      std::count_if(g.nodes.begin(), g.nodes.end(), [&](const Node &n) { return n.op == op; }));
}

/// The ops of the non-input nodes, in order.
std::vector<OpKind> opsOf(const Graph &g) {
  std::vector<OpKind> ops;
  for (const Node &n : g.nodes) {
    if (n.op != OpKind::input) ops.push_back(n.op);
  }
  return ops;
}

/// Small linear/matmul decomposition on, whatever the default threshold is.
DecomposeOptions smallMatmuls() {
  DecomposeOptions o;
  o.smallMatmulMax = 64;
  return o;
}

/// The default passes with small linear/matmul decomposition on.
std::vector<Pass> passes() {
  PipelineOptions o;
  o.decomposeOptions = smallMatmuls();
  return defaultPasses(o);
}

/// Decomposes, checks metas and the text round trip, and compares values.
Graph checkDecompose(const Traced &t, Tol tol = {}, const DecomposeOptions &o = smallMatmuls()) {
  Graph d = decompose(t.graph, o);
  expectConsistentMetas(d);
  EXPECT_EQ(parseGraph(printGraph(d)), d);
  expectSameValues(t.graph, d, t.inputs, tol);
  return d;
}

Node inputNode(DType t, const Shape &s, int index) {
  Node n;
  n.dtype = t;
  n.shape = staticShape(s);
  n.inputIndex = index;
  return n;
}

Node fullNode(double v, DType t = DType::f32) {
  Node n;
  n.op = OpKind::full;
  n.dtype = t;
  n.attrs.value = v;
  return n;
}

Node opNode(OpKind op, std::vector<int> in, DType t, const Shape &s) {
  Node n;
  n.op = op;
  n.inputs = std::move(in);
  n.dtype = t;
  n.shape = staticShape(s);
  return n;
}

std::vector<Tensor> one(Tensor t) { return {std::move(t)}; }

// ---- interpreter ----------------------------------------------------------------------

TEST(Interpreter, MatchesTheTracedValues) {
  Tensor w = Tensor::randn({6, 4}, 1), b = Tensor::randn({6}, 2);
  Tensor x = Tensor::randn({3, 4}, 3);
  Trace t = traceFunction(
      [&](const std::vector<Tensor> &a) {
        Tensor h = relu(linear(a[0], w, b));
        return std::vector<Tensor>{softmax(h, 1), h * 2.0};
      },
      {x});
  std::vector<Tensor> in = t.args;
  in.insert(in.end(), t.captured.begin(), t.captured.end());
  std::vector<Tensor> out = interpretGraph(t.graph, in);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_TRUE(allclose(out[0], t.outputs[0]));
  EXPECT_TRUE(allclose(out[1], t.outputs[1]));
}

TEST(Interpreter, BindsArgsThenCaptured) {
  Graph g;
  Node cap = inputNode(DType::f32, {2}, 0);
  cap.inputKind = InputKind::captured;
  int c = g.add(cap);
  int a = g.add(inputNode(DType::f32, {2}, 0));
  g.outputs = {g.add(opNode(OpKind::sub, {a, c}, DType::f32, {2}))};
  Tensor arg = Tensor::from_vector(std::vector<float>{5, 7}, {2});
  Tensor captured = Tensor::from_vector(std::vector<float>{1, 2}, {2});
  std::vector<Tensor> out = interpretGraph(g, {arg, captured});
  EXPECT_EQ(out[0].to_vector<float>(), (std::vector<float>{4, 5}));
}

TEST(Interpreter, RejectsMismatchedInputs) {
  Graph g;
  int x = g.add(inputNode(DType::f32, {2, 3}, 0));
  g.outputs = {g.add(opNode(OpKind::exp, {x}, DType::f32, {2, 3}))};
  try {
    interpretGraph(g, {});
    FAIL() << "expected an Error";
  } catch (const Error &e) {
    EXPECT_NE(std::string(e.what()).find("1 inputs), got 0"), std::string::npos) << e.what();
  }
  try {
    interpretGraph(g, {Tensor::zeros({2, 4})});
    FAIL() << "expected an Error";
  } catch (const Error &e) {
    EXPECT_NE(std::string(e.what()).find("arg 0 expects f32[2, 3]"), std::string::npos) << e.what();
  }
}

TEST(Interpreter, SymbolicDimsTakeTheInputsSizes) {
  Graph g;
  g.symbols.push_back(Symbol{});
  Node in = inputNode(DType::f32, {4}, 0);
  in.shape[0].sym = 0;
  int x = g.add(in);
  Node y = opNode(OpKind::exp, {x}, DType::f32, {4});
  y.shape = in.shape;
  g.outputs = {g.add(y)};
  std::vector<Tensor> out = interpretGraph(g, {Tensor::zeros({7})});
  EXPECT_EQ(out[0].shape(), (Shape{7}));
}

// ---- decompose --------------------------------------------------------------------------

TEST(PassesDecompose, SoftmaxBecomesKeepdimReductions) {
  Traced t = trace([](const std::vector<Tensor> &a) { return one(softmax(a[0], 1)); },
                   {Tensor::randn({4, 9, 3}, 1)});
  Graph d = checkDecompose(t);
  EXPECT_EQ(opsOf(d), (std::vector<OpKind>{OpKind::amax, OpKind::sub, OpKind::exp, OpKind::sum,
                                           OpKind::div}));
  for (const Node &n : d.nodes) {
    if (opInfo(n.op).category != OpCategory::Reduce) continue;
    EXPECT_TRUE(n.attrs.keepdim);
    EXPECT_EQ(n.attrs.dims, (Dims{1}));
  }
}

TEST(PassesDecompose, LogSoftmax) {
  Traced t = trace([](const std::vector<Tensor> &a) { return one(log_softmax(a[0], 0)); },
                   {Tensor::randn({17, 5}, 2)});
  Graph d = checkDecompose(t);
  EXPECT_EQ(opsOf(d), (std::vector<OpKind>{OpKind::amax, OpKind::sub, OpKind::exp, OpKind::sum,
                                           OpKind::log, OpKind::sub}));
}

TEST(PassesDecompose, HalfSoftmaxComputesInF32) {
  for (DType t : {DType::f16, DType::bf16}) {
    Traced tr = trace([](const std::vector<Tensor> &a) { return one(softmax(a[0], 1)); },
                      {Tensor::randn({6, 33}, 3, t)});
    Graph d = checkDecompose(tr, tolFor(t));
    std::vector<OpKind> ops = opsOf(d);
    EXPECT_EQ(ops.front(), OpKind::cast);
    EXPECT_EQ(ops.back(), OpKind::cast);
    EXPECT_EQ(d.nodes[d.outputs[0]].dtype, t);
    EXPECT_EQ(d.nodes[d.nodes.size() - 2].dtype, DType::f32);
  }
}

Traced layerNormTrace(DType t, bool bias, Shape wShape) {
  Tensor w = Tensor::randn(wShape, 5, t), b = Tensor::randn(wShape, 6, t);
  Shape xs = {3, 4};
  xs.insert(xs.end(), wShape.begin(), wShape.end());
  return trace(
      [=](const std::vector<Tensor> &a) {
        return one(layer_norm(a[0], w, bias ? b : Tensor(), 1e-5));
      },
      {Tensor::randn(xs, 4, t)});
}

TEST(PassesDecompose, LayerNormWithAndWithoutBias) {
  for (bool bias : {true, false}) {
    Graph d = checkDecompose(layerNormTrace(DType::f32, bias, {16}));
    EXPECT_EQ(count(d, OpKind::layer_norm), 0);
    EXPECT_EQ(count(d, OpKind::mean), 2);
    EXPECT_EQ(count(d, OpKind::rsqrt), 1);
    EXPECT_EQ(count(d, OpKind::add), bias ? 2 : 1); // eps (+ bias)
    for (const Node &n : d.nodes) {
      if (n.op == OpKind::mean) {
        EXPECT_TRUE(n.attrs.keepdim);
      }
    }
  }
}

TEST(PassesDecompose, LayerNormOverSeveralTrailingDims) {
  Graph d = checkDecompose(layerNormTrace(DType::f32, true, {5, 6}));
  for (const Node &n : d.nodes) {
    if (n.op == OpKind::mean) {
      EXPECT_EQ(n.attrs.dims, (Dims{2, 3}));
    }
  }
}

TEST(PassesDecompose, HalfLayerNorm) {
  for (DType t : {DType::f16, DType::bf16}) {
    Graph d = checkDecompose(layerNormTrace(t, true, {32}), tolFor(t));
    for (const Node &n : d.nodes) {
      if (n.op == OpKind::mean) {
        EXPECT_EQ(n.dtype, DType::f32);
      }
    }
  }
}

TEST(PassesDecompose, RmsNorm) {
  for (DType t : {DType::f32, DType::f16, DType::bf16}) {
    Tensor w = Tensor::randn({24}, 7, t);
    Traced tr = trace([=](const std::vector<Tensor> &a) { return one(rms_norm(a[0], w, 1e-6)); },
                      {Tensor::randn({2, 5, 24}, 8, t)});
    Graph d = checkDecompose(tr, tolFor(t));
    EXPECT_EQ(count(d, OpKind::rms_norm), 0);
    EXPECT_EQ(count(d, OpKind::mean), 1);
    EXPECT_EQ(count(d, OpKind::sub), 0);
  }
}

Traced sdpaTrace(bool causal, int64_t lq, int64_t lk, DType t = DType::f32) {
  return trace(
      [=](const std::vector<Tensor> &a) {
        return one(scaled_dot_product_attention(a[0], a[1], a[2], causal));
      },
      {Tensor::randn({2, 3, lq, 8}, 9, t), Tensor::randn({2, 3, lk, 8}, 10, t),
       Tensor::randn({2, 3, lk, 5}, 11, t)});
}

TEST(PassesDecompose, SdpaNonCausal) {
  Graph d = checkDecompose(sdpaTrace(false, 6, 10), {}, DecomposeOptions{});
  EXPECT_EQ(count(d, OpKind::sdpa), 0);
  EXPECT_EQ(count(d, OpKind::matmul), 2);
  EXPECT_EQ(count(d, OpKind::permute), 1);
  EXPECT_EQ(count(d, OpKind::where), 0);
  EXPECT_EQ(count(d, OpKind::arange), 0);
  // small products: spelled as product and sum in the same pass, so that a second pass
  // finds nothing to do (PassesPipeline.AttentionBlockHasNoCompositesAndSameValues)
  Graph small = checkDecompose(sdpaTrace(false, 6, 10));
  EXPECT_EQ(count(small, OpKind::matmul), 0);
  EXPECT_EQ(count(small, OpKind::sum), 3); // the softmax's and the two products'
}

TEST(PassesDecompose, SdpaCausal) {
  for (auto [lq, lk] : {std::pair<int64_t, int64_t>{7, 7}, {5, 9}, {9, 5}}) {
    Graph d = checkDecompose(sdpaTrace(true, lq, lk));
    EXPECT_EQ(count(d, OpKind::arange), 2);
    EXPECT_EQ(count(d, OpKind::gt), 1);
    EXPECT_EQ(count(d, OpKind::where), 1);
    bool hasNegInf = false;
    for (const Node &n : d.nodes) {
      hasNegInf |= n.op == OpKind::full && std::isinf(n.attrs.value) && n.attrs.value < 0;
    }
    EXPECT_TRUE(hasNegInf);
  }
}

TEST(PassesDecompose, HalfSdpa) {
  for (DType t : {DType::f16, DType::bf16}) {
    for (bool causal : {false, true}) checkDecompose(sdpaTrace(causal, 6, 6, t), tolFor(t));
  }
}

TEST(PassesDecompose, PowByASmallConstantBecomesProducts) {
  // GELU's tanh form as exporters write it: x ** 3 over values of both signs
  for (double c : {2.0, 3.0, 4.0}) {
    Traced t = trace([c](const std::vector<Tensor> &a) { return one(pow(a[0], Scalar(c))); },
                     {Tensor::randn({5, 7}, 21)});
    Graph d = checkDecompose(t, Tol{1e-6, 1e-6});
    EXPECT_EQ(count(d, OpKind::pow), 0) << "exponent " << c;
    EXPECT_EQ(count(d, OpKind::mul), c == 3.0 ? 2 : c == 4.0 ? 2 : 1) << "exponent " << c;
  }
  Traced root = trace([](const std::vector<Tensor> &a) { return one(pow(a[0], Scalar(0.5))); },
                      {abs(Tensor::randn({5, 7}, 22))});
  Graph d = checkDecompose(root, Tol{1e-6, 1e-6});
  EXPECT_EQ(opsOf(d), (std::vector<OpKind>{OpKind::full, OpKind::sqrt}));
  for (DType h : {DType::f16, DType::bf16}) { // computed in f32, as the kernels do
    Traced t = trace([](const std::vector<Tensor> &a) { return one(pow(a[0], Scalar(3.0))); },
                     {Tensor::randn({4, 6}, 23, h)});
    Graph hd = checkDecompose(t, tolFor(h));
    EXPECT_EQ(count(hd, OpKind::pow), 0);
    EXPECT_EQ(hd.nodes[hd.outputs[0]].dtype, h);
  }
}

TEST(PassesDecompose, OtherPowsStay) {
  // another constant, or an exponent that is an input
  Traced frac = trace([](const std::vector<Tensor> &a) { return one(pow(a[0], Scalar(2.5))); },
                      {abs(Tensor::randn({3, 4}, 24))});
  EXPECT_EQ(count(checkDecompose(frac), OpKind::pow), 1);
  Traced tensor = trace([](const std::vector<Tensor> &a) { return one(pow(a[0], a[1])); },
                        {abs(Tensor::randn({3, 4}, 25)), Tensor::full({}, 3.0, DType::f32)});
  EXPECT_EQ(count(checkDecompose(tensor), OpKind::pow), 1);
}

Traced linearTrace(int64_t k, int64_t n, bool bias, DType t = DType::f32) {
  Tensor w = Tensor::randn({n, k}, 12, t), b = Tensor::randn({n}, 13, t);
  return trace(
      [=](const std::vector<Tensor> &a) { return one(relu(linear(a[0], w, bias ? b : Tensor()))); },
      {Tensor::randn({2, 3, k}, 14, t)});
}

TEST(PassesDecompose, SmallLinearBecomesMulAndSum) {
  for (bool bias : {true, false}) {
    Graph d = checkDecompose(linearTrace(16, 32, bias));
    EXPECT_EQ(count(d, OpKind::linear), 0);
    EXPECT_EQ(count(d, OpKind::mul), 1);
    EXPECT_EQ(count(d, OpKind::add), bias ? 1 : 0);
    for (const Node &n : d.nodes) {
      if (n.op == OpKind::reshape) {
        EXPECT_EQ(concreteShape(n.shape), (Shape{2, 3, 1, 16}));
      }
      if (n.op != OpKind::sum) continue;
      EXPECT_EQ(n.attrs.dims, (Dims{3}));
      EXPECT_FALSE(n.attrs.keepdim);
    }
  }
}

TEST(PassesDecompose, HalfSmallLinear) {
  for (DType t : {DType::f16, DType::bf16}) checkDecompose(linearTrace(64, 64, true, t), tolFor(t));
}

TEST(PassesDecompose, LargeLinearStaysALibraryCall) {
  for (auto [k, n] : {std::pair<int64_t, int64_t>{65, 8}, {8, 65}}) {
    for (bool bias : {true, false}) {
      Traced t = linearTrace(k, n, bias);
      EXPECT_EQ(printGraph(decompose(t.graph, smallMatmuls())), printGraph(t.graph));
    }
  }
}

TEST(PassesDecompose, ThresholdIsAnOption) {
  Traced t = linearTrace(16, 16, true);
  DecomposeOptions off;
  off.smallMatmulMax = 0;
  EXPECT_EQ(printGraph(decompose(t.graph, off)), printGraph(t.graph));
  DecomposeOptions big;
  big.smallMatmulMax = 100;
  EXPECT_EQ(count(checkDecompose(linearTrace(80, 80, true), {}, big), OpKind::linear), 0);
}

TEST(PassesDecompose, SmallMatmul) {
  Traced t = trace([](const std::vector<Tensor> &a) { return one(matmul(a[0], a[1])); },
                   {Tensor::randn({50, 16}, 15), Tensor::randn({16, 24}, 16)});
  Graph d = checkDecompose(t);
  EXPECT_EQ(count(d, OpKind::matmul), 0);
  EXPECT_EQ(count(d, OpKind::permute), 1);
  Traced big = trace([](const std::vector<Tensor> &a) { return one(matmul(a[0], a[1])); },
                     {Tensor::randn({4, 100}, 15), Tensor::randn({100, 24}, 16)});
  EXPECT_EQ(printGraph(decompose(big.graph, smallMatmuls())), printGraph(big.graph));
  // batched, and with a batch that broadcasts: the same product and sum, per batch
  Traced batched = trace([](const std::vector<Tensor> &a) { return one(matmul(a[0], a[1])); },
                         {Tensor::randn({2, 4, 8}, 15), Tensor::randn({2, 8, 8}, 16)});
  EXPECT_EQ(count(checkDecompose(batched), OpKind::matmul), 0);
  Traced broadcast = trace([](const std::vector<Tensor> &a) { return one(matmul(a[0], a[1])); },
                           {Tensor::randn({3, 4, 8}, 17), Tensor::randn({8, 5}, 18)});
  EXPECT_EQ(count(checkDecompose(broadcast), OpKind::matmul), 0);
  // a vector operand stays a library call
  Traced vec = trace([](const std::vector<Tensor> &a) { return one(matmul(a[0], a[1])); },
                     {Tensor::randn({8}, 19), Tensor::randn({8, 5}, 20)});
  EXPECT_EQ(printGraph(decompose(vec.graph, smallMatmuls())), printGraph(vec.graph));
}

TEST(PassesDecompose, MacThresholdCountsTheWholeProduct) {
  DecomposeOptions o;
  o.smallMatmulMacs = 6 * 16 * 16; // [2, 3, 16] x [16, 16]^T exactly
  EXPECT_EQ(count(checkDecompose(linearTrace(16, 16, true), {}, o), OpKind::linear), 0);
  o.smallMatmulMacs -= 1;
  Traced t = linearTrace(16, 16, true);
  EXPECT_EQ(printGraph(decompose(t.graph, o)), printGraph(t.graph));
}

TEST(PassesDecompose, GeluAndSiluStaySingleOps) {
  Traced t = trace([](const std::vector<Tensor> &a) { return one(gelu(a[0]) + silu(a[0])); },
                   {Tensor::randn({4, 4}, 17)});
  Graph d = decompose(t.graph);
  EXPECT_EQ(printGraph(d), printGraph(t.graph));
  EXPECT_EQ(d, t.graph);
}

TEST(PassesDecompose, SymbolicCompositesAreLeftAlone) {
  Graph g;
  g.symbols.push_back(Symbol{});
  Node in = inputNode(DType::f32, {4, 8}, 0);
  in.shape[0].sym = 0;
  int x = g.add(in);
  Node s = opNode(OpKind::softmax, {x}, DType::f32, {4, 8});
  s.shape = in.shape;
  s.attrs.dim = 1;
  g.outputs = {g.add(s)};
  EXPECT_EQ(decompose(g), g);
}

TEST(PassesDecompose, RegionsFollowTheRewrittenNodes) {
  struct Block : nn::Module<Block> {
    nn::LayerNorm norm{8};
    nn::Linear fc{8, 8};
    Block() {
      register_module("norm", norm);
      register_module("fc", fc);
    }
    Tensor forward(const Tensor &x) { return fc(norm(x)); }
  };
  Block blk;
  Traced t = trace([&](const std::vector<Tensor> &a) { return one(softmax(blk(a[0]), 1)); },
                   {Tensor::randn({3, 8}, 18)});
  ASSERT_FALSE(t.graph.regions.empty());
  Graph d = checkDecompose(t);
  ASSERT_EQ(d.regions.size(), t.graph.regions.size());
  for (size_t r = 0; r < d.regions.size(); ++r) {
    const Region &reg = d.regions[r];
    EXPECT_EQ(reg.name, t.graph.regions[r].name);
    for (int i = reg.begin; i < reg.end; ++i) {
      int inner = d.nodes[i].region;
      while (inner >= 0 && inner != static_cast<int>(r)) inner = d.regions[inner].parent;
      EXPECT_EQ(inner, static_cast<int>(r)) << "node " << i << " of region " << reg.name;
    }
  }
  // the softmax after the block is outside every region
  EXPECT_EQ(d.nodes[d.outputs[0]].region, -1);
}

TEST(PassesDecompose, ReturnsItsInputWhenNothingToDo) {
  Traced t = trace([](const std::vector<Tensor> &a) { return one(relu(a[0]) + 1.0); },
                   {Tensor::randn({4}, 19)});
  EXPECT_EQ(decompose(t.graph), t.graph);
}

// ---- constant folding -------------------------------------------------------------------

TEST(PassesConstantFold, FoldsScalarChains) {
  Graph g;
  int x = g.add(inputNode(DType::f32, {4}, 0));
  int c16 = g.add(fullNode(16));
  int unit = g.add(fullNode(1));
  int r = g.add(opNode(OpKind::sqrt, {c16}, DType::f32, {}));
  int q = g.add(opNode(OpKind::div, {unit, r}, DType::f32, {}));
  g.outputs = {g.add(opNode(OpKind::mul, {x, q}, DType::f32, {4}))};
  Graph f = constantFold(g);
  EXPECT_EQ(f.nodes[r].op, OpKind::full);
  EXPECT_EQ(f.nodes[r].attrs.value, 4.0);
  EXPECT_EQ(f.nodes[q].op, OpKind::full);
  EXPECT_EQ(f.nodes[q].attrs.value, 0.25);
  EXPECT_TRUE(f.nodes[q].inputs.empty());
  EXPECT_EQ(f.nodes[g.outputs[0]].op, OpKind::mul);
  expectSameValues(g, f, {Tensor::randn({4}, 20)});
  Graph clean = dce(f);
  EXPECT_EQ(opsOf(clean), (std::vector<OpKind>{OpKind::full, OpKind::mul}));
}

TEST(PassesConstantFold, RoundsLikeTheRuntime) {
  Graph g;
  int x = g.add(inputNode(DType::f16, {3}, 0));
  int c = g.add(fullNode(0.1));
  int h = g.add(opNode(OpKind::cast, {c}, DType::f16, {}));
  int big = g.add(fullNode(1e6, DType::f16));
  int cmp = g.add(opNode(OpKind::gt, {h, big}, DType::boolean, {}));
  int sel = g.add(opNode(OpKind::where, {cmp, big, h}, DType::f16, {}));
  g.outputs = {g.add(opNode(OpKind::add, {x, sel}, DType::f16, {3}))};
  Graph f = constantFold(g);
  EXPECT_EQ(f.nodes[h].op, OpKind::full);
  EXPECT_NE(f.nodes[h].attrs.value, 0.1); // the f16 value, not the f32 one
  EXPECT_NEAR(f.nodes[h].attrs.value, 0.1, 1e-4);
  EXPECT_EQ(f.nodes[cmp].op, OpKind::full);
  EXPECT_EQ(f.nodes[cmp].dtype, DType::boolean);
  EXPECT_EQ(f.nodes[cmp].attrs.value, 0.0);
  EXPECT_EQ(f.nodes[sel].attrs.value, f.nodes[h].attrs.value);
  Tensor in = Tensor::randn({3}, 21, DType::f16);
  std::vector<Tensor> a = interpretGraph(g, {in}), b = interpretGraph(f, {in});
  EXPECT_EQ(a[0].to_vector<float>(), b[0].to_vector<float>());
}

TEST(PassesConstantFold, LeavesNonConstantsAndReductions) {
  Traced t = trace([](const std::vector<Tensor> &a) { return one(a[0] * 2.0 + 1.0); },
                   {Tensor::randn({4}, 22)});
  EXPECT_EQ(constantFold(t.graph), t.graph);
  Graph g;
  int c = g.add(fullNode(3));
  g.outputs = {g.add(opNode(OpKind::sum, {c}, DType::f32, {}))};
  EXPECT_EQ(constantFold(g), g);
}

// ---- CSE --------------------------------------------------------------------------------

TEST(PassesCse, MergesDuplicatesTransitively) {
  Traced t = trace(
      [](const std::vector<Tensor> &a) {
        Tensor u = exp(a[0]) + 1.0, v = exp(a[0]) + 1.0;
        return std::vector<Tensor>{u * v, v};
      },
      {Tensor::randn({5}, 23)});
  Graph c = cse(t.graph);
  EXPECT_EQ(count(c, OpKind::exp), 1);
  EXPECT_EQ(count(c, OpKind::add), 1);
  EXPECT_EQ(count(c, OpKind::full), 1);
  EXPECT_EQ(c.nodes[c.outputs[1]].op, OpKind::add);
  expectSameValues(t.graph, c, t.inputs);
}

TEST(PassesCse, KeepsInputsAndDistinctAttrs) {
  Traced t = trace(
      [](const std::vector<Tensor> &a) {
        return std::vector<Tensor>{sum(a[0], {0}), sum(a[0], {1}), a[0] + a[1]};
      },
      {Tensor::randn({3, 3}, 24), Tensor::randn({3, 3}, 25)});
  EXPECT_EQ(cse(t.graph), t.graph);
}

TEST(PassesCse, DifferentDtypesOrShapesStayApart) {
  Graph g;
  g.add(fullNode(1.0));
  g.add(fullNode(1.0, DType::f16));
  Node shaped = fullNode(1.0);
  shaped.shape = staticShape({2});
  g.add(shaped);
  g.outputs = {0, 1, 2};
  EXPECT_EQ(cse(g), g);
  g.add(fullNode(1.0));
  g.outputs.push_back(3);
  Graph c = cse(g);
  EXPECT_EQ(c.nodes.size(), 3u);
  EXPECT_EQ(c.outputs, (std::vector<int>{0, 1, 2, 0}));
}

// ---- DCE --------------------------------------------------------------------------------

TEST(PassesDce, DropsDeadNodesButKeepsInputs) {
  Traced t = trace(
      [](const std::vector<Tensor> &a) {
        Tensor unused = exp(a[0]) * 3.0;
        (void)unused;
        return one(relu(a[0]));
      },
      {Tensor::randn({4}, 26), Tensor::randn({4}, 27)});
  Graph d = dce(t.graph);
  EXPECT_EQ(d.inputNodes().size(), 2u);
  EXPECT_EQ(opsOf(d), (std::vector<OpKind>{OpKind::relu}));
  expectSameValues(t.graph, d, t.inputs);
  EXPECT_EQ(dce(d), d);
}

// ---- pipeline ---------------------------------------------------------------------------

TEST(PassesPipeline, DefaultOrder) {
  std::vector<std::string> names;
  for (const Pass &p : defaultPasses()) names.push_back(p.name);
  EXPECT_EQ(names,
            (std::vector<std::string>{"decompose", "constant_fold", "cse", "embedding_grad_sum",
                                      "linear_ce_fold", "remat", "dce"}));
  PipelineOptions o;
  o.decompose = false;
  o.cse = false;
  o.remat = false;
  names.clear();
  for (const Pass &p : defaultPasses(o)) names.push_back(p.name);
  EXPECT_EQ(names, (std::vector<std::string>{"constant_fold", "embedding_grad_sum",
                                             "linear_ce_fold", "dce"}));
}

Traced attentionBlock(DType t = DType::f32) {
  auto weight = [t](uint64_t seed) { return Tensor::randn({16, 16}, seed, t) * 0.25; };
  Tensor wq = weight(30), wk = weight(31), wv = weight(32), wo = weight(33);
  Tensor ln = Tensor::randn({16}, 34, t), lb = Tensor::randn({16}, 35, t);
  return trace(
      [=](const std::vector<Tensor> &a) {
        Tensor h = layer_norm(a[0], ln, lb, 1e-5);
        auto heads = [](const Tensor &x) {
          return permute(reshape(x, {2, 6, 4, 4}), {0, 2, 1, 3});
        };
        Tensor q = heads(linear(h, wq)), k = heads(linear(h, wk)), v = heads(linear(h, wv));
        Tensor o = scaled_dot_product_attention(q, k, v, true);
        o = reshape(permute(o, {0, 2, 1, 3}), {2, 6, 16});
        Tensor y = a[0] + linear(o, wo);
        return std::vector<Tensor>{rms_norm(y, ln, 1e-6), softmax(y, 2), softmax(y, 2)};
      },
      {Tensor::randn({2, 6, 16}, 36, t)});
}

TEST(PassesPipeline, AttentionBlockHasNoCompositesAndSameValues) {
  Traced t = attentionBlock();
  Graph p = runPipeline(t.graph, passes());
  for (OpKind op :
       {OpKind::softmax, OpKind::layer_norm, OpKind::rms_norm, OpKind::sdpa, OpKind::linear}) {
    EXPECT_EQ(count(p, op), 0) << opName(op);
  }
  EXPECT_EQ(p.outputs[1], p.outputs[2]); // the two softmaxes merged
  expectConsistentMetas(p);
  EXPECT_EQ(parseGraph(printGraph(p)), p);
  expectSameValues(t.graph, p, t.inputs);
  for (const Node &n : p.nodes) { // every node is used
    if (n.op == OpKind::input) continue;
    int id = static_cast<int>(&n - p.nodes.data());
    bool used = std::find(p.outputs.begin(), p.outputs.end(), id) != p.outputs.end();
    for (const Node &m : p.nodes) used |= std::count(m.inputs.begin(), m.inputs.end(), id) > 0;
    EXPECT_TRUE(used) << "node " << id;
  }
  EXPECT_EQ(runPipeline(p, passes()), p); // a fixed point
}

TEST(PassesPipeline, HalfAttentionBlock) {
  for (DType t : {DType::f16, DType::bf16}) {
    Traced tr = attentionBlock(t);
    Tol tol = tolFor(t);
    tol.rtol *= 4; // several rounded intermediates (the matmul inputs) differ by an ulp
    tol.atol *= 4;
    expectSameValues(tr.graph, runPipeline(tr.graph, passes()), tr.inputs, tol);
  }
}

TEST(PassesPipeline, UserPassesRunInOrderAndErrorsNameThePass) {
  Traced t =
      trace([](const std::vector<Tensor> &a) { return one(relu(a[0])); }, {Tensor::randn({4}, 40)});
  std::vector<std::string> seen;
  std::vector<Pass> list = defaultPasses();
  list.insert(list.begin(), Pass{"mine", [&](const Graph &g) {
                                   seen.push_back("mine");
                                   Graph r = g;
                                   r.nodes[r.outputs[0]].op = OpKind::abs;
                                   return r;
                                 }});
  Graph p = runPipeline(t.graph, list);
  EXPECT_EQ(seen, (std::vector<std::string>{"mine"}));
  EXPECT_EQ(p.nodes[p.outputs[0]].op, OpKind::abs);
  list.push_back({"broken", [](const Graph &) -> Graph { throw Error("boom"); }});
  try {
    runPipeline(t.graph, list);
    FAIL() << "expected an Error";
  } catch (const Error &e) {
    EXPECT_EQ(std::string(e.what()), "pass broken: boom");
  }
}

// ---- the decomposed composites lower to one kernel each -----------------------------------

struct Lowered {
  int kernels = 0, library = 0, eager = 0;
};

Program lowerGraph(const Graph &g, const std::vector<Tensor> &inputs) {
  std::vector<Shape> strides;
  for (const Tensor &in : inputs) strides.push_back(in.strides());
  return lower(g, strides);
}

/// The optimized graph compiled for the CPU computes what the original graph does.
void expectCompiledMatches(const Traced &t, const std::string &label) {
  Program p = lowerGraph(runPipeline(t.graph, passes()), t.inputs);
  auto compiled = cpu::CpuProgram::create(std::move(p), "passes_test_" + label);
  std::vector<const Tensor *> ptrs;
  for (const Tensor &in : t.inputs) ptrs.push_back(&in);
  std::vector<Tensor> out = compiled->run(ptrs.data(), ptrs.size());
  std::vector<Tensor> ref = interpretGraph(t.graph, t.inputs);
  ASSERT_EQ(out.size(), ref.size());
  for (size_t i = 0; i < out.size(); ++i) {
    Tol tol = tolFor(ref[i].dtype());
    EXPECT_TRUE(allclose(out[i].to(DType::f64), ref[i].to(DType::f64), tol.rtol, tol.atol))
        << label << " output " << i;
  }
}

Lowered lowerPipeline(const Traced &t, const std::vector<Pass> &list = passes()) {
  Program p = lowerGraph(runPipeline(t.graph, list), t.inputs);
  Lowered l;
  for (const Step &s : p.steps) {
    l.kernels += s.kind == Step::Kind::kernel;
    l.library += s.kind == Step::Kind::library;
    l.eager += s.kind == Step::Kind::eager;
  }
  return l;
}

TEST(PassesLowering, CompositesBecomeOneKernel) {
  Tensor w = Tensor::randn({32}, 41), b = Tensor::randn({32}, 42);
  Tensor lw = Tensor::randn({24, 32}, 43), lb = Tensor::randn({24}, 44);
  std::vector<Fn> fns = {
      [](const std::vector<Tensor> &a) { return one(softmax(a[0], 1) * 2.0); },
      [](const std::vector<Tensor> &a) { return one(log_softmax(a[0], 1)); },
      [](const std::vector<Tensor> &a) { return one(softmax(a[0].to(DType::f16), 1)); },
      [=](const std::vector<Tensor> &a) { return one(layer_norm(a[0], w, b, 1e-5)); },
      [=](const std::vector<Tensor> &a) { return one(rms_norm(a[0], w, 1e-6)); },
      [=](const std::vector<Tensor> &a) { return one(relu(linear(a[0], lw, lb))); },
  };
  for (size_t i = 0; i < fns.size(); ++i) {
    Traced t = trace(fns[i], {Tensor::randn({8, 32}, 45)});
    Lowered l = lowerPipeline(t);
    EXPECT_EQ(l.kernels, 1) << "function " << i;
    EXPECT_EQ(l.library + l.eager, 0) << "function " << i;
    expectCompiledMatches(t, "composite" + std::to_string(i));
  }
}

// The iota tensors (KernelTensor::iota) of p's kernels, and the kernel operands that load
// an arange's buffer from memory.
std::pair<int, int> arangeLoads(const Program &p) {
  std::vector<bool> arangeBuffer(p.values.size(), false);
  for (const Step &s : p.steps) {
    if (s.kind == Step::Kind::eager && s.op == OpKind::arange)
      arangeBuffer[static_cast<size_t>(p.values[s.result].buffer)] = true;
  }
  int iota = 0, loaded = 0;
  for (const Step &s : p.steps) {
    if (s.kind != Step::Kind::kernel) continue;
    const LoopKernel &k = p.kernels[static_cast<size_t>(s.kernel)];
    for (size_t t = 0; t < k.tensors.size(); ++t) {
      const int buffer = p.values[s.operands[t]].buffer;
      iota += k.tensors[t].iota;
      loaded += !k.tensors[t].iota && arangeBuffer[static_cast<size_t>(buffer)];
    }
  }
  return {iota, loaded};
}

TEST(PassesLowering, KernelsComputeAnArangesValuesInsteadOfLoadingThem) {
  Tensor target = Tensor::from_vector(std::vector<int64_t>{3, 0, 36, 7, 12, 20}, {6});
  std::vector<std::pair<Fn, std::vector<Tensor>>> cases = {
      // cross_entropy's one-hot compare
      {[](const std::vector<Tensor> &a) { return one(cross_entropy(a[0], a[1])); },
       {Tensor::randn({6, 37}, 46), target}},
      // along the columns and, reshaped, down the rows; in f32
      {[](const std::vector<Tensor> &a) {
         Tensor cols = Tensor::arange(37, DType::f32), rows = Tensor::arange(6, DType::f32);
         return one(a[0] * cols + unsqueeze(rows, -1));
       },
       {Tensor::randn({6, 37}, 47)}},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    Traced t = trace(cases[i].first, cases[i].second);
    auto [iota, loaded] = arangeLoads(lowerGraph(runPipeline(t.graph, passes()), t.inputs));
    EXPECT_GE(iota, 1) << "case " << i;
    EXPECT_EQ(loaded, 0) << "case " << i;
    expectCompiledMatches(t, "arange" + std::to_string(i));
  }
  // a causal mask: arange [Lq, 1] against arange [1, Lk]
  Traced causal = sdpaTrace(true, 6, 6);
  auto [maskIota, maskLoaded] =
      arangeLoads(lowerGraph(runPipeline(causal.graph, passes()), causal.inputs));
  EXPECT_GE(maskIota, 2);
  EXPECT_EQ(maskLoaded, 0);
  expectCompiledMatches(causal, "arange_causal");
  // a slice starting past 0 is loaded, and right
  Traced sliced = trace(
      [](const std::vector<Tensor> &a) {
        return one(a[0] + slice(Tensor::arange(45, DType::f32), 0, 8, 45));
      },
      {Tensor::randn({6, 37}, 48)});
  auto [slicedIota, slicedLoaded] =
      arangeLoads(lowerGraph(runPipeline(sliced.graph, passes()), sliced.inputs));
  EXPECT_EQ(slicedIota, 0);
  EXPECT_EQ(slicedLoaded, 1);
  expectCompiledMatches(sliced, "arange_sliced");
}

TEST(PassesLowering, SdpaIsTwoMatmulsAroundOneSoftmaxKernel) {
  const std::vector<Pass> library = defaultPasses(PipelineOptions{}); // no small matmuls
  Lowered plain = lowerPipeline(sdpaTrace(false, 6, 10), library);
  EXPECT_EQ(plain.library, 2);
  EXPECT_EQ(plain.kernels, 1);
  EXPECT_EQ(plain.eager, 0);
  // small products: the two matmuls are generated kernels too
  Lowered small = lowerPipeline(sdpaTrace(false, 6, 10));
  EXPECT_EQ(small.library, 0);
  EXPECT_EQ(small.kernels, 3);
  Lowered causal = lowerPipeline(sdpaTrace(true, 6, 6), library);
  EXPECT_EQ(causal.library, 2);
  EXPECT_EQ(causal.kernels, 2); // the mask, then scale + mask + softmax
  EXPECT_EQ(causal.eager, 1);   // one arange (CSE merged the two)
  expectCompiledMatches(sdpaTrace(false, 6, 10), "sdpa");
  expectCompiledMatches(sdpaTrace(true, 6, 6), "sdpa_causal");
  expectCompiledMatches(sdpaTrace(true, 5, 9), "sdpa_causal_wide");
}

TEST(PassesLowering, SmallLinearAndMatmulCompileCorrectly) {
  for (bool bias : {false, true}) {
    expectCompiledMatches(linearTrace(16, 32, bias), bias ? "linear_bias" : "linear");
  }
  expectCompiledMatches(
      trace([](const std::vector<Tensor> &a) { return one(matmul(a[0], a[1]) + 1.0); },
            {Tensor::randn({50, 16}, 15), Tensor::randn({16, 24}, 16)}),
      "matmul");
  expectCompiledMatches(attentionBlock(), "attention_block");
}

} // namespace

// ---- remat ------------------------------------------------------------------------------

namespace {
// exp(x) * 2 used at once, and again after a long stretch of other work: the pass makes it
// again next to the late use, from x (an input, alive anyway).
Traced rematLateUse(int stretch) {
  return trace(
      [stretch](const std::vector<Tensor> &a) {
        Tensor e = exp(a[0]) * 2.0;
        Tensor h = e + 1.0;
        for (int i = 0; i < stretch; ++i) h = relu(matmul(h, a[1]));
        return one(h + e);
      },
      {Tensor::randn({256, 256}, 40) * 0.1, Tensor::randn({256, 256}, 41) * 0.05});
}
int lastUseOf(const Graph &g, int v) {
  int last = -1;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    for (int in : g.nodes[i].inputs) {
      if (in == v) last = static_cast<int>(i);
    }
  }
  return last;
}
} // namespace

// ---- embedding_grad_sum --------------------------------------------------------------

int countOps(const Graph &g, OpKind op) {
  return static_cast<int>(
      std::count_if(g.nodes.begin(), g.nodes.end(), [op](const Node &n) { return n.op == op; }));
}

// add(a, embedding_backward(g, ids)), either order: one embedding_backward with a as its
// base (DCE then drops the old one); values equal.
TEST(PassesEmbeddingGradSum, FoldsATiedWeightsGradientSumIntoOneScatter) {
  Tensor ids = Tensor::from_vector(std::vector<int64_t>{3, 0, 3, 7}, {2, 2});
  Tensor g = Tensor::randn({2, 2, 5}, 1), a = Tensor::randn({8, 5}, 2);
  for (bool baseFirst : {true, false}) {
    Traced t = trace(
        [&](const std::vector<Tensor> &v) {
          Tensor e = embedding_backward(v[1], v[2], 8);
          return std::vector<Tensor>{baseFirst ? v[0] + e : e + v[0]};
        },
        {a, g, ids});
    Graph folded = dce(foldEmbeddingGradSums(t.graph));
    EXPECT_EQ(countOps(folded, OpKind::add), 0) << printGraph(folded);
    ASSERT_EQ(countOps(folded, OpKind::embedding_backward), 1) << printGraph(folded);
    for (const Node &n : folded.nodes) {
      if (n.op == OpKind::embedding_backward) {
        EXPECT_EQ(n.inputs.size(), 3u);
      }
    }
    expectConsistentMetas(folded);
    expectSameValues(t.graph, folded, t.inputs);
  }
}

// Left alone: an embedding gradient another node (or the caller) also reads, one that
// already has a base, a sum that broadcasts, a sum of other dtypes.
TEST(PassesEmbeddingGradSum, LeavesGradientsWithOtherReadersAndBroadcastsAlone) {
  Tensor ids = Tensor::from_vector(std::vector<int64_t>{3, 0, 3, 7}, {2, 2});
  Tensor g = Tensor::randn({2, 2, 5}, 1), a = Tensor::randn({8, 5}, 2);
  Tensor row = Tensor::randn({5}, 3);
  const std::vector<Fn> kept = {
      [](const std::vector<Tensor> &v) {
        Tensor e = embedding_backward(v[1], v[2], 8);
        return std::vector<Tensor>{v[0] + e, e * 2.0};
      },
      [](const std::vector<Tensor> &v) {
        Tensor e = embedding_backward(v[1], v[2], 8);
        return std::vector<Tensor>{v[0] + e, e};
      },
      [](const std::vector<Tensor> &v) {
        return std::vector<Tensor>{v[0] + embedding_backward(v[1], v[2], 8, v[0])};
      },
      [](const std::vector<Tensor> &v) {
        return std::vector<Tensor>{embedding_backward(v[1], v[2], 8) + v[3]};
      },
  };
  for (size_t k = 0; k < kept.size(); ++k) {
    Traced t = trace(kept[k], {a, g, ids, row});
    const Graph out = foldEmbeddingGradSums(t.graph);
    EXPECT_EQ(printGraph(out), printGraph(t.graph)) << "case " << k;
  }
}

// ---- linear_ce_fold -------------------------------------------------------------------

// x [2, 3, 8], w [4100, 8], targets [2, 3] (one ignored), a row-gradient scale, other targets
std::vector<Tensor> linearCeInputs() {
  Tensor t = Tensor::from_vector(std::vector<int64_t>{5, 4099, -100, 0, 17, 2500}, {2, 3});
  Tensor u = Tensor::from_vector(std::vector<int64_t>{1, 2, 3, 4, 5, 6}, {2, 3});
  return {Tensor::randn({2, 3, 8}, 1), Tensor::randn({4100, 8}, 2) * 0.5, t,
          Tensor::randn({2, 3}, 3), u};
}

// The loss's per-row values from the gradient op when it is traced over the same x, w and
// target and its row gradients do not read them: one gradient op (moved up to the pick's
// place, with the row gradients it needs), no pick after DCE; values equal.
TEST(PassesLinearCeFold, ReadsTheLossOffTheGradientOp) {
  for (bool inRegion : {false, true}) { // a region that starts at the pick stays one range
    Traced t = trace(
        [&](const std::vector<Tensor> &v) {
          auto head = [&] { return detail::linearCePick(v[0], v[1], v[2]) * -1.0; };
          Tensor loss = sum(inRegion ? region("head", head) : head());
          Tensor rowGrad = where(ne(v[2], -100), v[3] * 0.5, 0.0); // not from the pick
          Tensor packed = detail::linearCePickBackward(v[0], v[1], v[2], rowGrad);
          return std::vector<Tensor>{loss, packed * 2.0};
        },
        linearCeInputs());
    const Graph g = cse(t.graph);
    Graph folded = dce(foldLinearCePicks(g));
    EXPECT_EQ(countOps(folded, OpKind::linear_ce_pick), 0) << printGraph(folded);
    EXPECT_EQ(countOps(folded, OpKind::linear_ce_pick_backward), 1) << printGraph(folded);
    ASSERT_EQ(folded.regions.size(), inRegion ? 1u : 0u);
    expectConsistentMetas(folded);
    expectSameValues(g, folded, t.inputs);
  }
}

// Left alone: row gradients computed from the loss's values, a gradient op over another
// target, a pick with no gradient op, and a pick inside a region whose gradient's row
// gradients are made after it (moving them in would split the region).
TEST(PassesLinearCeFold, LeavesPicksWhoseGradientReadsThemAlone) {
  const std::vector<Fn> kept = {
      [](const std::vector<Tensor> &v) {
        Tensor h;
        Tensor pick = region("head", [&] {
          h = v[0] * 2.0; // the pick is not the region's first node
          return detail::linearCePick(h, v[1], v[2]);
        });
        Tensor rowGrad = v[3] * 0.5;
        return std::vector<Tensor>{sum(pick), detail::linearCePickBackward(h, v[1], v[2], rowGrad)};
      },
      [](const std::vector<Tensor> &v) {
        Tensor pick = detail::linearCePick(v[0], v[1], v[2]);
        return std::vector<Tensor>{detail::linearCePickBackward(v[0], v[1], v[2], pick * v[3])};
      },
      [](const std::vector<Tensor> &v) {
        Tensor pick = detail::linearCePick(v[0], v[1], v[2]);
        Tensor other = detail::linearCePickBackward(v[0], v[1], v[4], v[3]);
        return std::vector<Tensor>{sum(pick), other};
      },
      [](const std::vector<Tensor> &v) {
        return std::vector<Tensor>{sum(detail::linearCePick(v[0], v[1], v[2]))};
      },
  };
  for (size_t k = 0; k < kept.size(); ++k) {
    Traced t = trace(kept[k], linearCeInputs());
    const Graph g = cse(t.graph);
    EXPECT_EQ(printGraph(foldLinearCePicks(g)), printGraph(g)) << "case " << k;
  }
}

TEST(PassesRemat, RecomputesACheapValueNextToItsLateUse) {
  Traced t = rematLateUse(40);
  Graph before = dce(cse(t.graph));
  Graph after = dce(remat(before));
  EXPECT_EQ(count(after, OpKind::exp), 2) << printGraph(after);
  // every exp's (and its scaled value's) uses are now close to it: none spans the stretch
  for (size_t i = 0; i < after.nodes.size(); ++i) {
    if (after.nodes[i].op != OpKind::exp) continue;
    const int mul = lastUseOf(after, static_cast<int>(i));
    EXPECT_LT(lastUseOf(after, mul) - static_cast<int>(i), 8) << printGraph(after);
  }
  expectSameValues(before, after, t.inputs);
}

TEST(PassesRemat, LeavesShortGapsSmallValuesAndValuesWhoseOperandsDieAlone) {
  Traced shortGap = rematLateUse(2);
  Graph g = dce(cse(shortGap.graph));
  EXPECT_EQ(printGraph(remat(g)), printGraph(g)) << "a gap shorter than minGap";
  RematOptions big;
  big.minBytes = 1 << 30;
  Graph longGap = dce(cse(rematLateUse(40).graph));
  EXPECT_EQ(printGraph(remat(longGap, big)), printGraph(longGap)) << "values under minBytes";
  // exp of a matmul result that nothing else reads: making it again would keep the
  // (large, not cheap) matmul result alive across the stretch instead
  Traced fromMatmul = trace(
      [](const std::vector<Tensor> &a) {
        Tensor e = exp(matmul(a[0], a[1]));
        Tensor h = e + 1.0;
        for (int i = 0; i < 40; ++i) h = relu(matmul(h, a[1]));
        return one(h + e);
      },
      {Tensor::randn({256, 256}, 42) * 0.1, Tensor::randn({256, 256}, 43) * 0.05});
  Graph m = dce(cse(fromMatmul.graph));
  EXPECT_EQ(printGraph(remat(m)), printGraph(m));
}

// In the default pipeline: the lowered program's scratch arena is smaller with remat (the
// late use no longer keeps exp(x) * 2 alive across the stretch).
TEST(PassesRemat, ShrinksTheArenaOfAGraphWithLateUses) {
  Traced t = rematLateUse(40);
  PipelineOptions off;
  off.remat = false;
  auto arenaBytes = [&](const PipelineOptions &o) {
    Graph g = runPipeline(t.graph, defaultPasses(o));
    std::vector<Shape> strides;
    for (const Tensor &in : t.inputs) strides.push_back(in.strides());
    LowerSteps lower(g, strides, targetInfo(Target::cpu).lower);
    lower.fuse();
    lower.buildKernels();
    return lower.planBuffers().arenaBytes;
  };
  const int64_t with = arenaBytes({}), without = arenaBytes(off);
  EXPECT_LT(with, without) << with << " vs " << without;
}
