// Helpers of the autograd and training tests: exact f64 tensors, leaves, value checks.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <utility>
#include <vector>

#include <rcjit/rcjit.h>

namespace rcjit::test {

/// An f64 tensor holding exactly `v` (no float rounding on the way).
inline Tensor f64(std::vector<double> v, Shape shape) {
  return Tensor::from_blob(v.data(), std::move(shape), DType::f64).clone();
}

/// f64(v, shape) as a leaf that requires grad.
inline Tensor leaf(const std::vector<double> &v, Shape shape) {
  Tensor t = f64(v, std::move(shape));
  t.requires_grad_();
  return t;
}

/// Every element of t equals want within tol * (1 + |want|).
inline void expectValues(const Tensor &t, const std::vector<double> &want, double tol = 1e-9) {
  ASSERT_TRUE(t.defined());
  std::vector<double> got = t.to_vector<double>();
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_NEAR(got[i], want[i], tol * (1 + std::abs(want[i]))) << "element " << i;
  }
}

} // namespace rcjit::test
