// cuBLAS loaded with dlopen, and row-major GEMMs planned onto its column-major API: loading
// and planning need no GPU (planGemm's arguments run on a host model of cuBLAS); the Gpu*
// suite runs the same plans on a device.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include <rcjit/rcjit.h>

#include "targets/cuda/Cublas.h"
#include "targets/cuda/CudaDriver.h"
#include "tests/GpuTest.h"
#include "tests/TestUtil.h"

namespace {

using namespace rcjit;
using namespace rcjit::cuda;
using rcjit::test::errorOf;

bool startsWith(const std::string &s, const std::string &prefix) { return s.rfind(prefix, 0) == 0; }
bool contains(const std::string &s, const std::string &part) {
  return s.find(part) != std::string::npos;
}

using rcjit::test::ScopedEnv;

const std::string kToolkitCublas = std::string(RCJIT_CUDA_ROOT) + "/lib64/libcublas.so";

// ---------------------------------------------------------------------------------------
// Loading

TEST(CublasLoad, TheToolkitsLibraryResolvesEveryEntryPoint) {
  if (!std::filesystem::exists(kToolkitCublas)) {
    GTEST_SKIP() << "the CUDA toolkit has no libcublas: " << kToolkitCublas << " does not exist";
  }
  const CublasLoad l = probeCublas(kToolkitCublas);
  ASSERT_EQ(l.reason, "");
  EXPECT_EQ(l.library, kToolkitCublas);
  EXPECT_NE(l.handle, nullptr);
  const CublasApi &a = l.api;
  EXPECT_NE(a.create, nullptr);
  EXPECT_NE(a.destroy, nullptr);
  EXPECT_NE(a.setStream, nullptr);
  EXPECT_NE(a.setMathMode, nullptr);
  EXPECT_NE(a.setWorkspace, nullptr);
  EXPECT_NE(a.gemmStridedBatchedEx, nullptr);
  EXPECT_NE(a.gemmEx, nullptr);
  EXPECT_NE(a.getStatusName, nullptr);
  EXPECT_NE(a.getStatusString, nullptr);
  EXPECT_NE(a.getVersion, nullptr);
  EXPECT_NE(a.getProperty, nullptr);
  EXPECT_EQ(l.version / 10000, CUBLAS_VER_MAJOR) << l.version; // the header of the same toolkit
  EXPECT_STREQ(a.getStatusName(CUBLAS_STATUS_INVALID_VALUE), "CUBLAS_STATUS_INVALID_VALUE");

  // The process-wide cuBLAS: found without $RCJIT_CUBLAS, where the toolkit has one.
  if (std::getenv("RCJIT_CUBLAS")) return;
  ASSERT_NE(cublas(), nullptr) << cublasUnavailableReason();
  EXPECT_EQ(cublasUnavailableReason(), "");
  EXPECT_EQ(&requireCublas(), cublas());
  EXPECT_GE(cublasVersion(), 110000);
}

TEST(CublasLoad, AMissingLibraryIsNamed) {
  const CublasLoad l = probeCublas("/nonexistent/libcublas.so.13");
  EXPECT_TRUE(startsWith(l.reason, "/nonexistent/libcublas.so.13 not found: ")) << l.reason;
  EXPECT_TRUE(contains(l.reason, "No such file")) << l.reason;
  EXPECT_EQ(l.handle, nullptr);
  EXPECT_EQ(l.api.create, nullptr);
}

TEST(CublasLoad, ALibraryWithoutCublasNamesTheMissingEntryPoints) {
  const CublasLoad l = probeCublas("libm.so.6");
  EXPECT_TRUE(startsWith(l.reason, "libm.so.6: missing entry points cublasCreate_v2, "
                                   "cublasDestroy_v2, "))
      << l.reason;
  EXPECT_TRUE(contains(l.reason, "cublasGemmStridedBatchedEx")) << l.reason;
  EXPECT_TRUE(contains(l.reason, "cublasGetProperty (not cuBLAS")) << l.reason;
  EXPECT_EQ(l.api.create, nullptr);
  EXPECT_EQ(l.api.gemmStridedBatchedEx, nullptr);
}

TEST(CublasLoad, EnvironmentNamesTheLibraryAndTheProcessKeepsItsFirstAnswer) {
  const CublasApi *before = cublas(); // the process-wide answer, computed now at the latest
  const std::string reasonBefore = cublasUnavailableReason();
  {
    ScopedEnv env("RCJIT_CUBLAS", "/nonexistent/libcublas-rcjit-test.so");
    EXPECT_EQ(cublasLibraryName(), "/nonexistent/libcublas-rcjit-test.so");
    const CublasLoad l = probeCublas(cublasLibraryName());
    EXPECT_TRUE(startsWith(l.reason, "/nonexistent/libcublas-rcjit-test.so not found: "))
        << l.reason;
    EXPECT_EQ(cublas(), before); // once per process
    EXPECT_EQ(cublasUnavailableReason(), reasonBefore);
  }
  {
    ScopedEnv empty("RCJIT_CUBLAS", ""); // empty is unset
    const std::string name = cublasLibraryName();
    EXPECT_TRUE(startsWith(name, "libcublas.so.") || name == kToolkitCublas) << name;
  }
}

TEST(CublasLoad, RequireAndCheckSayWhy) {
  if (const CublasApi *api = cublas()) {
    EXPECT_EQ(&requireCublas(), api);
  } else {
    EXPECT_EQ(errorOf([] { requireCublas(); }),
              "cuBLAS is not available: " + cublasUnavailableReason());
  }
  EXPECT_NO_THROW(checkCublas(CUBLAS_STATUS_SUCCESS, "cublasGemmEx"));
  const std::string e = errorOf([] { checkCublas(CUBLAS_STATUS_INVALID_VALUE, "cublasGemmEx"); });
  if (cublas()) {
    EXPECT_TRUE(startsWith(e, "cublasGemmEx: CUBLAS_STATUS_INVALID_VALUE (")) << e;
  } else {
    EXPECT_EQ(e, "cublasGemmEx: cublasStatus_t 7");
  }
  EXPECT_EQ(describeCublasStatus(nullptr, CUBLAS_STATUS_NOT_SUPPORTED), "cublasStatus_t 15");
  EXPECT_EQ(describeCublasStatus(cublas(), static_cast<cublasStatus_t>(12345)),
            "cublasStatus_t 12345");
}

// Without a GPU a handle is an Error that says why, and cuBLAS itself fails cleanly too.
TEST(CublasHandleTest, WithoutAGpuIsAnError) {
  if (cuda_available()) GTEST_SKIP() << "this machine has a CUDA device";
  EXPECT_EQ(errorOf([] { CublasHandle h; }), "cuBLAS needs an NVIDIA GPU: " + unavailableReason());
  const CublasApi *api = cublas();
  if (!api) GTEST_SKIP() << "no cuBLAS: " << cublasUnavailableReason();
  cublasHandle_t h = nullptr;
  const cublasStatus_t s = api->create(&h); // no driver or no device: a status, not a crash
  ASSERT_NE(s, CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(h, nullptr);
  const std::string e = errorOf([&] { checkCublas(s, "cublasCreate"); });
  EXPECT_TRUE(startsWith(e, "cublasCreate: CUBLAS_STATUS_")) << e;
}

// ---------------------------------------------------------------------------------------
// A host model of cuBLAS, to run planGemm's arguments without a GPU

int64_t offsetOf(const GemmOperand &o, int64_t b, int64_t i, int64_t j) {
  return b * o.batchStride + i * o.rowStride + j * o.colStride;
}

// Elements an operand's buffer needs (strides are non-negative in every case here).
int64_t spanOf(const GemmOperand &o, int64_t batch, int64_t rows, int64_t cols) {
  if (batch == 0 || rows == 0 || cols == 0) return 0;
  return offsetOf(o, batch - 1, rows - 1, cols - 1) + 1;
}

// A buffer holding value(b, i, j) at each element of a batch x rows x cols operand (the last
// write wins where batches share storage) and `fill` everywhere else.
std::vector<double> layOut(const GemmOperand &o, int64_t batch, int64_t rows, int64_t cols,
                           const std::function<double(int64_t, int64_t, int64_t)> &value,
                           double fill) {
  std::vector<double> buf(static_cast<size_t>(spanOf(o, batch, rows, cols)), fill);
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t i = 0; i < rows; ++i) {
      for (int64_t j = 0; j < cols; ++j) buf[offsetOf(o, b, i, j)] = value(b, i, j);
    }
  }
  return buf;
}

