// The device collectives' hook slot, and the NCCL communicators: one per device, made with
// rank 0's unique id broadcast over the job's MPI communicator.
#include "dist/DeviceCollectives.h"

#include "dist/Agreement.h"
#include "dist/Comm.h"

#include <atomic>
#include <map>

#include <rcjit/Error.h>

namespace rcjit::dist::detail {

namespace {

constexpr size_t kIdBytes = 128; // NCCL_UNIQUE_ID_BYTES

std::atomic<const DeviceCollectives *> installed{nullptr};

// Communicators by device index; guarded by lockMpi().
std::map<int, void *> &communicators() {
  static auto *m = new std::map<int, void *>(); // never destroyed: NCCL may outlive statics
  return *m;
}

} // namespace

void installDeviceCollectives(const DeviceCollectives &c) {
  static DeviceCollectives slot;
  slot = c;
  installed.store(&slot, std::memory_order_release);
}

const DeviceCollectives *deviceCollectives() { return installed.load(std::memory_order_acquire); }

std::string deviceUnavailable(const Tensor &t) {
  if (!t.defined() || t.device().is_cpu()) return "";
  const DeviceCollectives *d = deviceCollectives();
  if (!d) return "this build has no device collectives (targets/cuda is not linked)";
  return d->unavailable(t.device());
}

bool needsCommunicator(const Tensor &t) { return communicators().count(t.device().index) == 0; }

void *communicatorFor(const Tensor &t, const Comm &c, const std::string &context) {
  auto &comms = communicators();
  const int device = t.device().index;
  if (auto it = comms.find(device); it != comms.end()) return it->second;
  const DeviceCollectives *d = deviceCollectives();
  if (!d) throw Error(context + ": no device collectives in this build");
  std::vector<uint8_t> id(kIdBytes);
  if (c.rank == 0) {
    id = d->newId();
    if (id.size() != kIdBytes) throw Error(context + ": NCCL unique id of the wrong size");
  }
  MPI_Request request = MPI_REQUEST_NULL;
  checkMpi(MPI_Ibcast(id.data(), static_cast<int>(kIdBytes), MPI_BYTE, 0, c.comm, &request),
           "MPI_Ibcast (the NCCL unique id)", context);
  checkMpi(waitRequest(request, "sending the NCCL unique id", context),
           "MPI_Ibcast (the NCCL unique id)", context);
  void *comm = d->join(t.device(), c.rank, c.size, id);
  comms[device] = comm;
  return comm;
}

} // namespace rcjit::dist::detail
