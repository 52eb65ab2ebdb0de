// The in-memory LRU: a list in use order plus a hash index into it.
#include "cache/MemoryLru.h"

namespace rcjit::cache {

Bytes MemoryLru::get(const std::string &key) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = index_.find(key);
  if (it == index_.end()) return nullptr;
  order_.splice(order_.begin(), order_, it->second);
  return it->second->second;
}

void MemoryLru::put(const std::string &key, Bytes value) {
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = index_.find(key); it != index_.end()) {
    bytes_ -= it->second->second->size();
    order_.erase(it->second);
    index_.erase(it);
  }
  bytes_ += value->size();
  order_.emplace_front(key, std::move(value));
  index_[key] = order_.begin();
  evictLocked();
}

void MemoryLru::erase(const std::string &key) {
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = index_.find(key); it != index_.end()) {
    bytes_ -= it->second->second->size();
    order_.erase(it->second);
    index_.erase(it);
  }
}

void MemoryLru::setMaxBytes(uint64_t maxBytes) {
  std::lock_guard<std::mutex> lock(mu_);
  maxBytes_ = maxBytes;
  evictLocked();
}

void MemoryLru::clear() {
  std::lock_guard<std::mutex> lock(mu_);
  order_.clear();
  index_.clear();
  bytes_ = 0;
}

uint64_t MemoryLru::bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return bytes_;
}

size_t MemoryLru::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return index_.size();
}

void MemoryLru::evictLocked() {
  while (bytes_ > maxBytes_ && !order_.empty()) {
    bytes_ -= order_.back().second->size();
    index_.erase(order_.back().first);
    order_.pop_back();
  }
}

} // namespace rcjit::cache
