// Finding a captured Tensor's variable inside a lambda object (see CapturedVariables.h).
#include "jit/CapturedVariables.h"

#include <sys/uio.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>

namespace rcjit::detail {

namespace {

// Copies n bytes at `addr` of this process into out; false where they are not readable.
bool readOwnMemory(uintptr_t addr, void *out, size_t n) {
  iovec local{out, n};
  iovec remote{reinterpret_cast<void *>(addr), n};
  return ::process_vm_readv(::getpid(), &local, 1, &remote, 1, 0) == static_cast<ssize_t>(n);
}

} // namespace

Tensor *findCapturedVariable(const Tensor &t, const void *fnObject, size_t fnBytes) {
  if (!fnObject || fnBytes < sizeof(void *) || !t.defined()) return nullptr;
  // A Tensor is one shared handle: any Tensor sharing t's handle has exactly these bytes.
  const Tensor copy = t;
  unsigned char want[sizeof(Tensor)];
  std::memcpy(want, static_cast<const void *>(&copy), sizeof want);
  auto *obj = static_cast<unsigned char *>(const_cast<void *>(fnObject));
  for (size_t o = 0; o + sizeof(Tensor) <= fnBytes; o += alignof(Tensor)) {
    if (std::memcmp(obj + o, want, sizeof want) == 0) return reinterpret_cast<Tensor *>(obj + o);
  }
  for (size_t o = 0; o + sizeof(uintptr_t) <= fnBytes; o += alignof(uintptr_t)) {
    uintptr_t p = 0;
    std::memcpy(&p, obj + o, sizeof p);
    if (p == 0 || p % alignof(Tensor) != 0) continue;
    unsigned char got[sizeof(Tensor)];
    if (readOwnMemory(p, got, sizeof got) && std::memcmp(got, want, sizeof want) == 0) {
      return reinterpret_cast<Tensor *>(p);
    }
  }
  return nullptr;
}

} // namespace rcjit::detail
