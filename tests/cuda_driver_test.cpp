// The CUDA driver loader without a GPU: why CUDA is unavailable, result descriptions, and
// the arch / PTX ISA tables. (What needs a driver and a device is in the Gpu* suites.)
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include <rcjit/rcjit.h>

#include "targets/cuda/CudaDriver.h"
#include "tests/TestUtil.h"

namespace {

using namespace rcjit;
using rcjit::test::errorOf;

bool startsWith(const std::string &s, const std::string &prefix) { return s.rfind(prefix, 0) == 0; }

using rcjit::test::ScopedEnv;

TEST(CudaDriver, UnavailableIsAReasonNotACrash) {
  if (cuda_available()) GTEST_SKIP() << "this machine has a CUDA device";
  const std::string &why = cuda::unavailableReason();
  ASSERT_FALSE(why.empty());
  if (void *lib = dlopen(cuda::driverLibraryName().c_str(), RTLD_NOW | RTLD_LOCAL)) {
    dlclose(lib); // a driver without a usable device
  } else {
    EXPECT_TRUE(startsWith(why, cuda::driverLibraryName() + " not found: ")) << why;
  }
  EXPECT_EQ(cuda::driver(), nullptr);
  EXPECT_EQ(errorOf([] { cuda::requireCuda(); }), "CUDA is not available: " + why);
  EXPECT_NE(errorOf([] { cuda::deviceInfo(0); }).find(why), std::string::npos);
  CompileOptions o;
  o.target = Target::cuda;
  EXPECT_EQ(errorOf([&] { compile([](const Tensor &x) { return x; }, o); }),
            "compile: Target::cuda needs an NVIDIA GPU: " + why);
}

TEST(CudaDriver, CheckNamesTheCallAndTheResult) {
  EXPECT_NO_THROW(cuda::check(CUDA_SUCCESS, "cuInit"));
  std::string e = errorOf([] { cuda::check(CUDA_ERROR_OUT_OF_MEMORY, "cuMemAlloc(64 MiB)"); });
  EXPECT_TRUE(startsWith(e, "cuMemAlloc(64 MiB): ")) << e;
  if (cuda::driver()) {
    EXPECT_NE(e.find("CUDA_ERROR_OUT_OF_MEMORY"), std::string::npos) << e;
  }
}

TEST(CudaDriver, ProbeSaysWhy) {
  cuda::DriverLoad missing = cuda::probeDriver("/nonexistent/libcuda.so.1");
  EXPECT_TRUE(startsWith(missing.reason, "/nonexistent/libcuda.so.1 not found: "))
      << missing.reason;
  EXPECT_NE(missing.reason.find("No such file"), std::string::npos) << missing.reason;
  EXPECT_EQ(cuda::describeResult(nullptr, CUDA_ERROR_OUT_OF_MEMORY), "CUresult 2");
}

TEST(CudaDriver, ArchAndPtxIsaOfDrivers) {
  EXPECT_EQ(cuda::archName(8, 6), "sm_86");
  EXPECT_EQ(cuda::archName(9, 0), "sm_90");
  EXPECT_EQ(cuda::driverPtxIsa(11080), 78);
  EXPECT_EQ(cuda::driverPtxIsa(12040), 84);
  EXPECT_EQ(cuda::driverPtxIsa(12060), 85);
  EXPECT_EQ(cuda::driverPtxIsa(12080), 87);
  EXPECT_EQ(cuda::driverPtxIsa(13000), 90);
  EXPECT_EQ(cuda::driverPtxIsa(8000), 0);
}

} // namespace
