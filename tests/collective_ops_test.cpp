// The collectives as ops of the IR without an MPI job: their shape rules and errors, text
// form, hash (the world size is part of it), lowering to a start and a wait step, and the
// cuda target's refusal. Running them is tests/mpi/compiled_collectives_test.cpp.
#include <gtest/gtest.h>

#include <string>

#include <rcjit/rcjit.h>

#include "jit/CompileGraph.h"
#include "targets/Fuse.h"
#include "tests/TestUtil.h"
#include "tracer/GraphIO.h"
#include "tracer/ShapeInference.h"
#include "tracer/TensorImpl.h"

namespace rcjit {
namespace {

using test::errorOf;

Attrs collective(int64_t world, int64_t dim = 0, int64_t reduce = 0, int64_t root = 0) {
  Attrs a;
  a.world = world;
  a.dim = dim;
  a.reduce = reduce;
  a.root = root;
  return a;
}

TEST(CollectiveOps, ShapeRules) {
  const TensorMeta x{DType::f32, {4, 6}};
  EXPECT_EQ(inferMeta(OpKind::all_reduce, {x}, collective(4)).shape, (Shape{4, 6}));
  EXPECT_EQ(inferMeta(OpKind::all_gather, {x}, collective(4, 1)).shape, (Shape{4, 24}));
  EXPECT_EQ(inferMeta(OpKind::all_gather, {x}, collective(3, 0)).shape, (Shape{12, 6}));
  EXPECT_EQ(inferMeta(OpKind::reduce_scatter, {x}, collective(2, 0)).shape, (Shape{2, 6}));
  EXPECT_EQ(inferMeta(OpKind::reduce_scatter, {x}, collective(3, 1)).shape, (Shape{4, 2}));
  EXPECT_EQ(inferMeta(OpKind::broadcast, {x}, collective(4, 0, 0, 3)).shape, (Shape{4, 6}));
  // broadcast and all_gather move any dtype; the reductions take f32, f64, i32, i64
  EXPECT_EQ(inferMeta(OpKind::broadcast, {{DType::bf16, {2}}}, collective(2)).dtype, DType::bf16);
  EXPECT_EQ(inferMeta(OpKind::all_gather, {{DType::boolean, {2}}}, collective(2)).dtype,
            DType::boolean);
  EXPECT_EQ(inferMeta(OpKind::all_reduce, {{DType::i32, {2}}}, collective(2)).dtype, DType::i32);
  EXPECT_EQ(inferMeta(OpKind::all_reduce, {{DType::f64, {}}}, collective(2, 0, 1)).shape, Shape{});
}

TEST(CollectiveOps, ShapeRuleErrorsNameWhatIsWrong) {
  const TensorMeta x{DType::f32, {5, 6}};
  std::string msg = errorOf([&] { inferMeta(OpKind::reduce_scatter, {x}, collective(4, 0)); });
  EXPECT_NE(msg.find("reduce_scatter: dim 0 of f32[5, 6] has size 5, which 4 ranks cannot split "
                     "evenly"),
            std::string::npos)
      << msg;
  msg = errorOf([&] { inferMeta(OpKind::all_reduce, {{DType::i64, {3}}}, collective(2, 0, 1)); });
  EXPECT_NE(msg.find("all_reduce: the mean of i64[3] (mean takes f32 and f64; use sum)"),
            std::string::npos)
      << msg;
  msg = errorOf([&] { inferMeta(OpKind::all_reduce, {{DType::bf16, {3}}}, collective(2)); });
  EXPECT_NE(msg.find("bf16[3] cannot be reduced (takes f32, f64, i32, i64"), std::string::npos)
      << msg;
  msg = errorOf([&] { inferMeta(OpKind::reduce_scatter, {{DType::f16, {4}}}, collective(2)); });
  EXPECT_NE(msg.find("cannot be reduced"), std::string::npos) << msg;
  msg = errorOf([&] { inferMeta(OpKind::broadcast, {x}, collective(4, 0, 0, 4)); });
  EXPECT_NE(msg.find("broadcast: root 4 is not a rank of a world of 4"), std::string::npos) << msg;
  msg = errorOf([&] { inferMeta(OpKind::all_gather, {x}, collective(2, 2)); });
  EXPECT_NE(msg.find("all_gather: dim 2 is out of range for f32[5, 6]"), std::string::npos) << msg;
  msg = errorOf([&] { inferMeta(OpKind::all_gather, {{DType::f32, {}}}, collective(2, 0)); });
  EXPECT_NE(msg.find("dim 0 is out of range"), std::string::npos) << msg;
  msg = errorOf([&] { inferMeta(OpKind::all_reduce, {x}, collective(0)); });
  EXPECT_NE(msg.find("world size 0 (must be at least 1)"), std::string::npos) << msg;
  msg = errorOf([&] { inferMeta(OpKind::all_reduce, {x}, collective(2, 0, 7)); });
  EXPECT_NE(msg.find("reduce 7 is not sum (0), mean (1) or max (2)"), std::string::npos) << msg;
}

const char *kFourRanks = R"(graph() {
  %0 = input arg 0 : f32[8, 6]
  %1 = mul(%0, %0) : f32[8, 6]
  %2 = all_reduce(%1) reduce=mean world=4 : f32[8, 6]
  %3 = all_gather(%0) dim=1 world=4 : f32[8, 24]
  %4 = reduce_scatter(%1) dim=0 world=4 : f32[2, 6]
  %5 = broadcast(%0) root=3 world=4 : f32[8, 6]
  %6 = add(%2, %5) : f32[8, 6]
  return %6, %3, %4
}
)";

