// Tensor storage accounting per device: bytes held now and the peak since the last reset.
#pragma once
#include <cstdint>

#include <rcjit/Types.h>

namespace rcjit {

/// Bytes of tensor storage that rcjit allocated on a device and that is still referenced
/// (current), and the most there was at once since start or reset_peak_memory_stats
/// (peak). Memory wrapped with Tensor::from_blob is not counted; blocks kept by allocator
/// caches after their tensors died are not counted either.
struct MemoryStats {
  int64_t current_bytes = 0;
  int64_t peak_bytes = 0;
};

/// The counters of `device`. Thread-safe.
MemoryStats memory_stats(Device device = Device::cpu());
/// Sets the peak of `device` to its current bytes. Thread-safe.
void reset_peak_memory_stats(Device device = Device::cpu());

} // namespace rcjit
