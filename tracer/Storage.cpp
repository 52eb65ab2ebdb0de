// Storage: 64-byte aligned CPU blocks with a bounded cache of large freed blocks; device
// memory from the device's backend (tracer/DeviceBackend.h); the per-device byte counters
// behind rcjit::memory_stats.
//
// Large tensors are allocated and freed on every eager op; returning their pages to the
// OS and faulting them back in costs more than the op itself. Freed blocks of 128 KiB or
// more (glibc's mmap threshold, at and above which glibc maps blocks or trims its heap
// back and the next block of the size faults its pages in again) are kept and handed out
// again for the same size, up to cacheLimit() bytes in all:
// the most CPU tensor storage the process has held at once (at least 1 GiB), so a loop
// that reaches the same peak every iteration (a training step) finds its blocks again
// instead of faulting them in, while live and cached blocks together stay within 1.5
// times that peak (RCJIT_BLOCK_CACHE_MAX_BYTES sets a fixed bound instead of the peak).
#include <array>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <iterator>
#include <limits>
#include <list>
#include <map>
#include <mutex>

#include <rcjit/Memory.h>

#include "support/Env.h"
#include "tracer/CheckedSize.h"
#include "tracer/DeviceBackend.h"
#include "tracer/TensorImpl.h"

namespace rcjit::detail {

namespace {

constexpr size_t kAlign = 64;
// Blocks of at most this many bytes come from malloc, over-allocated by kAlign and aligned
// by hand (the distance back to malloc's pointer kept in the byte before the block):
// glibc serves such requests from its per-thread cache, where aligned_alloc goes through
// _int_memalign, which splits a larger chunk and frees the ends each time and made glibc
// consolidate its fast bins on nearly every call (a regional toy64 call at [1, 1, 10],
// whose 64 stage calls each make a 40-byte output: ~25 % of its profile samples; the
// call 3 % faster without it, eager toy64 5 %).
constexpr size_t kSmallMax = 1024 - kAlign;
// 128 KiB: a regional gpt2 call's 384 KiB stage outputs, freed and made again every
// call, faulted their pages in each time from glibc (a loop of such blocks: 53 faults and
// 107 us an iteration against none and 17-22 us from the cache; the stage's closing add
// 0.25-0.31 ms a run against 0.08-0.11; eager gpt2 3085 faults a call against none;
// docs/first-call.md, "Regional against full")
constexpr size_t kCacheMin = size_t{1} << 17;
constexpr int64_t kCacheFloor = int64_t{1} << 30;

// The most bytes of CPU tensor storage live at once since the process started (never
// reset, unlike the peak of memory_stats).
std::atomic<int64_t> cpuHighWater{0};

// RCJIT_BLOCK_CACHE_MAX_BYTES, -1 when unset; read by the first take() (a large
// allocation), so that a bad value is an Error there and never in the release of a block.
int64_t fixedCacheLimit() {
  static const int64_t fixed = envInteger("RCJIT_BLOCK_CACHE_MAX_BYTES", -1, 0,
                                          std::numeric_limits<int64_t>::max(), "bytes");
  return fixed;
}

// Bytes the block cache may hold: RCJIT_BLOCK_CACHE_MAX_BYTES when set, else the CPU
// high-water mark of live storage, at least kCacheFloor; a new block that the cache cannot
// serve first evicts cached ones until live + cached + new is within 1.5 times it (take).
// Measured on gpt2's 12-layer eager training step (2-core AVX2 host): with a fixed 1 GiB
// the step faulted ~286 k pages back in (1.1 GB) every step; with the high-water bound
// 800-3000 (docs/performance.md).
size_t cacheLimit() {
  if (const int64_t fixed = fixedCacheLimit(); fixed >= 0) return static_cast<size_t>(fixed);
  return static_cast<size_t>(std::max(kCacheFloor, cpuHighWater.load(std::memory_order_relaxed)));
}

class BlockCache {
public:
  // the block of that size freed last: the likeliest to be in cache still (a compiled
  // call frees a large intermediate and makes the next of its size a few steps later).
  // On a miss (nullptr), with `live` bytes in use: frees cached blocks, oldest first,
  // until live + cached + bytes is within 1.5 times the limit. A training step holds its
  // peak with about a third of it cached in other sizes (gpt2 at 12 layers: 3.7 GB
  // resident at a 2.6 GiB peak), so a bound at the peak itself evicted and faulted back
  // 1.1 GB a step again; a process that frees a model and makes one of other sizes holds
  // at most half its peak beside it.
  void *take(size_t bytes, size_t live) {
    const size_t limit = cacheLimit();
    std::lock_guard<std::mutex> lock(mu_);
    const auto [first, last] = free_.equal_range(bytes);
    if (first == last) {
      evictWhile([&] { return live + cached_ + bytes > limit + limit / 2; });
      return nullptr;
    }
    const auto it = std::prev(last);
    void *p = it->second->second;
    age_.erase(it->second);
    free_.erase(it);
    cached_ -= bytes;
    return p;
  }
  void give(void *p, size_t bytes) {
    const size_t limit = cacheLimit();
    std::lock_guard<std::mutex> lock(mu_);
    evictWhile([&] { return cached_ + bytes > limit; });
    if (cached_ + bytes > limit) {
      std::free(p);
      return;
    }
    free_.emplace(bytes, age_.emplace(age_.end(), bytes, p));
    cached_ += bytes;
  }

private:
  using Age = std::list<std::pair<size_t, void *>>; // (bytes, block), freed longest ago first

