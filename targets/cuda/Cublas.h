// cuBLAS, loaded at run time with dlopen, and a row-major batched GEMM planned onto it.
//
// rcjit never links libcublas: <cublas_v2.h> is included for its types only. The first use
// loads $RCJIT_CUBLAS or the first of libcublas.so.13/.12/.11 and the toolkit's copy that
// dlopens, and resolves every entry point rcjit uses; the outcome is kept for the life of the
// process. Loading needs no GPU; creating a handle does. planGemm, which turns a row-major
// GEMM description into cuBLAS's column-major arguments, is pure and needs neither.
#pragma once
#include <cstdint>
#include <string>

#include <cublas_v2.h>
#include <cuda.h>

#include <rcjit/Types.h>

namespace rcjit::cuda {

/// cublasGemmEx and cublasGemmStridedBatchedEx as libcublas exports them. cublas_api.h also
/// declares C++ overloads of both (taking a cudaDataType compute type), so decltype cannot
/// name them; Cublas.cpp checks these types against the header's declarations.
using CublasGemmExFn = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int,
                                          int, int, const void *, const void *, cudaDataType, int,
                                          const void *, cudaDataType, int, const void *, void *,
                                          cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t);
using CublasGemmStridedBatchedExFn = cublasStatus_t (*)(
    cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void *, const void *,
    cudaDataType, int, long long, const void *, cudaDataType, int, long long, const void *, void *,
    cudaDataType, int, long long, int, cublasComputeType_t, cublasGemmAlgo_t);

/// The cuBLAS entry points rcjit uses (the `_v2` ABI where cublas_v2.h maps a name to it).
struct CublasApi {
  decltype(&::cublasCreate_v2) create = nullptr;
  decltype(&::cublasDestroy_v2) destroy = nullptr;
  decltype(&::cublasSetStream_v2) setStream = nullptr;
  decltype(&::cublasSetMathMode) setMathMode = nullptr;
  decltype(&::cublasSetWorkspace_v2) setWorkspace = nullptr;
  CublasGemmStridedBatchedExFn gemmStridedBatchedEx = nullptr;
  CublasGemmExFn gemmEx = nullptr;
  decltype(&::cublasGetStatusName) getStatusName = nullptr;
  decltype(&::cublasGetStatusString) getStatusString = nullptr;
  decltype(&::cublasGetVersion_v2) getVersion = nullptr; // needs a handle
  decltype(&::cublasGetProperty) getProperty = nullptr;  // needs none
};

/// The outcome of loading a cuBLAS library: the entry points when usable, else why not.
struct CublasLoad {
  CublasApi api;          // every entry set when `reason` is empty
  std::string reason;     // empty: loaded and every entry point resolved
  std::string library;    // what was dlopened (a soname or a path)
  int version = 0;        // 10000 * major + 100 * minor + patch (CUBLAS_VERSION's form)
  void *handle = nullptr; // the dlopen handle (never closed)
};

/// Loads `library` (a soname or a path) and resolves every CublasApi entry point. Never
/// throws; a failure is a CublasLoad with `reason` set, e.g. "libcublas.so.13 not found:
/// <dlerror>" or "libm.so.6: missing entry points cublasCreate_v2, ...". Needs no GPU.
/// The process-wide cuBLAS is probeCublas(cublasLibraryName()), done once; tests may probe
/// other libraries (each call dlopens again).
CublasLoad probeCublas(const std::string &library);

/// $RCJIT_CUBLAS when set; else the first of libcublas.so.13, libcublas.so.12,
/// libcublas.so.11 and RCJIT_CUDA_ROOT/lib64/libcublas.so that dlopens (this call dlopens
/// them; what loads stays loaded); else "libcublas.so.13". Read at each call; the
/// process-wide cuBLAS uses the answer of its first use.
std::string cublasLibraryName();

/// The process-wide cuBLAS, or nullptr when it cannot be loaded (see
/// cublasUnavailableReason()). Computed once, thread-safe.
const CublasApi *cublas();

/// Why cuBLAS cannot be loaded in this process; empty when it can. Computed once.
const std::string &cublasUnavailableReason();

/// The process-wide cuBLAS's version (see CublasLoad::version); 0 when it is unavailable.
int cublasVersion();

/// Throws rcjit::Error("cuBLAS is not available: <reason>") unless cuBLAS is loaded; else
/// returns it. Loaded is not usable: a handle also needs a GPU (see CublasHandle).
const CublasApi &requireCublas();

/// "CUBLAS_STATUS_NAME (description)" for a status, through `api` (which may be null:
/// then only the number is known, "cublasStatus_t 7").
std::string describeCublasStatus(const CublasApi *api, cublasStatus_t s);