// Row-major C[b] = A[b] B[b] read through d's strides, written into a copy of `c`.
std::vector<double> naiveGemm(const GemmDesc &d, const std::vector<double> &a,
                              const std::vector<double> &b, std::vector<double> c) {
  for (int64_t p = 0; p < d.batch; ++p) {
    for (int64_t i = 0; i < d.m; ++i) {
      for (int64_t j = 0; j < d.n; ++j) {
        double sum = 0;
        for (int64_t l = 0; l < d.k; ++l) {
          sum += a[offsetOf(d.a, p, i, l)] * b[offsetOf(d.b, p, l, j)];
        }
        c[offsetOf(d.c, p, i, j)] = sum;
      }
    }
  }
  return c;
}

// cublasGemmStridedBatchedEx as the cuBLAS documentation defines it, alpha = 1, beta = 0:
// for each batch p, C + p*strideC = op(A + p*strideA) op(B + p*strideB) with column-major
// matrices, X(r, c) = X[r + c * ld] and op(X)(r, c) = X(r, c) for OP_N, X(c, r) for OP_T.
// Checks the arguments the way cuBLAS does (CUBLAS_STATUS_INVALID_VALUE) and every access
// against the buffers: a violation is a test failure.
void cublasModel(const CublasGemmArgs &g, const std::vector<double> &A,
                 const std::vector<double> &B, std::vector<double> &C) {
  ASSERT_TRUE(g.m >= 0 && g.n >= 0 && g.k >= 0 && g.batchCount >= 0);
  ASSERT_GE(g.lda, std::max(1, g.transa == CUBLAS_OP_N ? g.m : g.k)) << "lda";
  ASSERT_GE(g.ldb, std::max(1, g.transb == CUBLAS_OP_N ? g.k : g.n)) << "ldb";
  ASSERT_GE(g.ldc, std::max(1, g.m)) << "ldc";
  auto at = [](const std::vector<double> &x, long long i, const char *name) {
    if (i < 0 || i >= static_cast<long long>(x.size())) {
      ADD_FAILURE() << "cuBLAS would read " << name << "[" << i << "], outside its " << x.size()
                    << " elements";
      return std::nan("");
    }
    return x[i];
  };
  auto opA = [&](long long base, int r, int c) {
    return at(A, base + (g.transa == CUBLAS_OP_N ? r + 1LL * c * g.lda : c + 1LL * r * g.lda), "A");
  };
  auto opB = [&](long long base, int r, int c) {
    return at(B, base + (g.transb == CUBLAS_OP_N ? r + 1LL * c * g.ldb : c + 1LL * r * g.ldb), "B");
  };
  for (int p = 0; p < g.batchCount; ++p) {
    for (int i = 0; i < g.m; ++i) {
      for (int j = 0; j < g.n; ++j) {
        double sum = 0;
        for (int l = 0; l < g.k; ++l) sum += opA(p * g.strideA, i, l) * opB(p * g.strideB, l, j);
        const long long ci = p * g.strideC + i + 1LL * j * g.ldc;
        ASSERT_TRUE(ci >= 0 && ci < static_cast<long long>(C.size())) << "C[" << ci << "]";
        C[ci] = sum; // beta = 0: C is not read
      }
    }
  }
}

