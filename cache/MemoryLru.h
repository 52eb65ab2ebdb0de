// A byte-bounded least-recently-used map from keys to immutable byte strings.
#pragma once
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace rcjit::cache {

using Bytes = std::shared_ptr<const std::vector<uint8_t>>;

/// Holds at most `maxBytes` of payload (an entry larger than that is not kept). Values are
/// shared and immutable, so a reader keeps its copy alive after eviction. Thread-safe.
class MemoryLru {
public:
  explicit MemoryLru(uint64_t maxBytes) : maxBytes_(maxBytes) {}
  /// The value for `key` (now the most recently used), or nullptr.
  Bytes get(const std::string &key);
  /// Inserts or replaces `key`, then evicts the least recently used entries over the bound.
  void put(const std::string &key, Bytes value);
  /// Drops `key` if present.
  void erase(const std::string &key);
  void setMaxBytes(uint64_t maxBytes);
  void clear();
  uint64_t bytes() const;
  size_t size() const;

private:
  using Item = std::pair<std::string, Bytes>;
  void evictLocked();

  mutable std::mutex mu_;
  std::list<Item> order_; // most recently used first
  std::unordered_map<std::string, std::list<Item>::iterator> index_;
  uint64_t bytes_ = 0;
  uint64_t maxBytes_;
};

} // namespace rcjit::cache
