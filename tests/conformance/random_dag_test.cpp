// Conformance on random programs: a seeded generator builds a DAG of elementwise, broadcast,
// reduction and shape ops over 1-3 inputs, which runs compiled (full mode, CPU) and eagerly
// in several dtypes. A mismatch prints the seed and the whole op list.
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
