// Collectives on device tensors (NCCL for cuda): a hook that targets/cuda installs.
//
// Why a hook: dist/ sits below targets/, where the CUDA driver, the device streams and the
// NCCL loader live. dist/ keeps the logic every collective shares (the shape check with
// every rank over MPI, the buffers' layout, the NCCL unique id sent over the MPI
// communicator, one NCCL communicator per device); targets/cuda/CudaNccl.cpp installs these
// entry points when librcjit.so loads (the slot is constant-initialized, so it is filled
// before any code outside the library runs).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <rcjit/Dist.h>

namespace rcjit::dist::detail {

// Without MPI's header (the tests include this one): Agreement.h and Comm.h define them.
enum class Kind : int32_t;
struct Comm;

/// The device side's entry points. Each throws rcjit::Error naming what failed.
struct DeviceCollectives {
  /// "" when collectives on `device`'s tensors can run in this process, else why not (no
  /// CUDA driver or GPU: the driver's reason; no NCCL: "libnccl.so.2 not found: ...").
  std::string (*unavailable)(Device device) = nullptr;
  /// A fresh NCCL unique id (made by rank 0, sent to the others over MPI).
  std::vector<uint8_t> (*newId)() = nullptr;
  /// This rank's communicator of `size` ranks on `device` (ncclCommInitRank: every rank
  /// calls it with the same id). Opaque; kept for the process.
  void *(*join)(Device device, int rank, int size, const std::vector<uint8_t> &id) = nullptr;
  /// Enqueues one collective on the device's stream: all_reduce (`in` may be `out`),
  /// all_gather (`out` holds size x in), reduce_scatter (`in` holds size x out) or broadcast
  /// from `root` (in place). Contiguous tensors of one dtype on the communicator's device.
  void (*start)(void *comm, Kind kind, ReduceOp op, int root, const Tensor &in,
                const Tensor &out) = nullptr;
  /// Waits until what was enqueued on `device`'s stream is done, at most `seconds`; past it
  /// aborts the communicator and throws "<context>: NCCL made no progress for N s: ...".
  void (*wait)(void *comm, Device device, double seconds, const std::string &context) = nullptr;
};

/// Installs the device collectives (targets/cuda, once, at library load). Thread-safe.
void installDeviceCollectives(const DeviceCollectives &c);
/// The installed device collectives, or nullptr (a build without targets/cuda).
const DeviceCollectives *deviceCollectives();

/// Why collectives cannot run on `t`'s device here ("" when they can, and for CPU tensors).
std::string deviceUnavailable(const Tensor &t);

/// Whether this rank has no NCCL communicator for `t`'s device yet (the record's `fresh`:
/// every rank must be making one at the same call). The caller holds lockMpi().
bool needsCommunicator(const Tensor &t);

/// The NCCL communicator for `t`'s device: made on first use (rank 0's unique id broadcast
/// over the MPI communicator, then ncclCommInitRank on every rank). The caller holds
/// lockMpi() and has agreed on the call with every rank.
void *communicatorFor(const Tensor &t, const Comm &c, const std::string &context);

} // namespace rcjit::dist::detail
