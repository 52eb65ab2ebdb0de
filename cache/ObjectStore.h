// The process-wide compiled-object cache: a memory LRU in front of optional disk and remote stores.
#pragma once
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "cache/Counters.h"
#include "cache/DiskStore.h"
#include "cache/MemoryLru.h"
#include "cache/RemoteStore.h"

namespace rcjit::cache {

/// One per process (instance()); thread-safe. Keys must satisfy isContentKey (others are
/// neither looked up nor stored). The disk layer is configured from the environment
/// (RCJIT_CACHE_DIR, RCJIT_CACHE_MAX_BYTES, RCJIT_CACHE_KEY_FILE) or the setters, and opened
/// lazily: a missing or unusable key file turns it off with one `cache` log line. The remote
/// layer (RCJIT_REMOTE_CACHE or setRemote, RemoteStore.h) is opened lazily too, with the
/// same key file.
class ObjectStore {
public:
  static ObjectStore &instance();

  /// The object for `key`: memory first, then disk, then remote (a disk hit is kept in
  /// memory too, a remote hit in memory and on disk).
  /// `name` (a module id, "" when unknown) is only for the `cache` log's hit and miss events.
  Bytes lookup(const std::string &key, const std::string &name = "");
  /// Records a freshly compiled object in memory and on disk, and publishes it to the remote
  /// layer (`name` as for lookup).
  void store(const std::string &key, std::span<const uint8_t> object, const std::string &name = "");
  /// Adds an object from an artifact blob (memory and disk), as if compiled here.
  void warm(const std::string &key, Bytes object);
  /// Drops `key` from memory, disk and remote: its object was found unusable (`why`, logged on the
  /// `cache` log and counted as a rejection), so the next lookup misses and recompiles.
  void evict(const std::string &key, const std::string &why);

  /// "" or "off" turns the disk layer off.
  void setDir(const std::string &dir);
  std::string dir() const;
  void setMaxBytes(uint64_t bytes);
  uint64_t maxBytes() const;
  void setKeyFile(const std::string &path);
  std::string keyFile() const;
  /// "redis://host:port[/db]", or "" to turn the remote layer off; throws rcjit::Error on a
  /// malformed URL (and changes nothing).
  void setRemote(const std::string &url);
  /// The remote URL configured (normalized "redis://host:port/db"), "" when off.
  std::string remoteUrl();
  /// The remote store, opened if needed; nullptr when off or without a usable key file.
  std::shared_ptr<RemoteStore> remote();
  /// Drops memory entries and removes disk entries (the remote server is shared: kept).
  void clear();

  /// Every key used (compiled, hit or warmed) by this process with its object, as far as
  /// memory or disk still hold it.
  std::vector<std::pair<std::string, Bytes>> usedObjects();
  /// Every verified entry in the cache directory.
  std::vector<std::pair<std::string, Bytes>> diskObjects();
  /// The disk store, opened if needed; nullptr when off or unusable.
  std::shared_ptr<DiskStore> disk();
  Counters &counters() { return counters_; }
  const MemoryLru &memory() const { return memory_; }

private:
  ObjectStore();
  void markUsed(const std::string &key);

  Counters counters_;
  MemoryLru memory_;
  mutable std::mutex mu_; // guards everything below
  std::string dir_;
  std::string keyFile_;
  uint64_t maxBytes_;
  std::shared_ptr<DiskStore> disk_;
  bool diskTried_ = false;
  std::optional<RedisUrl> remoteUrl_; // from RCJIT_REMOTE_CACHE until setRemote
  std::shared_ptr<RemoteStore> remote_;
  bool remoteTried_ = false;
  std::set<std::string> used_;
};

} // namespace rcjit::cache