const double kUnset = -777;  // in C wherever the GEMM must not write
const double kPadding = 1e4; // in A and B wherever the GEMM must not read

// Small integers: every sum is exact, so the model and the naive GEMM agree exactly.
double valueA(int64_t b, int64_t i, int64_t j) { return double((b * 7 + i * 3 + j * 5) % 11) - 5; }
double valueB(int64_t b, int64_t i, int64_t j) { return double((b * 5 + i * 2 + j * 7) % 13) - 6; }

// Runs planGemm(d)'s arguments on the model and compares with the naive row-major GEMM,
// including C's elements outside the result (untouched).
void expectPlanComputes(const GemmDesc &d) {
  SCOPED_TRACE("batch " + std::to_string(d.batch) + ", m " + std::to_string(d.m) + ", n " +
               std::to_string(d.n) + ", k " + std::to_string(d.k));
  const CublasGemmArgs g = planGemm(d);
  const std::vector<double> a = layOut(d.a, d.batch, d.m, d.k, valueA, kPadding);
  const std::vector<double> b = layOut(d.b, d.batch, d.k, d.n, valueB, kPadding);
  std::vector<double> c = layOut(
      d.c, d.batch, d.m, d.n, [](int64_t, int64_t, int64_t) { return kUnset; }, kUnset);
  c.resize(c.size() + 8, kUnset); // a write past the end shows too
  const std::vector<double> want = naiveGemm(d, a, b, c);
  ASSERT_TRUE(g.swapAB);
  cublasModel(g, b, a, c); // swapped: cuBLAS's A is our B
  ASSERT_EQ(c.size(), want.size());
  for (size_t i = 0; i < c.size(); ++i) ASSERT_EQ(c[i], want[i]) << "C buffer element " << i;
}

GemmOperand rowMajor(int64_t rows, int64_t cols, int64_t pad = 0) {
  return {cols + pad, 1, rows * (cols + pad)};
}
GemmOperand colMajor(int64_t rows, int64_t cols, int64_t pad = 0) {
  return {1, rows + pad, cols * (rows + pad)};
}

GemmDesc gemm(int64_t batch, int64_t m, int64_t n, int64_t k, GemmOperand a, GemmOperand b,
              GemmOperand c, DType dt = DType::f32) {
  GemmDesc d;
  d.dtype = dt;
  d.batch = batch;
  d.m = m;
  d.n = n;
  d.k = k;
  d.a = a;
  d.b = b;
  d.c = c;
  return d;
}

// Every operand contiguous and row-major.
GemmDesc contiguous(int64_t batch, int64_t m, int64_t n, int64_t k) {
  return gemm(batch, m, n, k, rowMajor(m, k), rowMajor(k, n), rowMajor(m, n));
}