// The text of `g` with `from` replaced by `to` once.
std::string replaced(std::string text, const std::string &from, const std::string &to) {
  const size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at != std::string::npos) text.replace(at, from.size(), to);
  return text;
}

TEST(CollectiveOps, PrintParseAndHash) {
  const Graph g = parseGraph(kFourRanks);
  ASSERT_EQ(g.nodes.size(), 7u);
  EXPECT_EQ(g.nodes[2].attrs.reduce, 1);
  EXPECT_EQ(g.nodes[3].attrs.dim, 1);
  EXPECT_EQ(g.nodes[5].attrs.root, 3);
  EXPECT_EQ(g.nodes[4].attrs.world, 4);
  const std::string text = printGraph(g);
  EXPECT_NE(text.find("all_reduce(%1) reduce=mean world=4 : f32[8, 6]"), std::string::npos) << text;
  EXPECT_NE(text.find("broadcast(%0) root=3 world=4"), std::string::npos) << text;
  EXPECT_EQ(parseGraph(text), g);
  // the world size, the reduce op and the root are part of the hash (the compile keys)
  const GraphHash h = hashGraph(g);
  EXPECT_EQ(hashGraph(parseGraph(text)), h);
  const std::string two =
      replaced(replaced(replaced(replaced(text, "mean world=4", "mean world=2"),
                                 "dim=1 world=4 : f32[8, 24]", "dim=1 world=2 : f32[8, 12]"),
                        "dim=0 world=4 : f32[2, 6]", "dim=0 world=2 : f32[4, 6]"),
               "root=3 world=4", "root=1 world=2");
  EXPECT_NE(hashGraph(parseGraph(two)), h);
  EXPECT_NE(hashGraph(parseGraph(replaced(text, "reduce=mean", "reduce=max"))), h);
  EXPECT_NE(hashGraph(parseGraph(replaced(text, "root=3", "root=2"))), h);
  // a world of 1 against a world of 4: the one-rank graph differs only in `world` and shapes
  const Graph one = parseGraph(R"(graph() {
  %0 = input arg 0 : f32[8, 6]
  %1 = all_gather(%0) dim=0 world=1 : f32[8, 6]
  return %1
}
)");
  const Graph oneAs4 = parseGraph(R"(graph() {
  %0 = input arg 0 : f32[8, 6]
  %1 = all_gather(%0) dim=0 world=4 : f32[32, 6]
  return %1
}
)");
  EXPECT_NE(hashGraph(one), hashGraph(oneAs4));
}

TEST(CollectiveOps, ParserErrors) {
  std::string msg = errorOf([&] { parseGraph(replaced(kFourRanks, "reduce=mean", "reduce=min")); });
  EXPECT_NE(msg.find("expected reduce ('sum', 'mean' or 'max')"), std::string::npos) << msg;
  msg = errorOf([&] { parseGraph(replaced(kFourRanks, " root=3", "")); });
  EXPECT_NE(msg.find("expected attribute 'root' of op 'broadcast'"), std::string::npos) << msg;
  msg = errorOf([&] {
    parseGraph(replaced(kFourRanks, "dim=0 world=4 : f32[2, 6]", "dim=0 world=4 : f32[4, 6]"));
  });
  EXPECT_NE(msg.find("reduce_scatter"), std::string::npos) << msg;
}

CompileRequest requestOf(const Graph &g, Target target) {
  CompileRequest r;
  r.exec.target = target;
  GraphSample s;
  s.graph = g;
  for (int id : g.programInputs())
    s.strides.push_back(detail::contiguousStrides(concreteShape(g.nodes[id].shape)));
  r.samples.push_back(std::move(s));
  return r;
}

TEST(CollectiveOps, LowerToAStartAndAWaitStepEach) {
  CompileRequest r = requestOf(parseGraph(kFourRanks), Target::cpu);
  r.stop = CompileStop::program;
  const CompileResult res = compileGraph(r);
  const Program &p = res.program;
  int starts = 0, waits = 0;
  for (size_t i = 0; i < p.steps.size(); ++i) {
    const Step &s = p.steps[i];
    if (s.kind == Step::Kind::collective) {
      ++starts;
      EXPECT_EQ(p.buffers[p.values[s.result].buffer].kind, Buffer::Kind::dynamic);
    }
    if (s.kind == Step::Kind::wait) {
      ++waits;
      ASSERT_GE(s.kernel, 0);
      ASSERT_LT(static_cast<size_t>(s.kernel), i);
      const Step &start = p.steps[static_cast<size_t>(s.kernel)];
      EXPECT_EQ(start.kind, Step::Kind::collective);
      EXPECT_EQ(s.operands, (std::vector<int>{start.operands.at(0), start.result}));
    }
  }
  EXPECT_EQ(starts, 4) << printProgram(p);
  EXPECT_EQ(waits, 4) << printProgram(p);
  const std::string listing = printProgram(p);
  EXPECT_NE(listing.find("start all_gather"), std::string::npos) << listing;
  EXPECT_NE(listing.find("wait all_reduce"), std::string::npos) << listing;
  const std::string fusion = printFusionPlan(res.fusion, res.graphs.at(0));
  EXPECT_NE(fusion.find("collective reduce_scatter"), std::string::npos) << fusion;
}

TEST(CollectiveOps, TheCudaTargetRefusesThem) {
  CompileRequest r = requestOf(parseGraph(kFourRanks), Target::cuda);
  const std::string msg = errorOf([&] { compileGraph(r); });
  EXPECT_NE(msg.find("is a collective: the cuda target has none (NCCL is not built)"),
            std::string::npos)
      << msg;
}

} // namespace
} // namespace rcjit
