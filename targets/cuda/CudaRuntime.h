// One CUDA device in use: its primary context, its stream and its caching allocator.
//
// Everything rcjit does on a device is ordered on that device's one stream: copies, memsets,
// kernels, cuBLAS calls and CUDA graph launches. Stream order is what makes the caching
// allocator simple and safe: a block freed on the host after its last use was enqueued is
// handed out again only to work enqueued later on the same stream, so it is never reused
// while a kernel still reads it. Host reads (to_vector, item, copies to the CPU) synchronize
// the stream.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include <cuda.h>

#include "targets/cuda/CudaDriver.h"
#include "targets/cuda/PtxCodegen.h"

namespace rcjit::cuda {

/// What the caching allocator holds.
struct AllocatorStats {
  uint64_t allocated = 0;     // bytes handed out and not yet released
  uint64_t cached = 0;        // bytes freed by rcjit and kept for reuse
  uint64_t deviceMallocs = 0; // cuMemAlloc calls so far
  uint64_t reuses = 0;        // allocations served from the cache
};

/// Rounds a request to the size class the allocator keeps: multiples of 512 bytes below
/// 1 MiB, of 2 MiB from there on (so a freed block serves any request of its class). Pure.
size_t allocationClass(size_t bytes);

/// A device in use. One per ordinal, created on first use and kept for the life of the
/// process (device memory may be freed by tensors that outlive static destructors).
/// Thread-safe.
class DeviceContext {
public:
  /// The context of device `ordinal`; throws rcjit::Error when CUDA is unavailable or the
  /// ordinal does not exist. Makes the device's context current on the calling thread.
  static DeviceContext &get(int ordinal = 0);

  /// Makes this device's primary context current on the calling thread (cheap when it is).
  void makeCurrent() const;
  CUstream stream() const { return stream_; }
  const DeviceInfo &info() const { return info_; }
  /// The PTX target for this device and driver (arch, PTX ISA).
  const PtxOptions &ptxOptions() const { return ptx_; }

  /// Device memory of at least `bytes` (256-byte aligned), from the cache when a block of
  /// the size class is free, else from cuMemAlloc; on out-of-memory the cache is emptied
  /// and the allocation retried. Throws rcjit::Error naming the size when memory runs out.
  CUdeviceptr allocate(size_t bytes);
  /// Returns a block from allocate() (with the same `bytes`) to the cache.
  void release(CUdeviceptr p, size_t bytes);
  /// Frees every cached block (after synchronizing the stream).
  void emptyCache();
  AllocatorStats stats() const;

  /// Waits for everything enqueued on the stream.
  void synchronize() const;

  /// Copies between host and device memory on the stream; the host side is complete when
  /// these return (they synchronize). Device-to-device copies are stream-ordered.
  void copyToDevice(CUdeviceptr dst, const void *src, size_t bytes) const;
  void copyToHost(void *dst, CUdeviceptr src, size_t bytes) const;
  void copyOnDevice(CUdeviceptr dst, CUdeviceptr src, size_t bytes) const;
  /// Fills `count` elements of `elementBytes` (1, 2, 4 or 8) at `dst` with the bit pattern
  /// `bits` (its low `elementBytes` bytes), stream-ordered.
  void fill(CUdeviceptr dst, uint64_t bits, size_t elementBytes, size_t count) const;

private:
  explicit DeviceContext(int ordinal);
  CUcontext ctx_ = nullptr;
  CUstream stream_ = nullptr;
  DeviceInfo info_;
  PtxOptions ptx_;
  mutable std::mutex mu_; // the allocator below
  std::multimap<size_t, CUdeviceptr> free_;
  AllocatorStats stats_;
};

} // namespace rcjit::cuda
