// Conformance: every public op, wrapped in a small function, compiled (full mode, CPU) and
// compared with the eager target in every dtype the op applies to, over broadcasting,
// non-contiguous and 0-dim inputs, and op chains that fuse. One table, one TEST_P.
#include <gtest/gtest.h>
#include <rcjit/rcjit.h>

#include <set>
#include <string>
#include <vector>

#include "tests/conformance/Conformance.h"
#include "tests/conformance/OpCases.h"

namespace {

using namespace rcjit;
using namespace rcjit::conformance;

struct Param {
  size_t index;
  DType dtype;
};

void PrintTo(const Param &p, std::ostream *os);

std::vector<Param> params() {
  std::vector<Param> ps;
  for (size_t i = 0; i < cases().size(); ++i) {
    for (DType d : cases()[i].dtypes) ps.push_back({i, d});
  }
  return ps;
}

std::string paramName(const ::testing::TestParamInfo<Param> &info) {
  return cases()[info.param.index].name + "_" + std::string(dtypeName(info.param.dtype));
}

void PrintTo(const Param &p, std::ostream *os) {
  *os << cases()[p.index].name << " in " << dtypeName(p.dtype);
}

class ConformanceOps : public ::testing::TestWithParam<Param> {};

TEST_P(ConformanceOps, CompiledMatchesEager) {
  const OpCase &c = cases()[GetParam().index];
  const DType dt = GetParam().dtype;
  const std::string what = c.name + " in " + std::string(dtypeName(dt));
  std::vector<Tensor> a, b;
  const uint64_t seed = seedOf(c.name);
  for (size_t i = 0; i < c.ins.size(); ++i) {
    a.push_back(makeInput(c.ins[i], dt, seed + i));
    b.push_back(makeInput(c.ins[i], dt, seed + 1000 + i));
  }
  checkCompiledMatchesEager(what, c.fn, a, b, c.tolScale);
}

INSTANTIATE_TEST_SUITE_P(Conformance, ConformanceOps, ::testing::ValuesIn(params()), paramName);

TEST(ConformanceHarness, DetectsMismatches) {
  const Tensor a = Tensor::from_vector(std::vector<float>{1, 2, 3}, Shape{3});
  EXPECT_TRUE(sameResult(a, a.clone(), 1));
  EXPECT_TRUE(sameResult(a + 1e-6, a, 1));
  EXPECT_FALSE(sameResult(a + 1e-3, a, 1));                            // beyond the f32 tolerance
  EXPECT_FALSE(sameResult(a.to(DType::f64), a, 1));                    // dtype differs
  EXPECT_FALSE(sameResult(a.reshape({3, 1}), a, 1));                   // shape differs
  EXPECT_FALSE(sameResult(a.to(DType::i64) + 1, a.to(DType::i64), 1)); // integers: exact
  EXPECT_TRUE(sameResult(log(a - 5.0), log(a - 5.0), 1));              // NaN where NaN
  // layouts keep the values
  const In in{{3, 4}};
  for (Layout l : kLayouts) {
    In s = in;
    s.layout = l;
    const Tensor t = makeInput(s, DType::f32, 5);
    EXPECT_EQ(t.shape(), Shape({3, 4}));
    EXPECT_FALSE(t.is_contiguous()) << layoutName(l);
  }
}

TEST(ConformanceTable, NamesAreUnique) {
  std::set<std::string> seen;
  for (const Param &p : params()) {
    const std::string n = cases()[p.index].name + "_" + std::string(dtypeName(p.dtype));
    EXPECT_TRUE(seen.insert(n).second) << n;
  }
}

} // namespace
