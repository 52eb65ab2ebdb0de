// The cache's event counters, shared by the memory, disk and remote layers of one process.
#pragma once
#include <atomic>
#include <cstdint>

namespace rcjit::cache {

/// Monotonic counters; relaxed atomics, so thread-safe and cheap.
struct Counters {
  std::atomic<uint64_t> lookups{0};
  std::atomic<uint64_t> memoryHits{0};
  std::atomic<uint64_t> diskHits{0};
  std::atomic<uint64_t> diskMisses{0};
  std::atomic<uint64_t> stores{0}; // objects handed to the cache after a compile
  std::atomic<uint64_t> diskWrites{0};
  std::atomic<uint64_t> writeFailures{0};
  std::atomic<uint64_t> rejections{0}; // disk entries refused by verification
  std::atomic<uint64_t> evictions{0};  // disk entries removed for the size bound
  // the remote layer (RemoteStore.h)
  std::atomic<uint64_t> remoteHits{0};
  std::atomic<uint64_t> remoteMisses{0};
  std::atomic<uint64_t> remoteWrites{0};
  std::atomic<uint64_t> remoteErrors{0}; // unreachable, timed out, or a write refused
};

} // namespace rcjit::cache
