// Conformance on random programs: a seeded generator builds a DAG of elementwise, broadcast,
// reduction and shape ops over 1-3 inputs, which runs compiled (full mode, CPU) and eagerly
// in several dtypes, and under dynamic shapes with its inputs resized. A mismatch prints the
// seed and the whole op list.
#include <gtest/gtest.h>
#include <rcjit/rcjit.h>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "tests/conformance/Conformance.h"
#include "tests/conformance/RandomDag.h"

namespace {

using namespace rcjit;
using namespace rcjit::conformance;

struct DagParam {
  uint64_t seed;
  DType dtype;
};

void PrintTo(const DagParam &p, std::ostream *os) {
  *os << "seed " << p.seed << " in " << dtypeName(p.dtype);
}

// Seeds 10, 19 and 29 reduce over dims of size 1 or stride 0 (expand), which compiled code
// once rejected (fixed in ef0414a; the minimal cases are in OpCases.h: reductions_0dim,
// reductions_size1_dim, reductions_over_expanded_dim).
std::vector<DagParam> dagParams() {
  std::vector<DagParam> ps;
  for (uint64_t s = 1; s <= 32; ++s) ps.push_back({s, DType::f32});
  for (uint64_t s = 1; s <= 12; ++s) ps.push_back({s, DType::f64});
  for (uint64_t s = 1; s <= 10; ++s) ps.push_back({s, DType::bf16});
  for (uint64_t s = 11; s <= 18; ++s) ps.push_back({s, DType::f16});
  return ps;
}

std::string dagParamName(const ::testing::TestParamInfo<DagParam> &info) {
  return "seed" + std::to_string(info.param.seed) + "_" + std::string(dtypeName(info.param.dtype));
}

class RandomDagCompiled : public ::testing::TestWithParam<DagParam> {};

TEST_P(RandomDagCompiled, MatchesEager) {
  const DagParam p = GetParam();
  Dag d;
  try {
    d = generate(p.seed);
  } catch (const std::exception &e) {
    FAIL() << "generating DAG seed " << p.seed
           << " threw (eager bug or generator bug): " << e.what();
  }
  std::vector<Tensor> a = makeInputs(d, p.dtype, 7), b = makeInputs(d, p.dtype, 9);
  // f16/bf16: every op of a long chain may round at other points than eager does
  const double scale = p.dtype == DType::f16 || p.dtype == DType::bf16 ? 3 : 1;
  const bool failedBefore = HasFailure();
  checkCompiledMatchesEager(
      "random DAG seed " + std::to_string(p.seed) + " in " + std::string(dtypeName(p.dtype)),
      [&d](const std::vector<Tensor> &v) { return run(d, v); }, a, b, scale);
  if (HasFailure() && !failedBefore) ADD_FAILURE() << d.str();
}

INSTANTIATE_TEST_SUITE_P(RandomDag, RandomDagCompiled, ::testing::ValuesIn(dagParams()),
                         dagParamName);

// Dynamic shapes: DAGs without reshape or expand (whose sizes are fixed in the op) are
// called with their generated inputs, then with every dim larger than 1 resized (aligned
// from the right, so broadcasting still holds; distinct new sizes), then the first inputs
// again, compiled under Dynamic::automatic and Dynamic::always, against eager each time.
// Sizes that were equal share a symbol (duck sizing, as in PyTorch), so a set that splits
// them recompiles once: at most 2 compiles under always, 3 under automatic (the first call
// is static there), and no eager fallback.
bool resizable(const Dag &d) {
  return std::none_of(d.steps.begin(), d.steps.end(),
                      [](const Step &st) { return st.op == Op::reshape || st.op == Op::expand; });
}

std::vector<Shape> resizedInputs(const Dag &d, const std::vector<int64_t> &sizes) {
  std::vector<Shape> out = d.inputs;
  for (Shape &s : out) {
    for (size_t i = 1; i <= s.size(); ++i) {
      int64_t &x = s[s.size() - i];
      if (x > 1) x = sizes[i - 1];
    }
  }
  return out;
}

struct DynamicDagParam {
  uint64_t seed;
  Dynamic dynamic;
};

void PrintTo(const DynamicDagParam &p, std::ostream *os) {
  *os << "seed " << p.seed << (p.dynamic == Dynamic::always ? ", always" : ", automatic");
}

std::vector<DynamicDagParam> dynamicDagParams() {
  std::vector<DynamicDagParam> ps;
  for (uint64_t s = 1; ps.size() < 48; ++s) {
    if (!resizable(generate(s))) continue;
    ps.push_back({s, Dynamic::automatic});
    ps.push_back({s, Dynamic::always});
  }
  return ps;
}

std::string dynamicDagName(const ::testing::TestParamInfo<DynamicDagParam> &info) {
  return "seed" + std::to_string(info.param.seed) +
         (info.param.dynamic == Dynamic::always ? "_always" : "_automatic");
}

class RandomDagDynamic : public ::testing::TestWithParam<DynamicDagParam> {};

TEST_P(RandomDagDynamic, ResizedInputsMatchEager) {
  const DynamicDagParam p = GetParam();
  const Dag d = generate(p.seed);
  const std::vector<std::vector<Shape>> sets = {d.inputs, resizedInputs(d, {7, 3, 5, 2}),
                                                resizedInputs(d, {2, 9, 4, 3}),
                                                resizedInputs(d, {11, 2, 3, 6}), d.inputs};
  auto fn = [&d](const std::vector<Tensor> &v) { return run(d, v); };
  auto cf = compile(fn, CompileOptions{.dynamic = p.dynamic});
  for (size_t k = 0; k < sets.size(); ++k) {
    std::vector<Tensor> in;
    for (size_t i = 0; i < sets[k].size(); ++i) {
      in.push_back(makeInput(In{sets[k][i]}, DType::f32, d.seed * 131 + i + 17 * k));
    }
    SCOPED_TRACE("call " + std::to_string(k) + " | inputs: " + describe(in) + "\n" + d.str());
    const std::vector<Tensor> want = fn(in);
    std::vector<Tensor> got;
    try {
      got = cf(in);
    } catch (const std::exception &e) {
      FAIL() << "the compiled call threw: " << e.what();
    }
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_TRUE(sameResult(got[i], want[i], 1)) << "output #" << i;
    }
    if (k == 1) {
      EXPECT_TRUE(waitForBackgroundCompiles(600)); // the later calls on the optimized tier
    }
  }
  const CompileStats st = cf.stats();
  EXPECT_LE(st.compiles, p.dynamic == Dynamic::always ? 2 : 3) << cf.explain();
  EXPECT_EQ(st.fallbacks, 0);
}

INSTANTIATE_TEST_SUITE_P(RandomDag, RandomDagDynamic, ::testing::ValuesIn(dynamicDagParams()),
                         dynamicDagName);

TEST(RandomDagGenerator, IsDeterministicAndCoversTheOpSet) {
  std::vector<int> seen(static_cast<size_t>(Op::expand) + 1, 0);
  for (uint64_t s = 1; s <= 32; ++s) {
    const Dag d = generate(s);
    EXPECT_EQ(d.str(), generate(s).str());
    EXPECT_GE(d.steps.size(), 5u);
    for (const Step &st : d.steps) ++seen[static_cast<size_t>(st.op)];
  }
  int kinds = 0;
  for (int n : seen) kinds += n > 0;
  EXPECT_GE(kinds, 35) << "the 32 seeds should exercise most of the op set";
}

} // namespace
