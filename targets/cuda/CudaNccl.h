// NCCL, loaded at run time with dlopen, for rcjit::dist's collectives on cuda tensors.
//
// rcjit never links libnccl and needs no nccl.h: the few types NCCL's C API passes are
// declared here (their values are NCCL's ABI, stable since 2.x). The first use loads
// $RCJIT_NCCL or libnccl.so.2 and resolves every entry point; the outcome is kept for the
// life of the process. Loading needs no GPU; making a communicator does. The entry points
// reach dist/ through the hook it declares (dist/DeviceCollectives.h), installed when
// librcjit.so loads.
#pragma once
#include <string>

namespace rcjit::cuda {

/// NCCL's C types as the library passes them (nccl.h); the enums (ncclDataType_t,
/// ncclRedOp_t) are passed as int.
struct NcclUniqueId {
  char internal[128];
};
using NcclComm = struct ncclComm *;
using NcclResult = int; // ncclResult_t: 0 success, 7 in progress

/// The NCCL entry points rcjit uses (CUstream passed as void *).
struct NcclApi {
  NcclResult (*getVersion)(int *) = nullptr;
  NcclResult (*getUniqueId)(NcclUniqueId *) = nullptr;
  NcclResult (*commInitRank)(NcclComm *, int, NcclUniqueId, int) = nullptr;
  NcclResult (*commAbort)(NcclComm) = nullptr;
  NcclResult (*commGetAsyncError)(NcclComm, NcclResult *) = nullptr;
  NcclResult (*allReduce)(const void *, void *, size_t, int, int, NcclComm, void *) = nullptr;
  NcclResult (*allGather)(const void *, void *, size_t, int, NcclComm, void *) = nullptr;
  NcclResult (*reduceScatter)(const void *, void *, size_t, int, int, NcclComm, void *) = nullptr;
  NcclResult (*broadcast)(const void *, void *, size_t, int, int, NcclComm, void *) = nullptr;
  const char *(*getErrorString)(NcclResult) = nullptr;
};

/// The outcome of loading an NCCL library: the entry points when usable, else why not.
struct NcclLoad {
  NcclApi api;
  std::string reason;  // empty: loaded and every entry point resolved
  std::string library; // what was dlopened
  int version = 0;     // ncclGetVersion: 10000 * major + 100 * minor + patch (from 2.9)
  void *handle = nullptr;
};

/// Loads `library` and resolves every NcclApi entry point. Never throws: a failure is a load
/// with `reason` set ("libnccl.so.2 not found: <dlerror>", or the missing entry points).
NcclLoad probeNccl(const std::string &library);
/// $RCJIT_NCCL when set, else "libnccl.so.2".
std::string ncclLibraryName();
/// The process-wide NCCL (probeNccl(ncclLibraryName()), once), or nullptr.
const NcclApi *nccl();
/// Why NCCL cannot be loaded in this process; empty when it can.
const std::string &ncclUnavailableReason();
/// Why collectives on cuda device `ordinal` cannot run: CUDA's reason (no driver, no GPU),
/// the device does not exist, or NCCL's; "" when they can.
std::string ncclDeviceUnavailable(int ordinal);

} // namespace rcjit::cuda