TEST(CublasPlan, ContiguousIsCtEqualsBtAt) {
  const GemmDesc d = contiguous(1, 3, 4, 5);
  const CublasGemmArgs g = planGemm(d);
  EXPECT_TRUE(g.swapAB);
  EXPECT_EQ(g.transa, CUBLAS_OP_N);
  EXPECT_EQ(g.transb, CUBLAS_OP_N);
  EXPECT_EQ(g.m, 4); // our n
  EXPECT_EQ(g.n, 3); // our m
  EXPECT_EQ(g.k, 5);
  EXPECT_EQ(g.lda, 4); // B's row stride
  EXPECT_EQ(g.ldb, 5); // A's row stride
  EXPECT_EQ(g.ldc, 4);
  EXPECT_EQ(g.batchCount, 1);
  EXPECT_EQ(g.strideA, 0);
  EXPECT_EQ(g.strideB, 0);
  EXPECT_EQ(g.strideC, 0);
  EXPECT_EQ(g.algo, CUBLAS_GEMM_DEFAULT);
  expectPlanComputes(d);
}

TEST(CublasPlan, TransposedA) {
  const GemmDesc d = gemm(1, 3, 4, 5, colMajor(3, 5), rowMajor(5, 4), rowMajor(3, 4));
  const CublasGemmArgs g = planGemm(d);
  EXPECT_EQ(g.transa, CUBLAS_OP_N);
  EXPECT_EQ(g.transb, CUBLAS_OP_T);
  EXPECT_EQ(g.ldb, 3);
  expectPlanComputes(d);
}

// A linear layer: x [M, K] times W^T, with the weight W [N, K] row-major.
TEST(CublasPlan, LinearWeightAsTransposedB) {
  const int64_t M = 6, N = 10, K = 7;
  const GemmDesc d = gemm(1, M, N, K, rowMajor(M, K), {1, K, 0}, rowMajor(M, N));
  const CublasGemmArgs g = planGemm(d);
  EXPECT_EQ(g.transa, CUBLAS_OP_T);
  EXPECT_EQ(g.transb, CUBLAS_OP_N);
  EXPECT_EQ(g.lda, K);
  expectPlanComputes(d);
}

TEST(CublasPlan, BothTransposedAndPaddedLeadingDimensions) {
  expectPlanComputes(gemm(1, 5, 6, 7, colMajor(5, 7, 3), colMajor(7, 6, 1), rowMajor(5, 6, 2)));
  expectPlanComputes(gemm(1, 5, 6, 7, rowMajor(5, 7, 4), rowMajor(7, 6, 9), rowMajor(5, 6, 1)));
}

TEST(CublasPlan, BatchedWithBatchStrides) {
  const GemmDesc d = contiguous(4, 3, 5, 2);
  const CublasGemmArgs g = planGemm(d);
  EXPECT_EQ(g.batchCount, 4);
  EXPECT_EQ(g.strideA, 2 * 5); // B's
  EXPECT_EQ(g.strideB, 3 * 2); // A's
  EXPECT_EQ(g.strideC, 3 * 5);
  expectPlanComputes(d);
  // batches further apart than one matrix, transposed operands
  GemmDesc far = gemm(3, 4, 3, 5, colMajor(4, 5), colMajor(5, 3), rowMajor(4, 3, 1));
  far.a.batchStride += 7;
  far.b.batchStride += 1;
  far.c.batchStride += 5;
  expectPlanComputes(far);
}

TEST(CublasPlan, BatchBroadcastByStrideZero) {
  GemmDesc sharedB = contiguous(3, 4, 5, 6);
  sharedB.b.batchStride = 0; // one weight for every batch
  EXPECT_EQ(planGemm(sharedB).strideA, 0);
  expectPlanComputes(sharedB);
  GemmDesc sharedA = gemm(3, 4, 5, 6, colMajor(4, 6), rowMajor(6, 5), rowMajor(4, 5));
  sharedA.a.batchStride = 0;
  EXPECT_EQ(planGemm(sharedA).strideB, 0);
  expectPlanComputes(sharedA);
}

// C viewed as [batch, m, n] over storage [m, batch, n] (e.g. attention heads written back).
TEST(CublasPlan, InterleavedOutputBatches) {
  const int64_t batch = 3, m = 4, n = 5, k = 2;
  const GemmDesc d = gemm(batch, m, n, k, rowMajor(m, k), rowMajor(k, n), {batch * n, 1, n});
  EXPECT_EQ(planGemm(d).ldc, batch * n);
  expectPlanComputes(d);
}

