// Callbacks run by cache::clear(): in-process tables above the byte cache (compiled
// kernels, regional stage programs) register here so a clear makes the next compile cold.
// And callbacks run by cache::save_artifacts() before it reads the store: the jit layer's
// wait for its background compiles, so that the blob holds the optimized tiers.
#pragma once
#include <cstddef>
#include <functional>
#include <map>
#include <mutex>

namespace rcjit::cache::detail {

/// Registers `fn`, called (in registration order) by every cache::clear(). Thread-safe.
void onClear(std::function<void()> fn);
/// Runs every registered callback.
void runClearHooks();

/// Registers `fn`, called (in registration order) by every cache::save_artifacts() before
/// it reads the store. Thread-safe.
void onSaveArtifacts(std::function<void()> fn);
/// Runs every callback registered with onSaveArtifacts.
void runSaveHooks();

/// A process-wide table of compiled things (kernels, stage programs) by key, emptied by
/// cache::clear(); at most `Limit` entries (the oldest key in order is dropped). Call
/// instance() for the one table of a given Tag; it is never destroyed (compiled code must
/// outlive static destructors). Thread-safe.
template <class Tag, class Key, class Value, size_t Limit> class ProcessMemo {
public:
  static ProcessMemo &instance() {
    static ProcessMemo *m = [] {
      auto *memo = new ProcessMemo();
      onClear([memo] { memo->clear(); });
      return memo;
    }();
    return *m;
  }
  void clear() {
    std::lock_guard<std::mutex> lock(mu_);
    map_.clear();
  }
  /// The value for `key`, or a value-initialized Value (null) when there is none.
  Value find(const Key &key) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = map_.find(key);
    return it == map_.end() ? Value{} : it->second;
  }
  void add(const Key &key, Value v) {
    std::lock_guard<std::mutex> lock(mu_);
    if (map_.size() >= Limit) map_.erase(map_.begin());
    map_.emplace(key, std::move(v));
  }

private:
  std::mutex mu_;
  std::map<Key, Value> map_;
};

} // namespace rcjit::cache::detail
