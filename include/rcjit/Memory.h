// Memory accounting per device: tensor storage held now and the peak since the last reset,
// and the packed weight copies compiled CPU programs keep.
#pragma once
#include <cstdint>

#include <rcjit/Types.h>

namespace rcjit {

/// Bytes of tensor storage that rcjit allocated on a device and that is still referenced
/// (current), and the most there was at once since start or reset_peak_memory_stats
/// (peak). Memory wrapped with Tensor::from_blob is not counted; blocks kept by allocator
/// caches after their tensors died are not counted either.
///
/// packed_weight_bytes (CPU only; 0 for other devices): bytes of the oneDNN-packed weight
/// copies that compiled CPU programs keep in this process (made on a weight's second
/// sighting at one version, remade after the parameter changes, freed with the program or
/// the weight; at most RCJIT_PACK_WEIGHTS_MAX_MB; none under RCJIT_PACK_WEIGHTS=0). They
/// are not tensor storage, so current_bytes and peak_bytes leave them out.
struct MemoryStats {
  int64_t current_bytes = 0;
  int64_t peak_bytes = 0;
  int64_t packed_weight_bytes = 0;
};

/// The counters of `device`. Thread-safe.
MemoryStats memory_stats(Device device = Device::cpu());
/// Sets the peak of `device` to its current bytes. Thread-safe.
void reset_peak_memory_stats(Device device = Device::cpu());

} // namespace rcjit