// A dimension of size 1 may have any stride; the plan picks leading dimensions cuBLAS takes.
TEST(CublasPlan, SizeOneDimensionsTakeAnyStride) {
  for (int64_t junk : {0, 1, 3, 12345}) {
    SCOPED_TRACE("stride " + std::to_string(junk));
    // m = 1: A's and C's row strides are free
    expectPlanComputes(gemm(1, 1, 6, 5, {junk, 1, 5}, rowMajor(5, 6), {junk, 1, 6}));
    // m = 1 with A's one row strided: read as a column-major 1 x k
    expectPlanComputes(gemm(1, 1, 6, 5, {junk, 2, 10}, rowMajor(5, 6), rowMajor(1, 6)));
    // n = 1: B's and C's column strides are free
    expectPlanComputes(gemm(1, 5, 1, 4, rowMajor(5, 4), {1, junk, 4}, {1, junk, 5}));
    // k = 1: an outer product; A's column and B's row strides are free
    expectPlanComputes(gemm(2, 3, 4, 1, {1, junk, 3}, {junk, 1, 4}, rowMajor(3, 4)));
    // everything 1
    expectPlanComputes(gemm(3, 1, 1, 1, {junk, junk, 1}, {junk, junk, 0}, {junk, junk, 1}));
    // one matrix: its batch stride is never used
    GemmDesc one = contiguous(1, 2, 3, 4);
    one.a.batchStride = one.b.batchStride = one.c.batchStride = junk;
    const CublasGemmArgs g = planGemm(one);
    EXPECT_EQ(g.strideA, 0);
    EXPECT_EQ(g.strideC, 0);
    expectPlanComputes(one);
  }
  const CublasGemmArgs g = planGemm(gemm(1, 1, 6, 5, {0, 1, 5}, rowMajor(5, 6), {0, 1, 6}));
  EXPECT_EQ(g.ldb, 5); // A's row stride 0 does not matter: the smallest legal ldb
  EXPECT_EQ(g.ldc, 6);
}

TEST(CublasPlan, OddSizesInEveryLayout) {
  const int64_t m = 7, n = 13, k = 9, batch = 3;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      for (int64_t pad : {0, 3}) {
        for (int broadcast = 0; broadcast < 3; ++broadcast) {
          SCOPED_TRACE(std::string("A ") + (ta ? "T" : "N") + ", B " + (tb ? "T" : "N") + ", pad " +
                       std::to_string(pad) + ", broadcast " + std::to_string(broadcast));
          GemmDesc d = gemm(batch, m, n, k, ta ? colMajor(m, k, pad) : rowMajor(m, k, pad),
                            tb ? colMajor(k, n, pad) : rowMajor(k, n, pad), rowMajor(m, n, pad));
          if (broadcast == 1) d.a.batchStride = 0;
          if (broadcast == 2) d.b.batchStride = 0;
          const CublasGemmArgs g = planGemm(d);
          EXPECT_EQ(g.transa, tb ? CUBLAS_OP_T : CUBLAS_OP_N);
          EXPECT_EQ(g.transb, ta ? CUBLAS_OP_T : CUBLAS_OP_N);
          expectPlanComputes(d);
        }
      }
    }
  }
}

TEST(CublasPlan, EmptySizes) {
  expectPlanComputes(contiguous(0, 3, 4, 5));
  expectPlanComputes(contiguous(2, 0, 4, 5));
  expectPlanComputes(contiguous(2, 3, 0, 5));
  expectPlanComputes(contiguous(2, 3, 4, 0)); // BLAS: an empty sum is 0
}

TEST(CublasPlan, DataAndComputeTypes) {
  GemmDesc d = contiguous(1, 2, 2, 2);
  CublasGemmArgs g = planGemm(d);
  EXPECT_EQ(g.aType, CUDA_R_32F);
  EXPECT_EQ(g.bType, CUDA_R_32F);
  EXPECT_EQ(g.cType, CUDA_R_32F);
  EXPECT_EQ(g.computeType, CUBLAS_COMPUTE_32F);
  EXPECT_FALSE(g.doubleScalars);
  d.allowTf32 = true;
  EXPECT_EQ(planGemm(d).computeType, CUBLAS_COMPUTE_32F_FAST_TF32);
  d.dtype = DType::f16; // TF32 is about f32 inputs only
  g = planGemm(d);
  EXPECT_EQ(g.cType, CUDA_R_16F);
  EXPECT_EQ(g.computeType, CUBLAS_COMPUTE_32F);
  EXPECT_FALSE(g.doubleScalars);
  d.dtype = DType::bf16;
  g = planGemm(d);
  EXPECT_EQ(g.aType, CUDA_R_16BF);
  EXPECT_EQ(g.computeType, CUBLAS_COMPUTE_32F);
  d.dtype = DType::f64;
  g = planGemm(d);
  EXPECT_EQ(g.bType, CUDA_R_64F);
  EXPECT_EQ(g.computeType, CUBLAS_COMPUTE_64F);
  EXPECT_TRUE(g.doubleScalars);
}

TEST(CublasPlan, OtherDtypesAreErrors) {
  for (DType dt : {DType::i32, DType::i64, DType::boolean}) {
    GemmDesc d = contiguous(1, 2, 2, 2);
    d.dtype = dt;
    EXPECT_EQ(errorOf([&] { planGemm(d); }), "planGemm: cuBLAS GEMM does not take dtype " +
                                                 std::string(dtypeName(dt)) +
                                                 " (it takes f32, f64, f16 and bf16)");
    EXPECT_TRUE(gemmLayoutSupported(d, nullptr)); // the layout is fine
  }
}

