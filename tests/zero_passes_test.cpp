// The ZeRO passes' graph edits, checked structurally on small graphs (no MPI needed): zero3
// gathers each unit just before its first use and reads the parameters only through the
// gather, reduce-scatters the gradients; prefetch moves gathers earlier within the budget;
// selective_unshard keeps small units gathered from forward to backward; a sharded
// parameter compiled without zero3 is an Error.
#include <gtest/gtest.h>

#include <algorithm>

#include <rcjit/rcjit.h>

#include "jit/passes/Zero.h"
#include "tests/TestUtil.h"

namespace rcjit {
namespace {

// x [4, 8] through three "blocks" x = relu(x @ W_i), W_i [8, 8] captured: program inputs
// x (0), W1 (1), W2 (2), W3 (3).
Graph zeroTestBlocks() {
  Graph g;
  auto input = [&](InputKind kind, int index, Shape shape, const std::string &name) {
    Node n;
    n.op = OpKind::input;
    n.inputKind = kind;
    n.inputIndex = index;
    n.shape = staticShape(shape);
    n.name = name;
    return g.add(n);
  };
  auto op = [&](OpKind k, std::vector<int> in, Shape shape) {
    Node n;
    n.op = k;
    n.inputs = std::move(in);
    n.shape = staticShape(shape);
    return g.add(n);
  };
  int x = input(InputKind::arg, 0, {4, 8}, "");
  for (int i = 0; i < 3; ++i) {
    int w = input(InputKind::captured, i, {8, 8}, "w" + std::to_string(i + 1));
    x = op(OpKind::relu, {op(OpKind::matmul, {x, w}, {4, 8})}, {4, 8});
  }
  g.outputs = {x};
  return g;
}

// Each W_i its own unit of 64 elements over 2 ranks (shards of 32).
ShardingState zeroTestSharding(int units = 3) {
  ShardingState s;
  s.world_size = 2;
  s.stage = 3;
  for (int i = 0; i < units; ++i) {
    ShardedParameter p{.name = "w" + std::to_string(i + 1),
                       .unit = i,
                       .offset = 0,
                       .unit_numel = 64,
                       .shape = {8, 8},
                       .shard = Tensor::zeros({32}),
                       .world_size = 2};
    s.inputs.push_back({.input = i + 1, .grad_output = -1, .param = p});
  }
  return s;
}

std::vector<int> zeroTestNodesOf(const Graph &g, OpKind k) {
  std::vector<int> out;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    if (g.nodes[i].op == k) out.push_back(static_cast<int>(i));
  }
  return out;
}

// The node that gathers the unit whose shard input is captured `w`.
int zeroTestGatherOf(const Graph &g, int w) {
  for (int gt : zeroTestNodesOf(g, OpKind::all_gather)) {
    const Node &in = g.nodes[static_cast<size_t>(g.nodes[static_cast<size_t>(gt)].inputs[0])];
    if (in.op == OpKind::input && in.inputKind == InputKind::captured && in.inputIndex == w)
      return gt;
  }
  return -1;
}

// Whether node `to` reads `from` through views only (slice, reshape).
bool zeroTestReadsThroughViews(const Graph &g, int to, int from) {
  for (int in : g.nodes[static_cast<size_t>(to)].inputs) {
    if (in == from) return true;
    if (opInfo(g.nodes[static_cast<size_t>(in)].op).category == OpCategory::View &&
        zeroTestReadsThroughViews(g, in, from))
      return true;
  }
  return false;
}

TEST(ZeroPasses, Zero3GathersEachUnitJustBeforeItsFirstUse) {
  PassContext ctx;
  ctx.sharding = zeroTestSharding();
  const Graph g = zeroTestBlocks();
  const Graph z = zero3Pass(g, ctx);
  const std::vector<int> matmuls = zeroTestNodesOf(z, OpKind::matmul);
  ASSERT_EQ(matmuls.size(), 3u);
  ASSERT_EQ(zeroTestNodesOf(z, OpKind::all_gather).size(), 3u);
  const std::vector<int> ids = z.programInputs();
  for (int w = 0; w < 3; ++w) {
    // the parameter's input is its shard
    EXPECT_EQ(concreteShape(z.nodes[static_cast<size_t>(ids[static_cast<size_t>(w + 1)])].shape),
              (Shape{32}));
    const int gt = zeroTestGatherOf(z, w);
    ASSERT_GE(gt, 0) << "w" << w + 1;
    EXPECT_EQ(concreteShape(z.nodes[static_cast<size_t>(gt)].shape), (Shape{64}));
    // gathered after the previous block's matmul, before its own: just before its first use
    EXPECT_LT(gt, matmuls[static_cast<size_t>(w)]);
    if (w > 0) {
      EXPECT_GT(gt, matmuls[static_cast<size_t>(w - 1)]);
    }
    EXPECT_TRUE(zeroTestReadsThroughViews(z, matmuls[static_cast<size_t>(w)], gt));
    // nothing after the unit's last use reads the gathered value: it can be freed there
    for (size_t i = static_cast<size_t>(matmuls[static_cast<size_t>(w)]) + 1; i < z.nodes.size();
         ++i)
      EXPECT_FALSE(zeroTestReadsThroughViews(z, static_cast<int>(i), gt)) << "node " << i;
  }
  // estimated live bytes: the gathered 64 floats of one unit at a time, not three
  const std::vector<int64_t> live = estimatedLiveBytes(z);
  EXPECT_LT(*std::max_element(live.begin(), live.end()), 2 * 64 * 4 + 3 * 4 * 8 * 4);
  // no sharding in the context: the graph as it was
  EXPECT_EQ(zero3Pass(g, PassContext{}), g);
}

TEST(ZeroPasses, PrefetchStartsGathersEarlierWithinTheBudget) {
  PassContext ctx;
  ctx.sharding = zeroTestSharding();
  const Graph z = zero3Pass(zeroTestBlocks(), ctx);
  // no budget: one unit ahead, each gather starts where the previous one is first read
  const Graph p = prefetchPass(z, ctx);
  std::vector<int> matmuls = zeroTestNodesOf(p, OpKind::matmul);
  for (int w = 1; w < 3; ++w) {
    EXPECT_LT(zeroTestGatherOf(p, w), matmuls[static_cast<size_t>(w - 1)]) << "w" << w + 1;
    EXPECT_LT(zeroTestGatherOf(p, w - 1), zeroTestGatherOf(p, w)) << "gathers keep their order";
  }
  EXPECT_GT(zeroTestGatherOf(p, 2), matmuls[0]) << "only one unit ahead";
  // a budget below what one more gathered unit takes: nothing moves
  ctx.memory_budget = 64;
  EXPECT_EQ(prefetchPass(z, ctx), z);
  // a large budget: every gather before the first matmul
  ctx.memory_budget = 1 << 20;
  const Graph all = prefetchPass(z, ctx);
  matmuls = zeroTestNodesOf(all, OpKind::matmul);
  for (int w = 0; w < 3; ++w) EXPECT_LT(zeroTestGatherOf(all, w), matmuls[0]) << "w" << w + 1;
  // the budget bounds the estimate: with room for one more unit, gathers move less far
  const std::vector<int64_t> before = estimatedLiveBytes(z);
  ctx.memory_budget = *std::max_element(before.begin(), before.end()) + 64 * 4;
  const Graph some = prefetchPass(z, ctx);
  const std::vector<int64_t> live = estimatedLiveBytes(some);
  EXPECT_LE(*std::max_element(live.begin(), live.end()), ctx.memory_budget + 64 * 4);
}

// A backward: the gradients of W1..W3 (outputs 0..2) computed from the saved W's (program
// inputs 1..3) and x; zero3 gathers the saved W's again and reduce-scatters the gradients.
TEST(ZeroPasses, Zero3ReduceScattersGradientsInTheBackward) {
  Graph g = zeroTestBlocks();
  // outputs: three [8, 8] "gradients", each read from its block's matmul
  g.outputs.clear();
  for (int mm : zeroTestNodesOf(g, OpKind::matmul)) {
    Node t;
    t.op = OpKind::matmul;
    Node perm;
    perm.op = OpKind::permute;
    perm.inputs = {mm};
    perm.attrs.dims = {1, 0};
    perm.shape = staticShape({8, 4});
    const int pt = g.add(perm);
    t.inputs = {pt, mm};
    t.shape = staticShape({8, 8});
    g.outputs.push_back(g.add(t));
  }
  PassContext ctx;
  ctx.backward = true;
  ctx.sharding = zeroTestSharding();
  for (int w = 0; w < 3; ++w) ctx.sharding.inputs[static_cast<size_t>(w)].grad_output = w;
  const Graph z = zero3Pass(g, ctx);
  ASSERT_EQ(z.outputs.size(), 3u);
  EXPECT_EQ(zeroTestNodesOf(z, OpKind::reduce_scatter).size(), 3u);
  for (int o : z.outputs) { // the sum over the ranks of each rank's gradient / world
    const Node &mean = z.nodes[static_cast<size_t>(o)];
    EXPECT_EQ(mean.op, OpKind::reduce_scatter);
    EXPECT_EQ(concreteShape(mean.shape), (Shape{32}));
    EXPECT_EQ(z.nodes[static_cast<size_t>(mean.inputs[0])].op, OpKind::mul);
  }
  // each unit's reduce-scatter starts right after its gradient, before the next one is
  // computed (the gradients are the last three matmuls)
  const std::vector<int> rs = zeroTestNodesOf(z, OpKind::reduce_scatter);
  const std::vector<int> mm = zeroTestNodesOf(z, OpKind::matmul);
  ASSERT_EQ(mm.size(), 6u);
  for (size_t k = 0; k < 3; ++k) {
    EXPECT_GT(rs[k], mm[3 + k]);
    if (k < 2) {
      EXPECT_LT(rs[k], mm[4 + k]);
    }
  }
}

TEST(ZeroPasses, SelectiveUnshardKeepsTheSmallestUnitsGatheredForTheBackward) {
  ShardingState s = zeroTestSharding();
  s.inputs[2].param.unit_numel = 64;
  s.inputs[2].param.shard = Tensor::zeros({64});               // a unit of twice the size (padded)
  EXPECT_EQ(residentUnits(s, 0), (std::vector<int>{0, 1, 2})); // within twice the smallest
  EXPECT_EQ(residentUnits(s, 2 * 64 * 4), (std::vector<int>{0, 1}));
  EXPECT_EQ(residentUnits(s, 64 * 4), (std::vector<int>{0}));
  EXPECT_TRUE(residentUnits(s, 1).empty());
  // forward: the saved W1 (an output that is its input) becomes its gathered value
  Graph g = zeroTestBlocks();
  const std::vector<int> ids = g.programInputs();
  g.outputs.push_back(ids[1]);
  PassContext ctx;
  ctx.sharding = zeroTestSharding();
  ctx.memory_budget = 64 * 4; // room for one unit
  const Graph z = zero3Pass(g, ctx);
  EXPECT_EQ(concreteShape(z.nodes[static_cast<size_t>(z.outputs[1])].shape), (Shape{32}));
  const Graph f = selectiveUnshardPass(z, ctx);
  EXPECT_EQ(concreteShape(f.nodes[static_cast<size_t>(f.outputs[1])].shape), (Shape{8, 8}));
  EXPECT_TRUE(zeroTestReadsThroughViews(f, f.outputs[1], zeroTestGatherOf(f, 0)) ||
              f.nodes[static_cast<size_t>(f.outputs[1])].op == OpKind::reshape);
  // backward: the saved W1 arrives full and is read directly, no gather of unit 0
  PassContext bctx = ctx;
  bctx.backward = true;
  const Graph b = selectiveUnshardPass(z, bctx);
  const std::vector<int> bids = b.programInputs();
  EXPECT_EQ(concreteShape(b.nodes[static_cast<size_t>(bids[1])].shape), (Shape{8, 8}));
  const std::vector<int> mm = zeroTestNodesOf(b, OpKind::matmul);
  EXPECT_EQ(b.nodes[static_cast<size_t>(mm[0])].inputs[1], bids[1]);
}

TEST(ZeroPasses, BuiltInPassesAreRegisteredAndReserved) {
  EXPECT_TRUE(has_scheduled_pass("zero3"));
  EXPECT_TRUE(has_scheduled_pass("prefetch"));
  EXPECT_TRUE(has_scheduled_pass("selective_unshard"));
  const std::string msg = test::errorOf([] {
    register_scheduled_pass("zero3", [](const Graph &g, const PassContext &) { return g; });
  });
  EXPECT_NE(msg.find("'zero3' is a built-in pass of rcjit"), std::string::npos) << msg;
}

TEST(ZeroPasses, ShardParameterChecksItsArguments) {
  Tensor w = Tensor::zeros({8, 8});
  ShardedParameter p{.name = "w",
                     .unit = 0,
                     .offset = 0,
                     .unit_numel = 64,
                     .shape = {8, 8},
                     .shard = Tensor::zeros({16}),
                     .world_size = 2};
  std::string msg = test::errorOf([&] { shard_parameter(w, p); });
  EXPECT_NE(
      msg.find("shard_parameter(w): elements [0, 64) of a unit of 64 do not fit 2 shards of 16"),
      std::string::npos)
      << msg;
  p.shard = Tensor::zeros({32});
  p.shape = {4, 16};
  msg = test::errorOf([&] { shard_parameter(w, p); });
  EXPECT_NE(msg.find("full shape [4, 16] but the parameter is [8, 8]"), std::string::npos) << msg;
  p.shape = {8, 8};
  shard_parameter(w, p);
  ShardedParameter got;
  ASSERT_TRUE(sharded_parameter(w, got));
  EXPECT_EQ(got.shard.numel(), 32);
  // compiled without the zero3 pass: an Error naming the parameter, before anything runs
  auto f = compile([&](const Tensor &x) { return matmul(x, w); });
  msg = test::errorOf([&] { f(Tensor::ones({2, 8})); });
  EXPECT_NE(msg.find("reads the full value of w, a parameter sharded over 2 ranks"),
            std::string::npos)
      << msg;
  unshard_parameter(w);
  EXPECT_FALSE(sharded_parameter(w, got));
  EXPECT_TRUE(allclose(f(Tensor::ones({2, 8})), Tensor::zeros({2, 8})));
}

// A compiled program frees an eager step's result (a gather's, an embedding's) after its last
// reader, not at the end of the call: two 1 MiB embeddings read one after the other never
// take 2 MiB at once.
TEST(ZeroPasses, CompiledProgramsFreeEagerResultsAfterTheirLastReader) {
  const Tensor w = Tensor::ones({16, 4096});
  std::vector<int64_t> a(64), b(64);
  for (int64_t i = 0; i < 64; ++i) {
    a[static_cast<size_t>(i)] = i % 16;
    b[static_cast<size_t>(i)] = (i * 7) % 16;
  }
  const Tensor ia = Tensor::from_vector(a, {64}), ib = Tensor::from_vector(b, {64});
  auto f = compile([&](const Tensor &x, const Tensor &y) {
    return sum(embedding(w, x), {}, false) + sum(embedding(w, y), {}, false) * 2;
  });
  Tensor want = Tensor::full({}, 3.0 * 64 * 4096);
  EXPECT_TRUE(allclose(f(ia, ib), want)); // compiles
  const int64_t before = memory_stats().current_bytes;
  reset_peak_memory_stats();
  EXPECT_TRUE(allclose(f(ia, ib), want));
  const int64_t mib = 64 * 4096 * 4;
  EXPECT_LT(memory_stats().peak_bytes - before, mib + mib / 2);
}

} // namespace
} // namespace rcjit
