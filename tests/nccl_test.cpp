// NCCL for dist's collectives on cuda tensors: loading libnccl.so.2 at run time (a missing or
// wrong library is a reason naming it), why a device cannot use it here, and, on a GPU, the
// collectives of a world of 1 through NCCL.
#include <gtest/gtest.h>

#include <filesystem>

#include <rcjit/rcjit.h>

#include "dist/DeviceCollectives.h"
#include "targets/cuda/CudaNccl.h"
#include "tests/GpuTest.h"
#include "tests/TestUtil.h"

using namespace rcjit;

namespace {

TEST(Nccl, AMissingLibraryIsAReasonNamingIt) {
  cuda::NcclLoad l = cuda::probeNccl("libnccl-none.so.2");
  EXPECT_EQ(l.handle, nullptr);
  EXPECT_NE(l.reason.find("libnccl-none.so.2 not found"), std::string::npos) << l.reason;
  EXPECT_EQ(l.api.allReduce, nullptr);
}

TEST(Nccl, ALibraryThatIsNotNcclListsTheMissingEntryPoints) {
  cuda::NcclLoad l = cuda::probeNccl("libm.so.6");
  EXPECT_NE(l.reason.find("libm.so.6: missing entry points ncclGetVersion, ncclGetUniqueId"),
            std::string::npos)
      << l.reason;
  EXPECT_NE(l.reason.find("ncclAllReduce"), std::string::npos) << l.reason;
  EXPECT_EQ(l.api.getVersion, nullptr) << "no half-resolved API";
}

// A real libnccl.so.2 (the CUDA toolkit's or the system's, where installed) resolves every
// entry point rcjit declares and reports a version; no GPU needed.
TEST(Nccl, ARealLibraryResolvesEveryEntryPoint) {
  std::string lib;
  for (const char *p : {RCJIT_CUDA_ROOT "/lib/libnccl.so.2", RCJIT_CUDA_ROOT "/lib64/libnccl.so.2",
                        "/usr/lib/x86_64-linux-gnu/libnccl.so.2"}) {
    if (std::filesystem::exists(p)) lib = p;
  }
  if (lib.empty()) GTEST_SKIP() << "no libnccl.so.2 installed here";
  cuda::NcclLoad l = cuda::probeNccl(lib);
  EXPECT_TRUE(l.reason.empty()) << l.reason;
  EXPECT_GE(l.version, 21000) << "ncclAvg (the mean) needs NCCL 2.10";
}

TEST(Nccl, TheHookIsInstalledAndNamesWhyADeviceCannotBeUsed) {
  const dist::detail::DeviceCollectives *d = dist::detail::deviceCollectives();
  ASSERT_NE(d, nullptr) << "targets/cuda installs it when librcjit.so loads";
  const std::string why = d->unavailable(Device::cuda(0));
  if (!cuda_available()) {
    EXPECT_NE(why.find("CUDA is not available: " + cuda::unavailableReason()), std::string::npos)
        << why;
  } else if (!cuda::nccl()) {
    EXPECT_NE(why.find("NCCL is not available: " + cuda::ncclUnavailableReason()),
              std::string::npos)
        << why;
    EXPECT_NE(why.find(cuda::ncclLibraryName()), std::string::npos) << why;
  } else {
    EXPECT_EQ(why, "");
    EXPECT_NE(d->unavailable(Device::cuda(4096)).find("cuda:4096"), std::string::npos);
  }
  EXPECT_EQ(dist::detail::deviceUnavailable(Tensor::zeros({2})), "") << "CPU tensors use MPI";
}

// dist's collectives on cuda tensors, a world of 1 (no launcher): through NCCL, or, where
// NCCL is missing, an Error naming the library.
class GpuNccl : public test::GpuTest {};

TEST_F(GpuNccl, WorldOfOneCollectivesRunThroughNccl) {
  Tensor x = Tensor::from_vector(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3}).to(Device::cuda());
  if (!cuda::nccl()) {
    std::string e = test::errorOf([&] { dist::all_reduce(x); });
    EXPECT_NE(e.find("NCCL"), std::string::npos) << e;
    EXPECT_NE(e.find(cuda::ncclLibraryName()), std::string::npos) << e;
    GTEST_SKIP() << "NCCL is not available: " << cuda::ncclUnavailableReason();
  }
  ASSERT_EQ(dist::world_size(), 1);
  const std::vector<float> want = {1, 2, 3, 4, 5, 6};
  Tensor y = x;
  dist::all_reduce(y, dist::ReduceOp::sum);
  EXPECT_TRUE(y.device().is_cuda());
  EXPECT_EQ(y.to_vector<float>(), want);
  dist::all_reduce(y, dist::ReduceOp::mean);
  EXPECT_EQ(y.to_vector<float>(), want);
  dist::all_reduce(y, dist::ReduceOp::max);
  EXPECT_EQ(y.to_vector<float>(), want);
  Tensor g = dist::all_gather(x, 1);
  EXPECT_EQ(g.shape(), (Shape{2, 3}));
  EXPECT_EQ(g.to_vector<float>(), want);
  Tensor r = dist::reduce_scatter(x, 0);
  EXPECT_EQ(r.to_vector<float>(), want);
  Tensor b = transpose(x, 0, 1); // not contiguous: copied, then written back
  dist::broadcast(b, 0);
  EXPECT_EQ(b.to_vector<float>(), transpose(x, 0, 1).to_vector<float>());
  Tensor i = Tensor::from_vector(std::vector<int64_t>{7, -8}, {2}).to(Device::cuda());
  dist::Work w = dist::all_reduce_async(i);
  EXPECT_EQ(w.wait().to_vector<int64_t>(), (std::vector<int64_t>{7, -8}));
  // dtypes: the same rules as MPI's
  Tensor h = x.to(DType::bf16);
  std::string e = test::errorOf([&] { dist::all_reduce(h); });
  EXPECT_NE(e.find("bf16 cannot be reduced"), std::string::npos) << e;
}

} // namespace
