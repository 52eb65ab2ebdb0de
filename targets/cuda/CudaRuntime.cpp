// Device contexts: primary context, one stream and a caching allocator per device.
#include "targets/cuda/CudaRuntime.h"

#include <array>
#include <atomic>
#include <vector>

#include <rcjit/Error.h>

namespace rcjit::cuda {

namespace {

constexpr size_t kSmallQuantum = 512;
constexpr size_t kLargeFrom = size_t{1} << 20;
constexpr size_t kLargeQuantum = size_t{2} << 20;
constexpr int kMaxDevices = 64;

std::string mib(size_t bytes) { return std::to_string((bytes + (size_t{1} << 19)) >> 20) + " MiB"; }

} // namespace

size_t allocationClass(size_t bytes) {
  if (bytes == 0) bytes = 1;
  size_t q = bytes < kLargeFrom ? kSmallQuantum : kLargeQuantum;
  return (bytes + q - 1) / q * q;
}

DeviceContext &DeviceContext::get(int ordinal) {
  static std::mutex mu;
  // never destroyed (see header); read without the lock once published
  static std::array<std::atomic<DeviceContext *>, kMaxDevices> contexts{};
  if (ordinal >= 0 && ordinal < kMaxDevices) {
    if (DeviceContext *c = contexts[static_cast<size_t>(ordinal)].load(std::memory_order_acquire)) {
      c->makeCurrent(); // every tensor allocation comes here: no driver query on this path
      return *c;
    }
  }
  const DriverApi &api = requireCuda();
  int count = 0;
  check(api.deviceGetCount(&count), "cuDeviceGetCount");
  if (ordinal < 0 || ordinal >= count || ordinal >= kMaxDevices) {
    throw Error("cuda:" + std::to_string(ordinal) + ": no such device (this machine has " +
                std::to_string(count) + " CUDA device" + (count == 1 ? "" : "s") + ")");
  }
  std::lock_guard<std::mutex> lock(mu);
  std::atomic<DeviceContext *> &slot = contexts[static_cast<size_t>(ordinal)];
  DeviceContext *c = slot.load(std::memory_order_relaxed);
  if (!c) {
    c = new DeviceContext(ordinal);
    slot.store(c, std::memory_order_release);
  }
  c->makeCurrent();
  return *c;
}

DeviceContext::DeviceContext(int ordinal) {
  const DriverApi &api = requireCuda();
  CUdevice dev = 0;
  check(api.deviceGet(&dev, ordinal), "cuDeviceGet");
  check(api.devicePrimaryCtxRetain(&ctx_, dev), "cuDevicePrimaryCtxRetain");
  check(api.ctxSetCurrent(ctx_), "cuCtxSetCurrent");
  check(api.streamCreate(&stream_, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  info_ = deviceInfo(ordinal);
  ptx_ = ptxOptionsForDevice(info_.major, info_.minor, info_.driverPtxVersion);
}

void DeviceContext::makeCurrent() const {
  thread_local CUcontext current = nullptr;
  if (current == ctx_) return;
  check(requireCuda().ctxSetCurrent(ctx_), "cuCtxSetCurrent");
  current = ctx_;
}

CUdeviceptr DeviceContext::allocate(size_t bytes) {
  const size_t cls = allocationClass(bytes);
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = free_.find(cls);
    if (it != free_.end()) {
      CUdeviceptr p = it->second;
      free_.erase(it);
      stats_.cached -= cls;
      stats_.allocated += cls;
      ++stats_.reuses;
      return p;
    }
  }
  makeCurrent();
  const DriverApi &api = requireCuda();
  CUdeviceptr p = 0;
  CUresult r = api.memAlloc(&p, cls);
  if (r == CUDA_ERROR_OUT_OF_MEMORY) {
    emptyCache();
    r = api.memAlloc(&p, cls);
  }
  if (r == CUDA_ERROR_OUT_OF_MEMORY) {
    size_t freeBytes = 0, total = 0;
    api.memGetInfo(&freeBytes, &total);
    throw Error("out of memory on cuda:" + std::to_string(info_.ordinal) + ": could not allocate " +
                std::to_string(bytes) + " bytes (" + mib(freeBytes) + " free of " + mib(total) +
                "; rcjit holds " + mib(stats().allocated) + " in tensors)");
  }
  check(r, "cuMemAlloc");
  std::lock_guard<std::mutex> lock(mu_);
  stats_.allocated += cls;
  ++stats_.deviceMallocs;
  return p;
}

void DeviceContext::release(CUdeviceptr p, size_t bytes) {
  const size_t cls = allocationClass(bytes);
  std::lock_guard<std::mutex> lock(mu_);
  free_.emplace(cls, p);
  stats_.allocated -= cls;
  stats_.cached += cls;
}

void DeviceContext::emptyCache() {
  synchronize();
  std::multimap<size_t, CUdeviceptr> blocks;
  {
    std::lock_guard<std::mutex> lock(mu_);
    blocks.swap(free_);
    stats_.cached = 0;
  }
  const DriverApi &api = requireCuda();
  for (const auto &[size, p] : blocks) check(api.memFree(p), "cuMemFree");
}

AllocatorStats DeviceContext::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void DeviceContext::synchronize() const {
  makeCurrent();
  check(requireCuda().streamSynchronize(stream_), "cuStreamSynchronize");
}

void DeviceContext::copyToDevice(CUdeviceptr dst, const void *src, size_t bytes) const {
  if (!bytes) return;
  makeCurrent();
  check(requireCuda().memcpyHtoDAsync(dst, src, bytes, stream_), "cuMemcpyHtoDAsync");
  synchronize(); // the host buffer may be reused as soon as this returns
}

void DeviceContext::copyToHost(void *dst, CUdeviceptr src, size_t bytes) const {
  if (!bytes) return;
  makeCurrent();
  check(requireCuda().memcpyDtoHAsync(dst, src, bytes, stream_), "cuMemcpyDtoHAsync");
  synchronize();
}

void DeviceContext::copyOnDevice(CUdeviceptr dst, CUdeviceptr src, size_t bytes) const {
  if (!bytes) return;
  makeCurrent();
  check(requireCuda().memcpyDtoDAsync(dst, src, bytes, stream_), "cuMemcpyDtoDAsync");
}

void DeviceContext::fill(CUdeviceptr dst, uint64_t bits, size_t elementBytes, size_t count) const {
  if (!count) return;
  makeCurrent();
  const DriverApi &api = requireCuda();
  switch (elementBytes) {
  case 1:
    check(api.memsetD8Async(dst, static_cast<unsigned char>(bits), count, stream_),
          "cuMemsetD8Async");
    return;
  case 2:
    check(api.memsetD16Async(dst, static_cast<unsigned short>(bits), count, stream_),
          "cuMemsetD16Async");
    return;
  case 4:
    check(api.memsetD32Async(dst, static_cast<unsigned>(bits), count, stream_), "cuMemsetD32Async");
    return;
  case 8: {
    const auto lo = static_cast<unsigned>(bits), hi = static_cast<unsigned>(bits >> 32);
    if (lo == hi) {
      check(api.memsetD32Async(dst, lo, 2 * count, stream_), "cuMemsetD32Async");
      return;
    }
    // two strided 32-bit fills: the low words (pitch 8 bytes, one word per row), then the high
    check(api.memsetD2D32Async(dst, 8, lo, 1, count, stream_), "cuMemsetD2D32Async");
    check(api.memsetD2D32Async(dst + 4, 8, hi, 1, count, stream_), "cuMemsetD2D32Async");
    return;
  }
  default:
    throw Error("DeviceContext::fill: element size " + std::to_string(elementBytes) +
                " is not 1, 2, 4 or 8");
  }
}

} // namespace rcjit::cuda