  // Frees the blocks freed longest ago while `over()`: a size a loop no longer makes goes
  // before the ones it makes every iteration (largest first kept evicting a training step's
  // own blocks while blocks of earlier work sat in the cache).
  template <class F> void evictWhile(F over) {
    while (!age_.empty() && over()) {
      const auto [bytes, p] = age_.front();
      auto [first, last] = free_.equal_range(bytes);
      while (first->second != age_.begin()) ++first; // (a few blocks per size)
      free_.erase(first);
      age_.pop_front();
      cached_ -= bytes;
      std::free(p);
    }
  }

  std::mutex mu_;
  Age age_;
  std::multimap<size_t, Age::iterator> free_; // by size; the last of a size freed last
  size_t cached_ = 0;
};

// Bytes of live tensor storage per device: slot 0 the CPU, slot 1 + i cuda:i.
struct Counter {
  std::atomic<int64_t> current{0};
  std::atomic<int64_t> peak{0};
};
constexpr int kMaxDevices = 64;
std::array<Counter, kMaxDevices + 1> counters;

Counter &counterOf(Device d) {
  int slot = d.is_cuda() ? 1 + d.index : 0;
  if (slot < 0 || slot > kMaxDevices) throw Error("memory_stats: no such device " + d.str());
  return counters[static_cast<size_t>(slot)];
}

void raiseTo(std::atomic<int64_t> &peak, int64_t now) {
  int64_t was = peak.load(std::memory_order_relaxed);
  while (now > was && !peak.compare_exchange_weak(was, now, std::memory_order_relaxed)) {
  }
}

void countAlloc(Counter &c, int64_t bytes) {
  const int64_t now = c.current.fetch_add(bytes, std::memory_order_relaxed) + bytes;
  raiseTo(c.peak, now);
  if (&c == &counters[0]) raiseTo(cpuHighWater, now);
}

BlockCache &blockCache() {
  static BlockCache *cache = new BlockCache(); // never destroyed: storage may outlive statics
  return *cache;
}

} // namespace

std::shared_ptr<Storage> allocateStorage(size_t nbytes, Device device) {
  Counter &counter = counterOf(device);
  const auto counted = static_cast<int64_t>(nbytes);
  if (nbytes > static_cast<size_t>(kMaxTensorBytes)) {
    throw AllocationError(std::to_string(nbytes) + " bytes is more than a tensor may span");
  }
  if (!device.is_cpu()) {
    std::shared_ptr<Storage> s = deviceBackend(device).allocate(nbytes, device);
    countAlloc(counter, counted);
    s->release = [inner = std::move(s->release), &counter, counted](void *q) {
      inner(q);
      counter.current.fetch_sub(counted, std::memory_order_relaxed);
    };
    return s;
  }
  auto s = std::make_shared<Storage>();
  size_t bytes = (nbytes + kAlign - 1) / kAlign * kAlign;
  if (bytes == 0) bytes = kAlign;
  const bool small = bytes <= kSmallMax;
  void *p = bytes >= kCacheMin
                ? blockCache().take(bytes, static_cast<size_t>(std::max<int64_t>(
                                               0, counter.current.load(std::memory_order_relaxed))))
                : nullptr;
  if (small) {
    if (auto *raw = static_cast<unsigned char *>(std::malloc(bytes + kAlign))) {
      auto *at = reinterpret_cast<unsigned char *>((reinterpret_cast<uintptr_t>(raw) + kAlign) &
                                                   ~uintptr_t{kAlign - 1});
      at[-1] = static_cast<unsigned char>(at - raw); // 1..kAlign
      p = at;
    }
  } else if (!p) {
    p = std::aligned_alloc(kAlign, bytes);
  }
  if (!p) {
    throw AllocationError("out of memory on the CPU (allocating " + std::to_string(bytes) +
                          " bytes failed)");
  }
  s->data = p;
  s->nbytes = nbytes;
  s->device = device;
  countAlloc(counter, counted);
  if (bytes >= kCacheMin) {
    s->release = [bytes, &counter, counted](void *q) {
      blockCache().give(q, bytes);
      counter.current.fetch_sub(counted, std::memory_order_relaxed);
    };
  } else if (small) {
    s->release = [&counter, counted](void *q) {
      auto *at = static_cast<unsigned char *>(q);
      std::free(at - at[-1]);
      counter.current.fetch_sub(counted, std::memory_order_relaxed);
    };
  } else {
    s->release = [&counter, counted](void *q) {
      std::free(q);
      counter.current.fetch_sub(counted, std::memory_order_relaxed);
    };
  }
  return s;
}

void countIdle(Device device, int64_t bytes, bool idle) {
  Counter &c = counterOf(device);
  if (idle) {
    c.current.fetch_sub(bytes, std::memory_order_relaxed);
  } else {
    countAlloc(c, bytes);
  }
}

std::atomic<int64_t> &packedWeightBytes() {
  static std::atomic<int64_t> n{0};
  return n;
}

} // namespace rcjit::detail

namespace rcjit {

MemoryStats memory_stats(Device device) {
  detail::Counter &c = detail::counterOf(device);
  MemoryStats s;
  s.current_bytes = c.current.load(std::memory_order_relaxed);
  s.peak_bytes = c.peak.load(std::memory_order_relaxed);
  if (device.is_cpu()) s.packed_weight_bytes = detail::packedWeightBytes().load();
  return s;
}

void reset_peak_memory_stats(Device device) {
  detail::Counter &c = detail::counterOf(device);
  c.peak.store(c.current.load(std::memory_order_relaxed), std::memory_order_relaxed);
}

} // namespace rcjit
