// The cache's shared layer: signed entries on a Redis server, bounded timeouts, back-off.
#pragma once
#include <chrono>
#include <cstdint>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include <sys/types.h>

#include "cache/Counters.h"
#include "cache/EntryFormat.h"

struct redisContext; // hiredis, kept out of this header

namespace rcjit::cache {

/// A parsed "redis://host:port[/db]".
struct RedisUrl {
  std::string host;
  int port = 0;
  int db = 0;
  std::string text() const; // "redis://host:port/db"
};
/// Parses `url`; throws rcjit::Error naming it and the expected form when it is malformed
/// (another scheme, no host, a port outside 1..65535, a db that is not a number 0..65535).
RedisUrl parseRedisUrl(const std::string &url);

/// The limits of the remote layer: env RCJIT_REMOTE_CACHE_TIMEOUT_MS (connect and each reply,
/// default 200), RCJIT_REMOTE_CACHE_RETRY_S (after a failure, how long lookups and writes
/// skip the server, default 30) and RCJIT_REMOTE_CACHE_MAX_ENTRY_BYTES (larger entries are
/// neither published nor read, default 64 MiB). A bad value is logged and the default used.
struct RemoteLimits {
  int timeoutMs = 200;
  int retrySeconds = 30;
  uint64_t maxEntryBytes = uint64_t(64) << 20;
};
RemoteLimits remoteLimitsFromEnv();

/// One Redis server holding entries in the disk format (EntryFormat.h: the same signed,
/// versioned bytes) under "rcjit:v<format>:<key>", without a TTL: entries are immutable and
/// content-addressed, so the server's maxmemory policy bounds them (allkeys-lru evicts the
/// least recently used). Every call is bounded: connecting and each reply wait at most the
/// timeout; a failure (refused, reset, timed out, an error reply to a read) drops the
/// connection, is logged once on the `cache` log (CacheRemoteEvent) and makes every call
/// skip the server for the retry interval, so a dead or silent server costs one timeout per
/// interval, never a failed call. One connection, guarded by a mutex (a call from another
/// thread waits at most one timeout before it sees the back-off); a forked child opens its
/// own. Thread-safe; the counters are not owned and must outlive the store.
class RemoteStore {
public:
  RemoteStore(RedisUrl url, const Secret &secret, RemoteLimits limits, Counters &counters);
  ~RemoteStore();
  RemoteStore(const RemoteStore &) = delete;
  RemoteStore &operator=(const RemoteStore &) = delete;

  enum class Read { hit, miss, rejected, unavailable };
  /// Looks `key` up; a hit fills `payload` with a verified entry's payload. A refused entry
  /// (forged, corrupt, foreign) is logged and counted as a rejection; the next write of
  /// the key replaces it.
  Read read(const std::string &key, std::vector<uint8_t> &payload);
  /// Publishes `payload` under `key` (overwriting); false when skipped or refused.
  bool write(const std::string &key, std::span<const uint8_t> payload);
  /// Deletes `key`'s entry (its object was found unusable), best effort.
  void remove(const std::string &key);

  /// What the server holds under rcjit's prefix, for `rcjit cache stats --remote`.
  struct Report {
    std::string error; // why the server could not be asked ("" when it answered)
    std::string version, usedMemory, maxMemory, policy;
    uint64_t entries = 0, bytes = 0;
  };
  /// Asks the server now (even while backing off), within the timeouts.
  Report inspect();

  const RedisUrl &url() const { return url_; }
  const RemoteLimits &limits() const { return limits_; }
  /// "rcjit:v<kFormatVersion>:"
  static std::string prefix();

private:
  redisContext *connection(std::string &why);
  void fail(const std::string &why);
  void drop();
  std::string describeError() const;

  RedisUrl url_;
  Secret secret_;
  RemoteLimits limits_;
  Counters &counters_;
  std::mutex mu_; // guards everything below
  redisContext *ctx_ = nullptr;
  pid_t pid_ = 0; // the process that opened ctx_
  std::chrono::steady_clock::time_point retryAt_{};
  bool down_ = false;           // logged unreachable, not yet reachable again
  bool refusingWrites_ = false; // logged refuses_writes, no write accepted since
};

} // namespace rcjit::cache
