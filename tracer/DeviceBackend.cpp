// The registry of device backends, one slot per device kind.
#include "tracer/DeviceBackend.h"

#include <atomic>

#include <rcjit/Error.h>

namespace rcjit::detail {

namespace {
constexpr size_t kKinds = 2; // Device::Kind::cpu, cuda
std::atomic<DeviceBackend *> backends[kKinds];
} // namespace

void registerDeviceBackend(Device::Kind k, DeviceBackend *backend) {
  backends[static_cast<size_t>(k)].store(backend, std::memory_order_release);
}

DeviceBackend &deviceBackend(Device d) {
  DeviceBackend *b = backends[static_cast<size_t>(d.kind)].load(std::memory_order_acquire);
  if (!b) throw Error("no backend serves device " + d.str() + " in this build");
  return *b;
}

} // namespace rcjit::detail
