// One cache directory: one authenticated file per entry, atomic writes, LRU eviction by mtime.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "cache/Counters.h"
#include "cache/EntryFormat.h"

namespace rcjit::cache {

/// A cache directory shared by any number of threads and processes. Entries are written to a
/// temp file in the directory, fsynced and renamed into place, so a reader sees a whole entry
/// or none; every read verifies the entry (EntryFormat.h) and a refused one is logged on the
/// `cache` log, counted and, unless it may be another user's authentic entry, deleted.
/// Thread-safe; the counters are not owned and must outlive the store.
class DiskStore {
public:
  /// Opening a directory sweeps the temp files that writers which died left there (older
  /// than a minute, this user's, not being written by this process); every write does too.
  DiskStore(std::string dir, const Secret &secret, uint64_t maxBytes, Counters &counters);

  enum class Read { hit, miss, rejected };
  /// Looks `key` up; on a hit fills `payload` and marks the entry used (its mtime).
  Read read(const std::string &key, std::vector<uint8_t> &payload);
  /// Stores `payload` under `key`, then evicts least recently used entries over the bound.
  /// Returns false (and logs) when the directory cannot be written.
  bool write(const std::string &key, std::span<const uint8_t> payload);
  /// Removes least recently used entries until the directory holds at most the bound, and
  /// stale temp files of crashed writers. Returns how many entries it removed.
  size_t evict();
  /// Removes every entry and temp file.
  void clear();
  /// Removes the entry for `key`, if any.
  void remove(const std::string &key);

  struct Report {
    uint64_t entries = 0, bytes = 0, valid = 0, invalid = 0;
  };
  /// Counts entries and bytes; with `verify`, also checks each one (without deleting).
  Report inspect(bool verify) const;
  /// The keys of the entries present now (unverified).
  std::vector<std::string> keys() const;

  const std::string &dir() const { return dir_; }
  void setMaxBytes(uint64_t maxBytes) { maxBytes_ = maxBytes; }
  uint64_t maxBytes() const { return maxBytes_; }
  /// The file that holds `key`.
  std::string pathOf(const std::string &key) const;

private:
  void reject(const std::string &path, Verdict v, bool deleted);

  std::string dir_;
  Secret secret_;
  std::atomic<uint64_t> maxBytes_;
  Counters &counters_;
};

} // namespace rcjit::cache
