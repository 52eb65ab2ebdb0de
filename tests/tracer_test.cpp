// The tracer: inputs, captured parameters, regions, graph breaks, toy64's graph.
#include <gtest/gtest.h>

#include <rcjit/rcjit.h>

#include "models/Models.h"
#include "tracer/GraphIO.h"
#include "tracer/Tracer.h"

using namespace rcjit;

namespace {

struct Block : nn::Module<Block> {
  nn::Linear fc{8, 8};
  Block() { register_module("fc", fc); }
  Tensor forward(const Tensor &x) { return relu(fc(x)); }
};

struct Net : nn::Module<Net> {
  nn::ModuleList<Block> blocks;
  Net() {
    for (int i = 0; i < 3; ++i) blocks.emplace_back();
    register_module("blocks", blocks);
  }
  Tensor forward(Tensor x) {
    for (auto &b : blocks) x = b(x);
    return x;
  }
};

Trace traceModel(tools::Model &m, const std::vector<Tensor> &in) {
  return traceFunction(
      [&](const std::vector<Tensor> &args) { return std::vector<Tensor>{m.forward(args)}; }, in);
}

TEST(Tracer, ArgsCapturedAndOps) {
  Tensor w = Tensor::randn({4}, 1);
  Tensor x = Tensor::randn({2, 4}, 2);
  Trace t = traceFunction(
      [&](const std::vector<Tensor> &a) { return std::vector<Tensor>{relu(a[0] * w + 1.0)}; }, {x});
  const Graph &g = t.graph;
  ASSERT_EQ(t.captured.size(), 1u);
  EXPECT_TRUE(t.captured[0].sharesStorage(w));
  int args = 0, captured = 0;
  for (const Node &n : g.nodes) {
    if (n.op == OpKind::input) (n.inputKind == InputKind::arg ? args : captured)++;
  }
  EXPECT_EQ(args, 1);
  EXPECT_EQ(captured, 1);
  ASSERT_EQ(g.outputs.size(), 1u);
  EXPECT_EQ(g.nodes[g.outputs[0]].op, OpKind::relu);
  // the scalar became a constant node, not a captured input
  bool hasFull = false;
  for (const Node &n : g.nodes) hasFull |= n.op == OpKind::full && n.attrs.value == 1.0;
  EXPECT_TRUE(hasFull);
  EXPECT_TRUE(allclose(t.outputs[0], relu(x * w + 1.0)));
}

TEST(Tracer, ModuleRegionsAndParameterNames) {
  Net net;
  Trace t =
      traceFunction([&](const std::vector<Tensor> &a) { return std::vector<Tensor>{net(a[0])}; },
                    {Tensor::randn({2, 8}, 3)});
  const Graph &g = t.graph;
  int blocks = 0;
  for (const Region &r : g.regions) {
    if (r.type.find("Block") != std::string::npos) {
      EXPECT_TRUE(r.inList);
      EXPECT_EQ(r.name, "blocks." + std::to_string(blocks));
      ++blocks;
    }
  }
  EXPECT_EQ(blocks, 3);
  std::vector<std::string> names;
  for (const Node &n : g.nodes) {
    if (n.op == OpKind::input && n.inputKind == InputKind::captured) names.push_back(n.name);
  }
  EXPECT_EQ(names, (std::vector<std::string>{"blocks.0.fc.weight", "blocks.0.fc.bias",
                                             "blocks.1.fc.weight", "blocks.1.fc.bias",
                                             "blocks.2.fc.weight", "blocks.2.fc.bias"}));
  auto params = net.named_parameters();
  ASSERT_EQ(params.size(), 6u);
  EXPECT_EQ(params[0].first, "blocks.0.fc.weight");
}

TEST(Tracer, HostReadIsAGraphBreak) {
  Tensor x = Tensor::randn({3}, 4);
  Trace t = traceFunction(
      [&](const std::vector<Tensor> &a) {
        Tensor s = sum(a[0]);
        double v = s.item();
        return std::vector<Tensor>{v > 0 ? a[0] * 2.0 : a[0] * 3.0};
      },
      {x});
  ASSERT_EQ(t.breaks.size(), 1u);
  EXPECT_EQ(t.breaks[0].op, "item");
  EXPECT_EQ(t.graph.nodes[t.breaks[0].node].op, OpKind::sum);
}

TEST(Tracer, ExplicitRegion) {
  Trace t = traceFunction(
      [&](const std::vector<Tensor> &a) {
        Tensor y = region("double_relu", [&] { return relu(relu(a[0])); });
        return std::vector<Tensor>{y + 1.0};
      },
      {Tensor::randn({3}, 5)});
  ASSERT_EQ(t.graph.regions.size(), 1u);
  EXPECT_EQ(t.graph.regions[0].name, "double_relu");
  EXPECT_EQ(t.graph.regions[0].end - t.graph.regions[0].begin, 2);
}

TEST(Tracer, Toy64Graph) {
  tools::ModelConfig c;
  c.batch = 2;
  c.seq = 3;
  auto m1 = tools::findModel("toy64").build(c);
  std::vector<Tensor> in = m1->makeInputs(c);
  Trace t = traceModel(*m1, in);
  int layers = 0, captured = 0;
  for (const Region &r : t.graph.regions) {
    if (r.inList) ++layers;
  }
  for (const Node &n : t.graph.nodes) {
    if (n.op == OpKind::input && n.inputKind == InputKind::captured) ++captured;
  }
  EXPECT_EQ(layers, 64);
  EXPECT_EQ(captured, 258);
  EXPECT_EQ(t.captured.size(), 258u);
  EXPECT_TRUE(allclose(t.outputs[0], m1->forward(in)));

  // a separately built toy64 hashes equal (parameter identity does not matter)
  c.seed = 99;
  auto m2 = tools::findModel("toy64").build(c);
  Trace t2 = traceModel(*m2, m2->makeInputs(c));
  EXPECT_EQ(hashGraph(t.graph), hashGraph(t2.graph));

  // every layer region hashes equal to every other
  GraphHash first;
  bool have = false;
  for (size_t r = 0; r < t.graph.regions.size(); ++r) {
    if (!t.graph.regions[r].inList) continue;
    GraphHash h = hashGraph(extractRegion(t.graph, static_cast<int>(r)));
    if (!have) first = h, have = true;
    EXPECT_EQ(h, first) << "region " << t.graph.regions[r].name;
  }
  // the printed graph parses back equal
  EXPECT_EQ(parseGraph(printGraph(t.graph)), t.graph);
}

} // namespace
