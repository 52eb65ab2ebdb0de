// The op table's promises: every op has a conformance case and a shape rule.
// Also: the lists generated from Ops.def (per-category case labels, opsOfCategory) agree
// with the table.
#include <gtest/gtest.h>
#include <rcjit/rcjit.h>

#include <map>
#include <set>
#include <string>
#include <vector>

#include "tests/conformance/Conformance.h"
#include "tests/conformance/OpCases.h"
#include "tracer/OpCases.h"
#include "tracer/ShapeInference.h"
#include "tracer/Tracer.h"

namespace {

using namespace rcjit;
using namespace rcjit::conformance;

// Ops that no conformance case can hold on its own, and why. Keep it short.
const std::map<OpKind, std::string> kNoConformanceCase = {
    {OpKind::input, "the arguments of every case: not an op a user calls"},
    {OpKind::linear_ce_pick_backward,
     "linear_ce_pick's gradient: fused_linear_ce_test compares it with the unfused gradients"},
    // the collectives need an MPI job: tests/mpi/compiled_collectives_test.cpp traces and
    // compiles each against the eager rcjit::dist result on 1, 2 and 4 ranks, and
    // tests/collective_ops_test.cpp checks their shape rules, text form and hash here
    {OpKind::all_reduce, "a collective: needs an MPI job (tests/mpi)"},
    {OpKind::all_gather, "a collective: needs an MPI job (tests/mpi)"},
    {OpKind::reduce_scatter, "a collective: needs an MPI job (tests/mpi)"},
    {OpKind::broadcast, "a collective: needs an MPI job (tests/mpi)"},
};

// Every conformance case traced once, in its first dtype: the graphs coverage is read from.
const std::vector<Trace> &tracedCases() {
  static const std::vector<Trace> traces = [] {
    std::vector<Trace> t;
    for (const OpCase &c : cases()) {
      std::vector<Tensor> in;
      for (size_t i = 0; i < c.ins.size(); ++i) {
        in.push_back(makeInput(c.ins[i], c.dtypes.at(0), seedOf(c.name) + i));
      }
      t.push_back(traceFunction(c.fn, in));
    }
    return t;
  }();
  return traces;
}

// The conformance cases whose traced graph holds `op`.
std::vector<std::string> casesWith(OpKind op) {
  std::vector<std::string> names;
  for (size_t i = 0; i < tracedCases().size(); ++i) {
    for (const Node &n : tracedCases()[i].graph.nodes) {
      if (n.op == op) {
        names.push_back(cases()[i].name);
        break;
      }
    }
  }
  return names;
}

TEST(OpTable, EveryOpHasAConformanceCase) {
  for (OpKind op : allOps()) {
    if (kNoConformanceCase.count(op)) continue;
    EXPECT_FALSE(casesWith(op).empty())
        << "op '" << opName(op) << "' has no conformance case: add one to "
        << "tests/conformance/OpCases.h calling its public function (CONTRIBUTING.md, "
        << "\"Adding an op\")";
  }
}

// Re-infers every traced node from its inputs' metas: each op has a rule, and the rule
// gives what the trace recorded. Source ops have no inputs (their caller gives the shape),
// and a cast's result dtype is the node's own.
TEST(OpTable, EveryOpHasShapeInference) {
  std::set<OpKind> checked;
  for (const Trace &t : tracedCases()) {
    const Graph &g = t.graph;
    for (const Node &n : g.nodes) {
      if (opInfo(n.op).category == OpCategory::Source) continue;
      std::vector<TensorMeta> in;
      for (int i : n.inputs) in.push_back({g.nodes[i].dtype, concreteShape(g.nodes[i].shape)});
      TensorMeta m;
      ASSERT_NO_THROW(m = inferMeta(n.op, in, n.attrs)) << opName(n.op);
      if (n.op == OpKind::cast) m.dtype = n.dtype;
      EXPECT_EQ(m.dtype, n.dtype) << opName(n.op);
      EXPECT_EQ(m.shape, concreteShape(n.shape)) << opName(n.op);
      checked.insert(n.op);
    }
  }
  for (OpKind op : allOps()) {
    if (opInfo(op).category == OpCategory::Source || kNoConformanceCase.count(op)) continue;
    EXPECT_TRUE(checked.count(op)) << "no traced node of op '" << opName(op) << "'";
  }
}

TEST(OpTable, OpsOfCategoryPartitionTheTable) {
  std::vector<OpKind> seen;
  for (int c = 0; c <= static_cast<int>(OpCategory::Collective); ++c) {
    const auto cat = static_cast<OpCategory>(c);
    EXPECT_FALSE(opsOfCategory(cat).empty()) << categoryName(cat);
    for (OpKind op : opsOfCategory(cat)) {
      EXPECT_EQ(opInfo(op).category, cat) << opName(op);
      if (!seen.empty() && opInfo(seen.back()).category == cat) {
        EXPECT_LT(seen.back(), op) << "table order";
      }
      seen.push_back(op);
    }
  }
  EXPECT_EQ(seen.size(), static_cast<size_t>(kNumOps));
  EXPECT_EQ(std::set<OpKind>(seen.begin(), seen.end()).size(), static_cast<size_t>(kNumOps));
  ASSERT_EQ(allOps().size(), static_cast<size_t>(kNumOps));
  for (int i = 0; i < kNumOps; ++i) EXPECT_EQ(allOps()[i], static_cast<OpKind>(i));
}

// Whether `op` is among the generated case labels of category `cat` (a test-only switch: the
// `default:` is what is being measured).
#define RCJIT_IN_CASES(cat)                                                                        \
  [](OpKind op) {                                                                                  \
    switch (op) {                                                                                  \
      RCJIT_OP_CASES(cat)                                                                          \
      return true;                                                                                 \
    default:                                                                                       \
      return false;                                                                                \
    }                                                                                              \
  }

TEST(OpTable, GeneratedCaseListsMatchTheTable) {
  using InCases = bool (*)(OpKind);
  const std::map<OpCategory, InCases> lists = {
      {OpCategory::Source, RCJIT_IN_CASES(Source)},
      {OpCategory::Unary, RCJIT_IN_CASES(Unary)},
      {OpCategory::Binary, RCJIT_IN_CASES(Binary)},
      {OpCategory::Compare, RCJIT_IN_CASES(Compare)},
      {OpCategory::Where, RCJIT_IN_CASES(Where)},
      {OpCategory::Reduce, RCJIT_IN_CASES(Reduce)},
      {OpCategory::Normalize, RCJIT_IN_CASES(Normalize)},
      {OpCategory::Matmul, RCJIT_IN_CASES(Matmul)},
      {OpCategory::Nn, RCJIT_IN_CASES(Nn)},
      {OpCategory::View, RCJIT_IN_CASES(View)},
      {OpCategory::Copy, RCJIT_IN_CASES(Copy)},
      {OpCategory::Collective, RCJIT_IN_CASES(Collective)},
  };
  EXPECT_EQ(static_cast<int>(lists.size()), RCJIT_OP_TABLE_CATEGORIES);
  for (const auto &[cat, inCases] : lists) {
    for (OpKind op : allOps()) {
      EXPECT_EQ(inCases(op), opInfo(op).category == cat)
          << opName(op) << " in the generated list of " << categoryName(cat);
    }
  }
}

// The props column: which ops are float-only and oneDNN post-ops (the lists it replaced in
// shape inference, loop codegen, fusion and the library step), and the case lists made from it.
TEST(OpTable, PropsColumnAndItsCaseListsAgree) {
  auto with = [](OpProp prop) {
    std::set<std::string> names;
    for (OpKind op : allOps()) {
      if (opHas(op, prop)) names.insert(std::string(opName(op)));
    }
    return names;
  };
  EXPECT_EQ(with(kFloatOnly),
            (std::set<std::string>{"exp", "log", "sqrt", "rsqrt", "reciprocal", "tanh", "sigmoid",
                                   "gelu", "silu", "erf", "sin", "cos"}));
  EXPECT_EQ(with(kPostOp), (std::set<std::string>{"relu", "sigmoid", "tanh", "gelu", "silu", "exp",
                                                  "abs", "sqrt", "log"}));
  for (OpKind op : allOps()) {
    bool floatOnly = false, postOp = false;
    switch (op) {
      RCJIT_OP_CASES_WITH(kFloatOnly)
      floatOnly = true;
      break;
      RCJIT_OP_CASES_WITHOUT(kFloatOnly)
      break;
    }
    switch (op) {
      RCJIT_OP_CASES_WITH(kPostOp)
      postOp = true;
      break;
      RCJIT_OP_CASES_WITHOUT(kPostOp)
      break;
    }
    EXPECT_EQ(floatOnly, opHas(op, kFloatOnly)) << opName(op);
    EXPECT_EQ(postOp, opHas(op, kPostOp)) << opName(op);
  }
}

} // namespace
