// NCCL loaded with dlopen, and dist's device-collective hook over it: communicators per
// device, collectives on the device's stream, waits bounded by the collective timeout.
#include "targets/cuda/CudaNccl.h"

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>

#include <rcjit/Error.h>

#include "dist/Agreement.h"
#include "dist/DeviceCollectives.h"
#include "targets/cuda/CudaDriver.h"
#include "targets/cuda/CudaRuntime.h"

namespace rcjit::cuda {

namespace {

// ncclDataType_t and ncclRedOp_t values (nccl.h)
constexpr int kInt8 = 0, kUint8 = 1, kInt32 = 2, kInt64 = 4, kFloat16 = 6, kFloat32 = 7,
              kFloat64 = 8, kBfloat16 = 9;
constexpr int kSum = 0, kMax = 2, kAvg = 4;
constexpr NcclResult kSuccess = 0, kInProgress = 7;

void resolveNccl(void *lib, NcclApi &a, std::string &missing) {
  resolve(lib, "ncclGetVersion", a.getVersion, missing);
  resolve(lib, "ncclGetUniqueId", a.getUniqueId, missing);
  resolve(lib, "ncclCommInitRank", a.commInitRank, missing);
  resolve(lib, "ncclCommAbort", a.commAbort, missing);
  resolve(lib, "ncclCommGetAsyncError", a.commGetAsyncError, missing);
  resolve(lib, "ncclAllReduce", a.allReduce, missing);
  resolve(lib, "ncclAllGather", a.allGather, missing);
  resolve(lib, "ncclReduceScatter", a.reduceScatter, missing);
  resolve(lib, "ncclBroadcast", a.broadcast, missing);
  resolve(lib, "ncclGetErrorString", a.getErrorString, missing);
}

const NcclLoad &processNccl() {
  static const NcclLoad load = probeNccl(ncclLibraryName());
  return load;
}

const NcclApi &requireNccl() {
  if (const NcclApi *a = nccl()) return *a;
  throw Error("NCCL is not available: " + ncclUnavailableReason());
}

void checkNccl(NcclResult r, const std::string &what) {
  if (r == kSuccess) return;
  const NcclApi *a = nccl();
  const char *text = a ? a->getErrorString(r) : nullptr;
  throw Error(what + " failed: " + (text ? text : "ncclResult_t " + std::to_string(r)) +
              " (NCCL_DEBUG=WARN says more)");
}

// cuStreamQuery, which DriverApi does not carry: the wait polls it.
using StreamQueryFn = CUresult (*)(CUstream);
StreamQueryFn streamQuery() {
  static const StreamQueryFn fn = [] {
    std::string reason, missing;
    void *lib = openLibrary(driverLibraryName(), reason);
    StreamQueryFn f = nullptr;
    if (lib) resolve(lib, "cuStreamQuery", f, missing);
    return f;
  }();
  return fn;
}

int ncclType(DType t, bool reduces) {
  if (!reduces) return kUint8; // moved as bytes
  switch (t) {
  case DType::f32:
    return kFloat32;
  case DType::f64:
    return kFloat64;
  case DType::f16:
    return kFloat16;
  case DType::bf16:
    return kBfloat16;
  case DType::i32:
    return kInt32;
  case DType::i64:
    return kInt64;
  case DType::boolean:
    return kInt8;
  }
  return kUint8;
}

// Elements NCCL counts for `t`: bytes when the collective only moves data.
size_t ncclCount(const Tensor &t, bool reduces) {
  return static_cast<size_t>(t.numel()) * (reduces ? 1 : dtypeSize(t.dtype()));
}

std::string unavailableHook(Device d) { return ncclDeviceUnavailable(d.index); }

std::vector<uint8_t> newIdHook() {
  const NcclApi &a = requireNccl();
  NcclUniqueId id{};
  checkNccl(a.getUniqueId(&id), "ncclGetUniqueId");
  return std::vector<uint8_t>(id.internal, id.internal + sizeof id.internal);
}

void *joinHook(Device d, int rank, int size, const std::vector<uint8_t> &id) {
  const NcclApi &a = requireNccl();
  DeviceContext::get(d.index).makeCurrent(); // the communicator's device is the current one
  NcclUniqueId uid{};
  std::memcpy(uid.internal, id.data(), std::min(id.size(), sizeof uid.internal));
  NcclComm comm = nullptr;
  checkNccl(a.commInitRank(&comm, size, uid, rank),
            "ncclCommInitRank (rank " + std::to_string(rank) + " of " + std::to_string(size) +
                " on " + d.str() + ")");
  return comm;
}

void startHook(void *comm, dist::detail::Kind kind, dist::ReduceOp op, int root, const Tensor &in,
               const Tensor &out) {
  using dist::detail::Kind;
  const NcclApi &a = requireNccl();
  DeviceContext &ctx = DeviceContext::get(in.device().index);
  ctx.makeCurrent();
  auto *c = static_cast<NcclComm>(comm);
  void *stream = ctx.stream();
  const bool reduces = kind == Kind::all_reduce || kind == Kind::reduce_scatter;
  const int type = ncclType(in.dtype(), reduces);
  const int redOp = op == dist::ReduceOp::max ? kMax : op == dist::ReduceOp::mean ? kAvg : kSum;
  switch (kind) {
  case Kind::all_reduce:
    checkNccl(
        a.allReduce(in.data_ptr(), out.data_ptr(), ncclCount(in, true), type, redOp, c, stream),
        "ncclAllReduce");
    return;
  case Kind::all_gather:
    checkNccl(a.allGather(in.data_ptr(), out.data_ptr(), ncclCount(in, false), type, c, stream),
              "ncclAllGather");
    return;
  case Kind::reduce_scatter:
    checkNccl(
        a.reduceScatter(in.data_ptr(), out.data_ptr(), ncclCount(out, true), type, kSum, c, stream),
        "ncclReduceScatter");
    return;
  case Kind::broadcast:
    checkNccl(
        a.broadcast(in.data_ptr(), out.data_ptr(), ncclCount(in, false), type, root, c, stream),
        "ncclBroadcast");
    return;
  default:
    throw Error(std::string("NCCL has no ") + dist::detail::kindName(kind));
  }
}

// Polls the stream (and NCCL's asynchronous error) until done; past `seconds` aborts the
// communicator, so a dead peer is an Error rather than a hang.
void waitHook(void *comm, Device d, double seconds, const std::string &context) {
  const NcclApi &a = requireNccl();
  DeviceContext &ctx = DeviceContext::get(d.index);
  ctx.makeCurrent();
  auto *c = static_cast<NcclComm>(comm);
  StreamQueryFn query = streamQuery();
  if (!query) { // an old driver without it: wait without a bound
    ctx.synchronize();
    return;
  }
  const auto start = std::chrono::steady_clock::now();
  for (;;) {
    const CUresult r = query(ctx.stream());
    if (r == CUDA_SUCCESS) return;
    if (r != CUDA_ERROR_NOT_READY) check(r, (context + ": waiting for NCCL").c_str());
    NcclResult async = kSuccess;
    a.commGetAsyncError(c, &async);
    if (async != kSuccess && async != kInProgress) {
      a.commAbort(c);
      checkNccl(async, context + ": NCCL (asynchronous error)");
    }
    const double waited =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (waited > seconds) {
      a.commAbort(c);
      char secs[32];
      std::snprintf(secs, sizeof secs, "%g", seconds);
      throw Error(context + ": NCCL made no progress for " + secs +
                  " s: another rank died, hangs, or stopped calling collectives in the same "
                  "order (RCJIT_DIST_TIMEOUT sets the limit in seconds)");
    }
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
}

const bool installed = [] {
  dist::detail::installDeviceCollectives({.unavailable = &unavailableHook,
                                          .newId = &newIdHook,
                                          .join = &joinHook,
                                          .start = &startHook,
                                          .wait = &waitHook});
  return true;
}();

} // namespace

NcclLoad probeNccl(const std::string &library) {
  NcclLoad out;
  if (!openAndResolve(out, library, resolveNccl, "NCCL 2")) return out;
  int v = 0;
  if (out.api.getVersion(&v) == kSuccess) out.version = v;
  return out;
}

std::string ncclLibraryName() {
  const char *env = std::getenv("RCJIT_NCCL");
  return env && *env ? env : "libnccl.so.2";
}

const NcclApi *nccl() {
  const NcclLoad &l = processNccl();
  return l.reason.empty() ? &l.api : nullptr;
}

const std::string &ncclUnavailableReason() { return processNccl().reason; }

std::string ncclDeviceUnavailable(int ordinal) {
  if (!driver()) return "CUDA is not available: " + unavailableReason();
  try {
    (void)deviceInfo(ordinal);
  } catch (const Error &e) {
    return std::string("cuda:") + std::to_string(ordinal) + ": " + e.what();
  }
  if (!nccl()) return "NCCL is not available: " + ncclUnavailableReason();
  return "";
}

} // namespace rcjit::cuda
