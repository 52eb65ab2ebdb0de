// The joint-graph partitioner: what it saves, what it recomputes, and that the two graphs
// it makes compile and compute the joint graph's values.
#include <gtest/gtest.h>

#include <rcjit/rcjit.h>

#include "jit/CompileGraph.h"
#include "jit/autograd/Partition.h"
#include "tests/TestUtil.h"
#include "tracer/GraphIO.h"
#include "tracer/ShapeInference.h"

using namespace rcjit;
using rcjit::test::errorOf;

namespace {

// A graph built node by node, each node's dtype and shape from shape inference.
struct Builder {
  Graph g;
  int args = 0;
  int input(Shape s) {
    Node n;
    n.op = OpKind::input;
    n.shape = staticShape(s);
    n.inputIndex = args++;
    return g.add(std::move(n));
  }
  int op(OpKind k, std::vector<int> in, Attrs a = {}) {
    std::vector<TensorMeta> metas;
    for (int i : in) metas.push_back({g.nodes[i].dtype, concreteShape(g.nodes[i].shape)});
    TensorMeta m = inferMeta(k, metas, a);
    Node n;
    n.op = k;
    n.inputs = std::move(in);
    n.attrs = a;
    n.dtype = m.dtype;
    n.shape = staticShape(m.shape);
    return g.add(std::move(n));
  }
  int scalar(double v) {
    Node n;
    n.op = OpKind::full;
    n.attrs.value = v;
    return g.add(std::move(n));
  }
};

std::shared_ptr<Executable> compiled(const Graph &g, const std::vector<Tensor> &in) {
  CompileRequest r;
  std::vector<Shape> strides;
  for (const Tensor &t : in) strides.push_back(t.strides());
  r.samples.push_back({g, strides});
  return compileGraph(std::move(r)).executable;
}

std::vector<Tensor> run(const Executable &e, const std::vector<Tensor> &in) {
  std::vector<const Tensor *> p;
  for (const Tensor &t : in) p.push_back(&t);
  return e.run(p.data(), p.size());
}

// y = gelu(x @ w); the backward of a stand-in rule: dw = x^T @ (g * h).
JointGraph geluOfMatmul() {
  Builder b;
  int x = b.input({4, 8}), w = b.input({8, 8});
  int h = b.op(OpKind::matmul, {x, w});
  int y = b.op(OpKind::gelu, {h});
  Node t;
  t.op = OpKind::input;
  t.shape = staticShape({4, 8});
  t.inputIndex = b.args; // the tangent: an arg after the function's own
  int g = b.g.add(t);
  int dh = b.op(OpKind::mul, {g, h});
  Attrs perm;
  perm.dims = {1, 0};
  int xt = b.op(OpKind::permute, {x}, perm);
  int dw = b.op(OpKind::matmul, {xt, dh});
  b.g.outputs = {y, dw};
  return {b.g, 2, 1};
}

TEST(Partition, SavesTheLibraryResultNotItsActivation) {
  JointGraph j = geluOfMatmul();
  Partition p = partitionJoint(j);
  EXPECT_EQ(p.saved, (std::vector<int>{0, 2})) << "x (an input) and h = x @ w";
  EXPECT_EQ(p.savedBytes, 4 * 8 * 4) << "only h costs memory";
  EXPECT_EQ(p.recomputed, (std::vector<int>{6})) << "x^T: a view of the saved input";
  EXPECT_EQ(p.forward.outputs, (std::vector<int>{3, 0, 2}));
  EXPECT_EQ(p.backward.programInputs().size(), 3u) << "x, h, the tangent";
  // the two compiled graphs compute what the joint graph does
  Tensor x = Tensor::randn({4, 8}, 1), w = Tensor::randn({8, 8}, 2), g = Tensor::randn({4, 8}, 3);
  std::vector<Tensor> fwd = run(*compiled(p.forward, {x, w}), {x, w});
  ASSERT_EQ(fwd.size(), 3u);
  EXPECT_TRUE(allclose(fwd[0], gelu(matmul(x, w)), 1e-4, 1e-5));
  std::vector<Tensor> bin = {fwd[static_cast<size_t>(p.savedOutput[0])],
                             fwd[static_cast<size_t>(p.savedOutput[1])], g};
  std::vector<Tensor> bwd = run(*compiled(p.backward, bin), bin);
  ASSERT_EQ(bwd.size(), 1u);
  EXPECT_TRUE(allclose(bwd[0], matmul(transpose(x, 0, 1), g * matmul(x, w)), 1e-4, 1e-5));
}

TEST(Partition, RecomputesCheapChainsFromInputs) {
  Builder b;
  int x = b.input({16});
  int a = b.op(OpKind::mul, {x, b.scalar(2.0)});
  int c = b.op(OpKind::add, {a, b.scalar(1.0)});
  Attrs all;
  all.dims = {0};
  int s = b.op(OpKind::sum, {c}, all);
  Node t;
  t.op = OpKind::input;
  t.inputIndex = 1;
  int g = b.g.add(t);
  int dc = b.op(OpKind::mul, {g, c}); // the backward reads c
  b.g.outputs = {s, dc};
  Partition p = partitionJoint({b.g, 1, 1});
  EXPECT_EQ(p.saved, (std::vector<int>{x})) << "c is recomputed from x: nothing to hold";
  EXPECT_EQ(p.savedBytes, 0);
  EXPECT_EQ(p.recomputed.size(), 4u) << "the two constants, x * 2 and + 1";
  Tensor xv = Tensor::randn({16}, 4), gv = Tensor::full({}, 3.0);
  std::vector<Tensor> fwd = run(*compiled(p.forward, {xv}), {xv});
  std::vector<Tensor> bin = {fwd[static_cast<size_t>(p.savedOutput[0])], gv};
  std::vector<Tensor> bwd = run(*compiled(p.backward, bin), bin);
  EXPECT_TRUE(allclose(bwd.at(0), (xv * 2.0 + 1.0) * 3.0, 1e-5, 1e-6));
}

TEST(Partition, MalformedJointGraphsAreErrors) {
  JointGraph j = geluOfMatmul();
  j.numPrimalInputs = 5;
  EXPECT_NE(errorOf([&] { partitionJoint(j); }).find("out of range"), std::string::npos);
  j = geluOfMatmul();
  j.graph.outputs[0] = j.graph.outputs[1]; // a forward output computed from the tangent
  EXPECT_NE(errorOf([&] { partitionJoint(j); }).find("forward output 0 (%7) depends on a tangent"),
            std::string::npos)
      << errorOf([&] { partitionJoint(j); });
}

} // namespace
