// GPU tests: suites named Gpu* derive from GpuTest, carry the CTest label `gpu`
// (tests/CMakeLists.txt) and skip themselves where no CUDA device can be used.
#pragma once
#include <gtest/gtest.h>

#include <rcjit/rcjit.h>

#include "targets/cuda/CudaDriver.h"

namespace rcjit::test {

/// Base fixture of every GPU test. Name the derived suite `Gpu...` so the label applies.
class GpuTest : public ::testing::Test {
protected:
  void SetUp() override {
    if (!cuda_available()) GTEST_SKIP() << "no CUDA GPU: " << cuda::unavailableReason();
  }
};

} // namespace rcjit::test
