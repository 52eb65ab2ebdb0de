// Storage: 64-byte aligned CPU blocks with a bounded cache of large freed blocks; device
// memory from the device's caching allocator (targets/cuda/CudaRuntime.h).
//
// Large tensors are allocated and freed on every eager op; returning their pages to the
// OS and faulting them back in costs more than the op itself. Freed blocks of 1 MiB or
// more are kept (up to kCacheLimit bytes in all) and handed out again for the same size.
#include <cstdlib>
#include <map>
#include <mutex>

#include "targets/cuda/CudaRuntime.h"
#include "tracer/CheckedSize.h"
#include "tracer/TensorImpl.h"

namespace rcjit::detail {

namespace {

constexpr size_t kAlign = 64;
constexpr size_t kCacheMin = size_t{1} << 20;
constexpr size_t kCacheLimit = size_t{1} << 30;

class BlockCache {
public:
  void *take(size_t bytes) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = free_.find(bytes);
    if (it == free_.end()) return nullptr;
    void *p = it->second;
    free_.erase(it);
    cached_ -= bytes;
    return p;
  }
  void give(void *p, size_t bytes) {
    std::lock_guard<std::mutex> lock(mu_);
    while (cached_ + bytes > kCacheLimit && !free_.empty()) {
      auto largest = std::prev(free_.end());
      cached_ -= largest->first;
      std::free(largest->second);
      free_.erase(largest);
    }
    if (cached_ + bytes > kCacheLimit) {
      std::free(p);
      return;
    }
    free_.emplace(bytes, p);
    cached_ += bytes;
  }

private:
  std::mutex mu_;
  std::multimap<size_t, void *> free_;
  size_t cached_ = 0;
};

BlockCache &blockCache() {
  static BlockCache *cache = new BlockCache(); // never destroyed: storage may outlive statics
  return *cache;
}

} // namespace

std::shared_ptr<Storage> allocateStorage(size_t nbytes, Device device) {
  if (device.is_cuda()) {
    cuda::DeviceContext &ctx = cuda::DeviceContext::get(device.index);
    auto s = std::make_shared<Storage>();
    s->data = reinterpret_cast<void *>(ctx.allocate(nbytes));
    s->nbytes = nbytes;
    s->device = device;
    s->release = [&ctx, nbytes](void *q) { ctx.release(reinterpret_cast<CUdeviceptr>(q), nbytes); };
    return s;
  }
  auto s = std::make_shared<Storage>();
  if (nbytes > static_cast<size_t>(kMaxTensorBytes)) {
    throw AllocationError(std::to_string(nbytes) + " bytes is more than a tensor may span");
  }
  size_t bytes = (nbytes + kAlign - 1) / kAlign * kAlign;
  if (bytes == 0) bytes = kAlign;
  void *p = bytes >= kCacheMin ? blockCache().take(bytes) : nullptr;
  if (!p) p = std::aligned_alloc(kAlign, bytes);
  if (!p) {
    throw AllocationError("out of memory on the CPU (aligned_alloc of " + std::to_string(bytes) +
                          " bytes failed)");
  }
  s->data = p;
  s->nbytes = nbytes;
  s->device = device;
  if (bytes >= kCacheMin) {
    s->release = [bytes](void *q) { blockCache().give(q, bytes); };
  } else {
    s->release = [](void *q) { std::free(q); };
  }
  return s;
}

} // namespace rcjit::detail
