// Sizes that overflow int64 or cannot be allocated are Errors naming the op, never a wrong
// tensor or a write past an allocation (issue 18).
#include <gtest/gtest.h>

#include "tests/TestUtil.h"

#include <rcjit/rcjit.h>

using namespace rcjit;
using rcjit::test::errorOf;

namespace {

bool has(const std::string &s, const std::string &part) {
  return s.find(part) != std::string::npos;
}

TEST(SizeOverflow, FactoriesWhoseBytesOverflowAreErrors) {
  // Each used to allocate 64 bytes and then fill far past them.
  std::string e = errorOf([] { Tensor::zeros({int64_t{1} << 62}); });
  EXPECT_TRUE(
      has(e, "zeros: a f32 tensor of shape [4611686018427387904] needs about 1.84e+19 bytes"))
      << e;
  e = errorOf([] { Tensor::arange(int64_t{1} << 62); });
  EXPECT_TRUE(has(e, "arange: a i64 tensor of shape [4611686018427387904]")) << e;
  e = errorOf([] { Tensor::zeros({int64_t{1} << 61}, DType::f64); });
  EXPECT_TRUE(has(e, "zeros: a f64 tensor")) << e;
  e = errorOf([] { Tensor::empty({int64_t{1} << 62}); });
  EXPECT_TRUE(has(e, "empty: ")) << e;
  e = errorOf([] { Tensor::ones({int64_t{1} << 61}, DType::i64); });
  EXPECT_TRUE(has(e, "ones: ")) << e;
}

TEST(SizeOverflow, ElementCountsThatWrapAreErrorsNotEmptyTensors) {
  // 2^32 * 2^32 wrapped to 0 elements: a tensor that claimed that shape and held nothing.
  const Shape huge = {int64_t{1} << 32, int64_t{1} << 32};
  std::string e = errorOf([&] { Tensor::zeros(huge); });
  EXPECT_TRUE(has(e, "zeros: shape [4294967296, 4294967296] has about 1.84e+19 elements")) << e;
  // expand of one element to that shape summed 2^64 ones to 0.
  e = errorOf([&] { sum(expand(Tensor::ones({1, 1}), huge)); });
  EXPECT_TRUE(has(e, "expand: shape [4294967296, 4294967296]")) << e;
  e = errorOf([&] { reshape(Tensor::ones({4}), {int64_t{1} << 32, int64_t{1} << 32, 0, -1}); });
  EXPECT_TRUE(has(e, "reshape: target shape")) << e;
  e = errorOf([&] { Tensor::from_blob(&e, huge, DType::f32); });
  EXPECT_TRUE(has(e, "from_blob: shape [4294967296, 4294967296]")) << e;
  // A broadcast whose result overflows names the op.
  Tensor a = expand(Tensor::ones({1, 1}), {int64_t{1} << 31, 1});
  e = errorOf([&] { a + expand(Tensor::ones({1, 1}), {1, int64_t{1} << 33}); });
  EXPECT_TRUE(has(e, "add: ")) << e;
}

TEST(SizeOverflow, ExpandBelowTheLimitStillWorks) {
  // A large view that fits int64 is fine: it allocates nothing.
  Tensor big = expand(Tensor::ones({1, 1}), {int64_t{1} << 20, int64_t{1} << 20});
  EXPECT_EQ(big.numel(), int64_t{1} << 40);
  EXPECT_FLOAT_EQ(sum(slice(big, 0, 0, 2)).to_vector<float>().at(0), 2.0f * (1 << 20));
}

TEST(SizeOverflow, AllocationsTooBigToSatisfyNameOpShapeAndBytes) {
  // 2^61 bytes fits the size arithmetic but no address space: an Error, not a crash.
  std::string e = errorOf([] { Tensor::zeros({int64_t{1} << 59}); });
  EXPECT_TRUE(has(e, "zeros: cannot allocate a f32 tensor of shape [576460752303423488] "
                     "(2305843009213693952 bytes)"))
      << e;
  e = errorOf([] { expand(Tensor::ones({1}), {int64_t{1} << 59}) + Tensor::ones({1}); });
  EXPECT_TRUE(has(e, "add: cannot allocate a f32 tensor of shape [576460752303423488]")) << e;
}

} // namespace
