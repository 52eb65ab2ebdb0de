// cuBLAS loaded with dlopen, and row-major batched GEMMs planned onto its column-major API.
#include "targets/cuda/Cublas.h"

#include <dlfcn.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <optional>
#include <type_traits>
#include <utility>
#include <vector>

#include <rcjit/Cuda.h>
#include <rcjit/Error.h>

#include "targets/cuda/CudaDriver.h"

namespace rcjit::cuda {

// The casts pick the exported declaration among cublas_api.h's overloads: they compile only
// while libcublas's signatures are the ones CublasApi calls through.
static_assert(
    std::is_same_v<decltype(static_cast<CublasGemmExFn>(&::cublasGemmEx)), CublasGemmExFn>);
static_assert(std::is_same_v<
              decltype(static_cast<CublasGemmStridedBatchedExFn>(&::cublasGemmStridedBatchedEx)),
              CublasGemmStridedBatchedExFn>);
// runGemm hands driver-API streams to cuBLAS's runtime-API parameter.
static_assert(std::is_same_v<CUstream, cudaStream_t>);

namespace {

// Every entry point of CublasApi; `missing` lists those the library lacks.
void resolveCublas(void *lib, CublasApi &a, std::string &missing) {
  resolve(lib, "cublasCreate_v2", a.create, missing);
  resolve(lib, "cublasDestroy_v2", a.destroy, missing);
  resolve(lib, "cublasSetStream_v2", a.setStream, missing);
  resolve(lib, "cublasSetMathMode", a.setMathMode, missing);
  resolve(lib, "cublasSetWorkspace_v2", a.setWorkspace, missing);
  resolve(lib, "cublasGemmStridedBatchedEx", a.gemmStridedBatchedEx, missing);
  resolve(lib, "cublasGemmEx", a.gemmEx, missing);
  resolve(lib, "cublasGetStatusName", a.getStatusName, missing);
  resolve(lib, "cublasGetStatusString", a.getStatusString, missing);
  resolve(lib, "cublasGetVersion_v2", a.getVersion, missing);
  resolve(lib, "cublasGetProperty", a.getProperty, missing);
}

// Where cuBLAS is looked for when $RCJIT_CUBLAS is not set, in order.
std::vector<std::string> libraryCandidates() {
  return {"libcublas.so.13", "libcublas.so.12", "libcublas.so.11",
          std::string(RCJIT_CUDA_ROOT) + "/lib64/libcublas.so"};
}

const char *envLibrary() {
  const char *env = std::getenv("RCJIT_CUBLAS");
  return env && *env ? env : nullptr;
}

CublasLoad loadProcessCublas() {
  const bool searched = envLibrary() == nullptr;
  CublasLoad load = probeCublas(cublasLibraryName());
  if (!load.handle && searched) {
    std::string tried;
    for (const std::string &c : libraryCandidates()) {
      if (c != load.library) tried += (tried.empty() ? "" : ", ") + c;
    }
    load.reason += " (also tried " + tried + "; set RCJIT_CUBLAS to a libcublas.so to use)";
  }
  return load;
}

const CublasLoad &processCublas() {
  static const CublasLoad load = loadProcessCublas();
  return load;
}

} // namespace

CublasLoad probeCublas(const std::string &library) {
  CublasLoad out;
  if (!openAndResolve(out, library, resolveCublas, "cuBLAS")) return out;
  int major = 0, minor = 0, patch = 0;
  if (out.api.getProperty(MAJOR_VERSION, &major) == CUBLAS_STATUS_SUCCESS &&
      out.api.getProperty(MINOR_VERSION, &minor) == CUBLAS_STATUS_SUCCESS &&
      out.api.getProperty(PATCH_LEVEL, &patch) == CUBLAS_STATUS_SUCCESS) {
    out.version = 10000 * major + 100 * minor + patch;
  }
  return out;
}

std::string cublasLibraryName() {
  if (const char *env = envLibrary()) return env;
  const std::vector<std::string> candidates = libraryCandidates();
  for (const std::string &c : candidates) {
    // Left open: the probe that follows dlopens the same library again.
    if (dlopen(c.c_str(), RTLD_NOW | RTLD_LOCAL)) return c;
  }
  dlerror();
  return candidates.front();
}

const CublasApi *cublas() {
  const CublasLoad &l = processCublas();
  return l.reason.empty() ? &l.api : nullptr;
}

const std::string &cublasUnavailableReason() { return processCublas().reason; }

int cublasVersion() { return cublas() ? processCublas().version : 0; }

const CublasApi &requireCublas() {
  const CublasApi *api = cublas();
  if (!api) throw Error("cuBLAS is not available: " + cublasUnavailableReason());
  return *api;
}

std::string describeCublasStatus(const CublasApi *api, cublasStatus_t s) {
  const char *name = api && api->getStatusName ? api->getStatusName(s) : nullptr;
  const char *text = api && api->getStatusString ? api->getStatusString(s) : nullptr;
  const std::string unknown = "unrecognized status"; // what cuBLAS says for a bad number
  std::string out = name && name != unknown ? name : "cublasStatus_t " + std::to_string(s);
  if (text && text != unknown) out += std::string(" (") + text + ")";
  return out;
}

void checkCublas(cublasStatus_t s, const char *what) {
  if (s == CUBLAS_STATUS_SUCCESS) return;
  throw Error(std::string(what) + ": " + describeCublasStatus(cublas(), s));
}

// --- CublasHandle -------------------------------------------------------------------------

CublasHandle::CublasHandle(CUstream stream) {
  // Without a driver cublasCreate fails too (CUBLAS_STATUS_NOT_INITIALIZED); say why instead.
  if (!cuda_available()) throw Error("cuBLAS needs an NVIDIA GPU: " + unavailableReason());
  const CublasApi &api = requireCublas();
  checkCublas(api.create(&handle_), "cublasCreate");
  if (cublasStatus_t s = api.setStream(handle_, stream); s != CUBLAS_STATUS_SUCCESS) {
    api.destroy(handle_);
    handle_ = nullptr;
    checkCublas(s, "cublasSetStream");
  }
}

CublasHandle::~CublasHandle() {
  if (handle_) cublas()->destroy(handle_); // a handle exists only where cuBLAS loaded
}

CublasHandle::CublasHandle(CublasHandle &&other) noexcept
    : handle_(std::exchange(other.handle_, nullptr)) {}

CublasHandle &CublasHandle::operator=(CublasHandle &&other) noexcept {
  if (this != &other) {
    if (handle_) cublas()->destroy(handle_);
    handle_ = std::exchange(other.handle_, nullptr);
  }
  return *this;
}

// --- planning a row-major GEMM ------------------------------------------------------------

namespace {

// How a rows x cols matrix lies in memory, in BLAS terms.
struct Layout {
  bool colMajor = false; // columns contiguous (cuBLAS sees it transposed)
  int64_t ld = 1;        // the stride between rows (row-major) or columns (column-major)
};

// The layout of a matrix with these strides, or none when neither its rows nor its columns
// are contiguous and apart. A dimension of size 1 has no stride that matters, so it is given
// the smallest leading dimension BLAS accepts.
std::optional<Layout> layoutOf(int64_t rows, int64_t cols, int64_t rowStride, int64_t colStride) {
  if (rows == 0 || cols == 0) return Layout{false, std::max<int64_t>(1, cols)}; // nothing read
  if (colStride == 1 || cols == 1) {
    const int64_t ld = rows == 1 ? cols : rowStride;
    if (ld >= cols) return Layout{false, ld};
  }
  if (rowStride == 1 || rows == 1) { // here cols > 1: a column is taken above
    if (colStride >= rows) return Layout{true, colStride};
  }
  return std::nullopt;
}

std::string dimsOf(int64_t rows, int64_t cols, const GemmOperand &o) {
  return std::to_string(rows) + " x " + std::to_string(cols) + ", rowStride " +
         std::to_string(o.rowStride) + ", colStride " + std::to_string(o.colStride);
}

struct Planned {
  Layout a, b, c;
};

// The three layouts when cuBLAS can take d; else the reason it cannot.
std::optional<Planned> planLayouts(const GemmDesc &d, std::string &why) {
  if (d.batch < 0 || d.m < 0 || d.n < 0 || d.k < 0) {
    why = "negative GEMM size (batch " + std::to_string(d.batch) + ", m " + std::to_string(d.m) +
          ", n " + std::to_string(d.n) + ", k " + std::to_string(d.k) + ")";
    return std::nullopt;
  }
  if (std::max({d.batch, d.m, d.n, d.k}) > INT_MAX) {
    why = "a GEMM size exceeds cuBLAS's 32-bit int (batch " + std::to_string(d.batch) + ", m " +
          std::to_string(d.m) + ", n " + std::to_string(d.n) + ", k " + std::to_string(d.k) + ")";
    return std::nullopt;
  }
  struct Operand {
    const char *name;
    const GemmOperand &o;
    int64_t rows, cols;
  };
  const Operand ops[] = {{"A", d.a, d.m, d.k}, {"B", d.b, d.k, d.n}, {"C", d.c, d.m, d.n}};
  Layout layouts[3];
  for (int i = 0; i < 3; ++i) {
    const Operand &op = ops[i];
    const std::string shown = std::string(op.name) + " (" + dimsOf(op.rows, op.cols, op.o) + ")";
    if (op.o.batchStride < 0) {
      why = "cuBLAS cannot take operand " + shown + " with a negative batchStride (" +
            std::to_string(op.o.batchStride) + "); make " + op.name + " contiguous first";
      return std::nullopt;
    }
    std::optional<Layout> l = layoutOf(op.rows, op.cols, op.o.rowStride, op.o.colStride);
    if (!l) {
      why = "cuBLAS cannot take the layout of operand " + shown +
            ": it needs the rows or the columns contiguous (one stride 1, the other at least "
            "the extent); make " +
            op.name + " contiguous first";
      return std::nullopt;
    }
    if (i == 2 && l->colMajor) {
      why = "cuBLAS cannot write operand " + shown +
            ": C must be row-major (colStride 1, rowStride at least n)";
      return std::nullopt;
    }
    if (l->ld > INT_MAX) {
      why = "operand " + shown + " has a leading dimension beyond cuBLAS's 32-bit int";
      return std::nullopt;
    }
    layouts[i] = *l;
  }
  // C's matrices must not overlap: whole matrices apart, or rows interleaved batch by batch.
  if (d.batch > 1 && d.m > 0 && d.n > 0) {
    const int64_t s = d.c.batchStride, ld = layouts[2].ld;
    const bool apart = s >= (d.m - 1) * ld + d.n;
    const bool interleaved = s >= d.n && (ld - d.n) / (d.batch - 1) >= s; // ld >= n
    if (!apart && !interleaved) {
      why = "cuBLAS cannot write operand C (" + dimsOf(d.m, d.n, d.c) + ", batchStride " +
            std::to_string(s) + "): its " + std::to_string(d.batch) + " matrices overlap";
      return std::nullopt;
    }
  }
  return Planned{layouts[0], layouts[1], layouts[2]};
}

// cuBLAS's data and compute types for a dtype.
std::optional<std::pair<cudaDataType_t, cublasComputeType_t>> typesOf(DType t, bool tf32) {
  switch (t) {
  case DType::f32:
    return std::pair{CUDA_R_32F, tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F};
  case DType::f64:
    return std::pair{CUDA_R_64F, CUBLAS_COMPUTE_64F};
  case DType::f16:
    return std::pair{CUDA_R_16F, CUBLAS_COMPUTE_32F};
  case DType::bf16:
    return std::pair{CUDA_R_16BF, CUBLAS_COMPUTE_32F};
  case DType::i32:
  case DType::i64:
  case DType::boolean:
    return std::nullopt;
  }
  return std::nullopt;
}

const char *opName(cublasOperation_t op) { return op == CUBLAS_OP_N ? "N" : "T"; }

// The call, for error messages: every argument that can make cuBLAS refuse it.
std::string callOf(const CublasGemmArgs &g, DType dtype) {
  return "cublasGemmStridedBatchedEx(" + std::string(dtypeName(dtype)) + ", " + opName(g.transa) +
         opName(g.transb) + ", m " + std::to_string(g.m) + ", n " + std::to_string(g.n) + ", k " +
         std::to_string(g.k) + ", lda " + std::to_string(g.lda) + ", ldb " + std::to_string(g.ldb) +
         ", ldc " + std::to_string(g.ldc) + ", strides " + std::to_string(g.strideA) + "/" +
         std::to_string(g.strideB) + "/" + std::to_string(g.strideC) + ", batch " +
         std::to_string(g.batchCount) + ")";
}

} // namespace

bool gemmLayoutSupported(const GemmDesc &d, std::string *why) {
  std::string reason;
  const bool ok = planLayouts(d, reason).has_value();
  if (why) *why = reason;
  return ok;
}

CublasGemmArgs planGemm(const GemmDesc &d) {
  const auto types = typesOf(d.dtype, d.allowTf32);
  if (!types) {
    throw Error("planGemm: cuBLAS GEMM does not take dtype " + std::string(dtypeName(d.dtype)) +
                " (it takes f32, f64, f16 and bf16)");
  }
  std::string why;
  const std::optional<Planned> p = planLayouts(d, why);
  if (!p) throw Error("planGemm: " + why);
  // Row-major C (m x n) is column-major C^T (n x m) = B^T (n x k) x A^T (k x m): cuBLAS's A
  // is our B and its B is our A. A row-major operand read column-major is its transpose, so
  // it goes in untransposed (OP_N); a column-major one goes in as OP_T.
  CublasGemmArgs g;
  g.swapAB = true;
  g.m = static_cast<int>(d.n);
  g.n = static_cast<int>(d.m);
  g.k = static_cast<int>(d.k);
  g.transa = p->b.colMajor ? CUBLAS_OP_T : CUBLAS_OP_N;
  g.transb = p->a.colMajor ? CUBLAS_OP_T : CUBLAS_OP_N;
  g.lda = static_cast<int>(p->b.ld);
  g.ldb = static_cast<int>(p->a.ld);
  g.ldc = static_cast<int>(p->c.ld);
  // With one matrix the strides are never used; 0 keeps equal calls equal.
  const bool batched = d.batch > 1;
  g.strideA = batched ? d.b.batchStride : 0;
  g.strideB = batched ? d.a.batchStride : 0;
  g.strideC = batched ? d.c.batchStride : 0;
  g.batchCount = static_cast<int>(d.batch);
  g.aType = g.bType = g.cType = types->first;
  g.computeType = types->second;
  g.doubleScalars = types->second == CUBLAS_COMPUTE_64F;
  g.algo = CUBLAS_GEMM_DEFAULT;
  return g;
}

void runGemm(cublasHandle_t handle, const GemmDesc &d, const void *a, const void *b, void *c,
             CUstream stream) {
  const CublasGemmArgs g = planGemm(d);
  if (d.batch == 0 || d.m == 0 || d.n == 0) return; // C is empty
  if (d.k == 0) {
    throw Error("runGemm: k is 0, so C is all zeros; fill it directly (cuBLAS is not relied on "
                "to write C for an empty sum)");
  }
  if (!handle) throw Error("runGemm: no cuBLAS handle");
  const CublasApi &api = requireCublas();
  checkCublas(api.setStream(handle, stream), "cublasSetStream");
  const float oneF = 1.0f, zeroF = 0.0f;
  const double oneD = 1.0, zeroD = 0.0;
  const void *alpha = g.doubleScalars ? static_cast<const void *>(&oneD) : &oneF;
  const void *beta = g.doubleScalars ? static_cast<const void *>(&zeroD) : &zeroF;
  const void *first = g.swapAB ? b : a;
  const void *second = g.swapAB ? a : b;
  const cublasStatus_t s =
      api.gemmStridedBatchedEx(handle, g.transa, g.transb, g.m, g.n, g.k, alpha, first, g.aType,
                               g.lda, g.strideA, second, g.bType, g.ldb, g.strideB, beta, c,
                               g.cType, g.ldc, g.strideC, g.batchCount, g.computeType, g.algo);
  if (s != CUBLAS_STATUS_SUCCESS) checkCublas(s, callOf(g, d.dtype).c_str());
}

} // namespace rcjit::cuda