/// Throws rcjit::Error "<what>: CUBLAS_STATUS_NAME (description)" unless s is
/// CUBLAS_STATUS_SUCCESS. Names come from the process-wide cuBLAS when it is loaded.
void checkCublas(cublasStatus_t s, const char *what);

/// A cuBLAS handle, destroyed with the object. Created in the CUDA context current on the
/// calling thread (rcjit's: the device's primary context); cuBLAS allocates its own
/// workspace. Not thread-safe: use one handle per thread (cuBLAS's rule).
class CublasHandle {
public:
  /// Creates a handle that runs on `stream` (nullptr: the legacy default stream). Throws
  /// rcjit::Error when CUDA or cuBLAS is unavailable or cublasCreate fails.
  explicit CublasHandle(CUstream stream = nullptr);
  ~CublasHandle();
  CublasHandle(CublasHandle &&other) noexcept;
  CublasHandle &operator=(CublasHandle &&other) noexcept;
  CublasHandle(const CublasHandle &) = delete;
  CublasHandle &operator=(const CublasHandle &) = delete;

  cublasHandle_t get() const { return handle_; }

private:
  cublasHandle_t handle_ = nullptr;
};

/// One operand of a GEMM, in elements: element (b, i, j) is at
/// b * batchStride + i * rowStride + j * colStride from the operand's pointer.
struct GemmOperand {
  int64_t rowStride = 0;
  int64_t colStride = 1;
  int64_t batchStride = 0;
};

/// C[b] = A[b] x B[b] for b < batch, in row-major terms: A is m x k, B is k x n, C is m x n,
/// all of `dtype` (accumulated in f32, or f64 for f64). cuBLAS takes an operand whose rows
/// or columns are contiguous (one unit stride, the other >= the extent; a dimension of size
/// 1 may have any stride) and a C whose rows are (colStride 1); batch strides are free for
/// A and B (0 broadcasts) and must keep C's matrices apart.
struct GemmDesc {
  DType dtype = DType::f32;
  int64_t batch = 1;
  int64_t m = 1, n = 1, k = 1;
  GemmOperand a, b, c;
  bool allowTf32 = false; // f32 only: let cuBLAS round inputs to TF32 on tensor cores
};

/// The arguments of cublasGemmStridedBatchedEx for a GemmDesc, in cuBLAS's column-major
/// terms. Row-major C = A B is column-major C^T = B^T A^T, so cuBLAS's first operand is
/// GemmDesc's b and its second is GemmDesc's a (`swapAB`).
struct CublasGemmArgs {
  bool swapAB = true; // always, since C is row-major: pass (b, a), not (a, b)
  cublasOperation_t transa = CUBLAS_OP_N, transb = CUBLAS_OP_N;
  int m = 0, n = 0, k = 0; // cuBLAS's: m = GemmDesc::n, n = GemmDesc::m
  int lda = 1, ldb = 1, ldc = 1;
  long long strideA = 0, strideB = 0, strideC = 0;
  int batchCount = 0;
  cudaDataType_t aType = CUDA_R_32F, bType = CUDA_R_32F, cType = CUDA_R_32F;
  cublasComputeType_t computeType = CUBLAS_COMPUTE_32F;
  bool doubleScalars = false; // alpha and beta are double (64F compute), else float
  cublasGemmAlgo_t algo = CUBLAS_GEMM_DEFAULT;
};

/// Whether cuBLAS can take d's dimensions and strides as they are (dtype aside: planGemm
/// checks it). When not, `why` (if not null) says which operand and why; the caller then
/// makes that operand contiguous first. Pure; thread-safe.
bool gemmLayoutSupported(const GemmDesc &d, std::string *why);

/// The cuBLAS call for d. Throws rcjit::Error naming the dtype (cuBLAS GEMM takes f32, f64,
/// f16, bf16) or the operand whose layout cuBLAS cannot take. Pure; thread-safe.
CublasGemmArgs planGemm(const GemmDesc &d);

/// Runs d on `stream` through `handle` (which it binds to the stream): c = a x b with
/// alpha = 1 and beta = 0, so c is only written. a, b and c are device pointers. Returns at
/// once when C is empty (batch, m or n is 0); throws rcjit::Error when k is 0 (an empty sum:
/// the caller fills C with zeros, cuBLAS is not trusted to), for planGemm's errors and for
/// a failed cuBLAS call. Asynchronous, like any work queued on a stream.
void runGemm(cublasHandle_t handle, const GemmDesc &d, const void *a, const void *b, void *c,
             CUstream stream);

} // namespace rcjit::cuda