// The message planGemm throws for d, after checking gemmLayoutSupported says the same.
std::string layoutError(const GemmDesc &d) {
  std::string why;
  EXPECT_FALSE(gemmLayoutSupported(d, &why));
  EXPECT_FALSE(gemmLayoutSupported(d, nullptr));
  const std::string e = errorOf([&] { planGemm(d); });
  EXPECT_EQ(e, "planGemm: " + why);
  return e;
}

TEST(CublasPlan, UnsupportedLayoutsNameTheOperand) {
  std::string why = "unchanged";
  EXPECT_TRUE(gemmLayoutSupported(contiguous(2, 3, 4, 5), &why));
  EXPECT_EQ(why, "");

  // rows broadcast (stride 0): neither rows nor columns are apart
  EXPECT_EQ(layoutError(gemm(1, 3, 4, 5, {0, 1, 0}, rowMajor(5, 4), rowMajor(3, 4))),
            "planGemm: cuBLAS cannot take the layout of operand A (3 x 5, rowStride 0, "
            "colStride 1): it needs the rows or the columns contiguous (one stride 1, the other "
            "at least the extent); make A contiguous first");
  // every other column: no unit stride
  EXPECT_TRUE(contains(layoutError(gemm(1, 3, 4, 5, rowMajor(3, 5), {8, 2, 40}, rowMajor(3, 4))),
                       "operand B (5 x 4, rowStride 8, colStride 2)"));
  // rows overlapping: row stride shorter than a row
  EXPECT_TRUE(contains(layoutError(gemm(1, 3, 4, 5, {4, 1, 12}, rowMajor(5, 4), rowMajor(3, 4))),
                       "operand A (3 x 5, rowStride 4, colStride 1)"));
  // columns overlapping: column stride shorter than a column
  EXPECT_TRUE(contains(layoutError(gemm(1, 3, 4, 5, {1, 2, 15}, rowMajor(5, 4), rowMajor(3, 4))),
                       "operand A (3 x 5, rowStride 1, colStride 2)"));
  // column-major C
  EXPECT_EQ(layoutError(gemm(1, 3, 4, 5, rowMajor(3, 5), rowMajor(5, 4), colMajor(3, 4))),
            "planGemm: cuBLAS cannot write operand C (3 x 4, rowStride 1, colStride 3): C must be "
            "row-major (colStride 1, rowStride at least n)");
  // C's batches on top of each other
  GemmDesc overlap = contiguous(2, 3, 4, 5);
  overlap.c.batchStride = 0;
  EXPECT_EQ(layoutError(overlap), "planGemm: cuBLAS cannot write operand C (3 x 4, rowStride 4, "
                                  "colStride 1, batchStride 0): its 2 matrices overlap");
  overlap.c.batchStride = 6;
  EXPECT_TRUE(contains(layoutError(overlap), "its 2 matrices overlap"));
  // negative strides
  GemmDesc negative = contiguous(2, 3, 4, 5);
  negative.b.batchStride = -20;
  EXPECT_EQ(layoutError(negative),
            "planGemm: cuBLAS cannot take operand B (5 x 4, rowStride 4, colStride 1) with a "
            "negative batchStride (-20); make B contiguous first");
  EXPECT_TRUE(contains(layoutError(gemm(1, 3, 4, 5, {-5, 1, 0}, rowMajor(5, 4), rowMajor(3, 4))),
                       "operand A"));
}

TEST(CublasPlan, SizesCuBlasCannotTake) {
  EXPECT_EQ(layoutError(contiguous(1, -1, 4, 5)),
            "planGemm: negative GEMM size (batch 1, m -1, n 4, k 5)");
  const int64_t big = int64_t(1) << 31;
  EXPECT_TRUE(contains(layoutError(gemm(1, big, 1, 1, {1, 1, 0}, {1, 1, 0}, {1, 1, 0})),
                       "exceeds cuBLAS's 32-bit int"));
  EXPECT_TRUE(contains(layoutError(gemm(1, 2, 2, 2, {big, 1, 0}, rowMajor(2, 2), rowMajor(2, 2))),
                       "leading dimension beyond cuBLAS's 32-bit int"));
}

