// Conformance under each portable CPU feature set (RCJIT_CPU_FEATURES): every op case
// compiled for x86-64-v2, AVX2 and (where this CPU has it) AVX-512, against eager.
#include <gtest/gtest.h>
#include <rcjit/rcjit.h>

#include <string>

#include "targets/cpu/CpuKernels.h"
#include "tests/conformance/Conformance.h"
#include "tests/conformance/OpCases.h"

namespace {

using namespace rcjit;
using namespace rcjit::conformance;

class ConformanceFeatureSets : public ::testing::TestWithParam<std::string> {};

// Each case in f32 and f64 (where it applies; the vector code paths differ most there) and
// in its first dtype otherwise.
TEST_P(ConformanceFeatureSets, CompiledMatchesEager) {
  const std::string set = GetParam();
  const std::string saved = cpu::cpuFeatures();
  try {
    cpu::setCpuFeatures(set);
  } catch (const Error &e) {
    GTEST_SKIP() << e.what(); // e.g. no AVX-512 on this CPU
  }
  for (const OpCase &c : cases()) {
    std::vector<DType> dtypes;
    for (DType d : c.dtypes) {
      if (d == DType::f32 || d == DType::f64) dtypes.push_back(d);
    }
    if (dtypes.empty()) dtypes.push_back(c.dtypes.at(0));
    for (DType dt : dtypes) {
      const std::string what = c.name + " in " + std::string(dtypeName(dt)) + " for " + set;
      std::vector<Tensor> a, b;
      const uint64_t seed = seedOf(c.name);
      for (size_t i = 0; i < c.ins.size(); ++i) {
        a.push_back(makeInput(c.ins[i], dt, seed + i));
        b.push_back(makeInput(c.ins[i], dt, seed + 1000 + i));
      }
      checkCompiledMatchesEager(what, c.fn, a, b, c.tolScale);
    }
  }
  cpu::setCpuFeatures(saved);
}

// The set is part of the code's identity: kernels compiled for one never serve another.
TEST(CpuFeatureSets, AreNamedCheckedAndKeyed) {
  const std::string saved = cpu::cpuFeatures(); // RCJIT_CPU_FEATURES may have chosen a set
  const std::string savedId = cpu::hostCodegenId();
  cpu::setCpuFeatures("native");
  const std::string native = cpu::hostCodegenId();
  cpu::setCpuFeatures("x86-64-v3"); // the alias of avx2
  EXPECT_EQ(cpu::cpuFeatures(), "avx2");
  const std::string avx2 = cpu::hostCodegenId();
  EXPECT_NE(avx2, native);
  EXPECT_NE(avx2.find("cpu x86-64-v3;"), std::string::npos) << avx2;
  cpu::setCpuFeatures("x86-64-v2");
  EXPECT_NE(cpu::hostCodegenId(), avx2);
  try {
    cpu::setCpuFeatures("sse9");
    ADD_FAILURE() << "accepted an unknown set";
  } catch (const Error &e) {
    EXPECT_NE(std::string(e.what()).find("unknown CPU feature set 'sse9' (expected native, "
                                         "x86-64-v2, avx2 or avx512"),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(cpu::cpuFeatures(), "x86-64-v2"); // unchanged by the refused name
  cpu::setCpuFeatures(saved);
  EXPECT_EQ(cpu::hostCodegenId(), savedId);
}

INSTANTIATE_TEST_SUITE_P(Portable, ConformanceFeatureSets,
                         ::testing::Values("x86-64-v2", "avx2", "avx512"),
                         [](const ::testing::TestParamInfo<std::string> &i) {
                           std::string n = i.param;
                           for (char &ch : n) ch = ch == '-' ? '_' : ch;
                           return n;
                         });

} // namespace