TEST(CublasRun, ErrorsBeforeCuBlasIsCalled) {
  // C empty: nothing to do, nothing touched (not even the handle)
  EXPECT_NO_THROW(runGemm(nullptr, contiguous(2, 0, 4, 5), nullptr, nullptr, nullptr, nullptr));
  EXPECT_NO_THROW(runGemm(nullptr, contiguous(0, 3, 4, 5), nullptr, nullptr, nullptr, nullptr));
  EXPECT_EQ(
      errorOf([] { runGemm(nullptr, contiguous(1, 3, 4, 0), nullptr, nullptr, nullptr, {}); }),
      "runGemm: k is 0, so C is all zeros; fill it directly (cuBLAS is not relied on to "
      "write C for an empty sum)");
  EXPECT_EQ(
      errorOf([] { runGemm(nullptr, contiguous(1, 3, 4, 5), nullptr, nullptr, nullptr, {}); }),
      "runGemm: no cuBLAS handle");
  GemmDesc bad = contiguous(1, 3, 4, 5);
  bad.dtype = DType::i64;
  EXPECT_TRUE(startsWith(errorOf([&] { runGemm(nullptr, bad, nullptr, nullptr, nullptr, {}); }),
                         "planGemm: cuBLAS GEMM does not take dtype i64"));
}

// ---------------------------------------------------------------------------------------
// On a GPU (label `gpu`; skipped without one): runGemm against the CPU.

class GpuCublas : public rcjit::test::GpuTest {};

// The device's primary context, current on this thread for the life of the object.
struct PrimaryContext {
  const DriverApi &api;
  CUdevice device = 0;
  explicit PrimaryContext(const DriverApi &a) : api(a) {
    check(api.deviceGet(&device, 0), "cuDeviceGet");
    CUcontext ctx = nullptr;
    check(api.devicePrimaryCtxRetain(&ctx, device), "cuDevicePrimaryCtxRetain");
    check(api.ctxSetCurrent(ctx), "cuCtxSetCurrent");
  }
  ~PrimaryContext() { api.devicePrimaryCtxRelease(device); }
  PrimaryContext(const PrimaryContext &) = delete;
  PrimaryContext &operator=(const PrimaryContext &) = delete;
};

struct Stream {
  const DriverApi &api;
  CUstream stream = nullptr;
  explicit Stream(const DriverApi &a) : api(a) {
    check(api.streamCreate(&stream, 0), "cuStreamCreate");
  }
  ~Stream() { api.streamDestroy(stream); }
  Stream(const Stream &) = delete;
  Stream &operator=(const Stream &) = delete;
};

// Device memory holding a host buffer converted to a dtype; frees itself.
struct DeviceArray {
  const DriverApi &api;
  CUdeviceptr ptr = 0;
  size_t count = 0;
  DType dtype;
  DeviceArray(const DriverApi &a, const std::vector<double> &host, DType dt)
      : api(a), count(std::max<size_t>(host.size(), 1)), dtype(dt) {
    check(api.memAlloc(&ptr, count * dtypeSize(dt)), "cuMemAlloc");
    Tensor t = typed(host);
    check(api.memcpyHtoD(ptr, t.data_ptr(), host.size() * dtypeSize(dt)), "cuMemcpyHtoD");
  }
  ~DeviceArray() { api.memFree(ptr); }
  DeviceArray(const DeviceArray &) = delete;
  DeviceArray &operator=(const DeviceArray &) = delete;
  void *get() const { return reinterpret_cast<void *>(ptr); }
  Tensor typed(const std::vector<double> &host) const {
    std::vector<float> f(host.begin(), host.end());
    if (f.empty()) f.push_back(0);
    return Tensor::from_vector(f, {static_cast<int64_t>(f.size())}).to(dtype).contiguous();
  }
  std::vector<double> download(size_t n) const {
    Tensor t = Tensor::empty({static_cast<int64_t>(n)}, dtype);
    check(api.memcpyDtoH(t.data_ptr(), ptr, n * dtypeSize(dtype)), "cuMemcpyDtoH");
    return t.to_vector<double>();
  }
};

// host values as the dtype stores them
std::vector<double> rounded(const std::vector<double> &v, DType dt) {
  std::vector<float> f(v.begin(), v.end());
  if (f.empty()) return {};
  return Tensor::from_vector(f, {static_cast<int64_t>(f.size())}).to(dt).to_vector<double>();
}

// Runs d on the device and checks C against a double-precision CPU GEMM of the same
// (rounded) inputs, within rtol of the sum of |a||b| per element; C's other elements keep
// their sentinel.
void expectDeviceMatches(const DriverApi &api, const CublasHandle &h, CUstream stream,
                         const GemmDesc &d, double rtol) {
  SCOPED_TRACE(std::string(dtypeName(d.dtype)) + (d.allowTf32 ? " tf32" : "") + ", batch " +
               std::to_string(d.batch) + ", m " + std::to_string(d.m) + ", n " +
               std::to_string(d.n) + ", k " + std::to_string(d.k));
  auto wave = [](double seed) {
    return [seed](int64_t b, int64_t i, int64_t j) {
      return std::sin(seed + 0.7 * b + 1.3 * i + 0.37 * j) + 0.25;
    };
  };
  const std::vector<double> a = rounded(layOut(d.a, d.batch, d.m, d.k, wave(0.1), 1e4), d.dtype);
  const std::vector<double> b = rounded(layOut(d.b, d.batch, d.k, d.n, wave(2.0), 1e4), d.dtype);
  std::vector<double> c = layOut(
      d.c, d.batch, d.m, d.n, [](int64_t, int64_t, int64_t) { return kUnset; }, kUnset);
  c = rounded(c, d.dtype);
  const std::vector<double> want = naiveGemm(d, a, b, c);
  std::vector<double> absA(a.size()), absB(b.size());
  for (size_t i = 0; i < a.size(); ++i) absA[i] = std::fabs(a[i]);
  for (size_t i = 0; i < b.size(); ++i) absB[i] = std::fabs(b[i]);
  const std::vector<double> scale = naiveGemm(d, absA, absB, std::vector<double>(c.size(), 0));

  DeviceArray da(api, a, d.dtype), db(api, b, d.dtype), dc(api, c, d.dtype);
  runGemm(h.get(), d, da.get(), db.get(), dc.get(), stream);
  check(api.streamSynchronize(stream), "cuStreamSynchronize");
  const std::vector<double> got = dc.download(c.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], rtol * (scale[i] + std::fabs(want[i])) + 1e-12)
        << "C buffer element " << i;
  }
}

TEST_F(GpuCublas, RunGemmMatchesTheCpu) {
  const DriverApi &api = requireCuda();
  PrimaryContext ctx(api);
  Stream s(api);
  CublasHandle h(s.stream);
  ASSERT_NE(h.get(), nullptr);
  int version = 0;
  checkCublas(requireCublas().getVersion(h.get(), &version), "cublasGetVersion");
  EXPECT_GE(version, 110000);

  // f32: contiguous batched, a linear's transposed weight, broadcast + transposed A + padded C,
  // interleaved C, a row and a column vector
  expectDeviceMatches(api, h, s.stream, contiguous(3, 33, 47, 29), 1e-5);
  expectDeviceMatches(api, h, s.stream,
                      gemm(1, 17, 64, 40, rowMajor(17, 40), {1, 40, 0}, rowMajor(17, 64)), 1e-5);
  GemmDesc shared = gemm(4, 9, 12, 31, colMajor(9, 31, 3), rowMajor(31, 12), rowMajor(9, 12, 5));
  shared.a.batchStride = 0;
  expectDeviceMatches(api, h, s.stream, shared, 1e-5);
  expectDeviceMatches(api, h, s.stream,
                      gemm(3, 8, 16, 24, rowMajor(8, 24), rowMajor(24, 16), {3 * 16, 1, 16}), 1e-5);
  expectDeviceMatches(api, h, s.stream,
                      gemm(2, 1, 50, 20, {0, 1, 20}, rowMajor(20, 50), rowMajor(1, 50)), 1e-5);
  expectDeviceMatches(api, h, s.stream,
                      gemm(2, 50, 1, 20, rowMajor(50, 20), {1, 7, 20}, {1, 9, 50}), 1e-5);
  // the other dtypes, each with a transposed operand
  expectDeviceMatches(
      api, h, s.stream,
      gemm(2, 19, 23, 37, colMajor(19, 37), rowMajor(37, 23), rowMajor(19, 23), DType::f64), 1e-13);
  expectDeviceMatches(
      api, h, s.stream,
      gemm(2, 64, 32, 48, rowMajor(64, 48), colMajor(48, 32), rowMajor(64, 32), DType::f16), 2e-3);
  expectDeviceMatches(
      api, h, s.stream,
      gemm(2, 64, 32, 48, rowMajor(64, 48), colMajor(48, 32), rowMajor(64, 32), DType::bf16), 1e-2);
  GemmDesc tf32 = contiguous(1, 128, 128, 128);
  tf32.allowTf32 = true;
  expectDeviceMatches(api, h, s.stream, tf32, 4e-3);
}

TEST_F(GpuCublas, RefusedCallsAreErrors) {
  const DriverApi &api = requireCuda();
  PrimaryContext ctx(api);
  Stream s(api);
  CublasHandle h(s.stream);
  const CublasApi &blas = requireCublas();
  const float one = 1, zero = 0;
  // lda 0: cuBLAS refuses the call before touching memory
  const cublasStatus_t st =
      blas.gemmStridedBatchedEx(h.get(), CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, &one, nullptr,
                                CUDA_R_32F, 0, 0, nullptr, CUDA_R_32F, 4, 0, &zero, nullptr,
                                CUDA_R_32F, 4, 0, 1, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  EXPECT_EQ(errorOf([&] {
              checkCublas(st, "cublasGemmStridedBatchedEx");
            }).rfind("cublasGemmStridedBatchedEx: CUBLAS_STATUS_INVALID_VALUE (", 0),
            0u);
  CublasHandle moved(std::move(h));
  EXPECT_EQ(h.get(), nullptr);
  EXPECT_NE(moved.get(), nullptr);
}

} // namespace
