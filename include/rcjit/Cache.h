// rcjit's persistent compile cache: directory, size bound, artifacts, statistics.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace rcjit::cache {

/// Uses `path` for the disk cache, created on first write. Default: env RCJIT_CACHE_DIR,
/// else $XDG_CACHE_HOME/rcjit, else ~/.cache/rcjit. "" or "off" (also as RCJIT_CACHE_DIR)
/// turns the disk cache off: compiles then start cold in every process (the memory cache
/// still serves this process). Entries are authenticated with a per-user secret kept outside
/// the directory (set_key_file). Thread-safe; affects later lookups and writes.
void set_dir(const std::string &path);
/// The disk cache directory in use, "" when off.
std::string dir();

/// Bounds the disk cache to `bytes` (default: env RCJIT_CACHE_MAX_BYTES, else 1 GiB), evicting
/// least recently used entries now and after each write. Thread-safe.
void set_max_bytes(uint64_t bytes);
uint64_t max_bytes();

/// The file holding the 32-byte secret that signs and verifies disk entries (HMAC-SHA256).
/// Default: env RCJIT_CACHE_KEY_FILE, else $XDG_CONFIG_HOME/rcjit/cache.key, else
/// ~/.config/rcjit/cache.key; created with mode 0600 on first use. Keep it out of the cache
/// directory and private: whoever holds it can make every reader run their code.
void set_key_file(const std::string &path);

/// "redis://host:port[/db]"; default: env RCJIT_REMOTE_CACHE; "" turns it off. Local disk
/// first, then remote, then compile and publish; a dead server never fails a call.
///
/// A shared compile cache on a Redis server for many processes and machines: a lookup that
/// misses in memory and on disk asks the server; a hit is verified like a disk entry (the
/// same signed, versioned bytes: every machine needs the same key file, set_key_file) and
/// kept on disk; a fresh compile is published. A dead, slow or full server costs at most
/// its timeouts (env RCJIT_REMOTE_CACHE_TIMEOUT_MS, default 200 ms) once per retry interval
/// (RCJIT_REMOTE_CACHE_RETRY_S, default 30 s), logged once on the `cache` log, and the
/// code is compiled locally. Throws rcjit::Error naming a malformed URL (nothing changes);
/// a malformed RCJIT_REMOTE_CACHE is logged and leaves the remote cache off. Thread-safe.
void set_remote(const std::string &url);

/// Everything compiled (or loaded from cache) in this process, as one zstd-compressed blob,
/// after the background compiles in flight (CompileOptions::tiered's optimized programs)
/// have finished, so that a warm start from the blob runs the optimized code from its
/// first call. Thread-safe. Throws rcjit::Error if compression fails.
std::vector<uint8_t> save_artifacts();
/// Every valid entry of the disk cache directory, as one blob (what `rcjit cache export`
/// writes).
std::vector<uint8_t> save_disk_artifacts();
/// Loads a blob from save_artifacts into memory and the disk cache, so later compiles of the
/// same code hit, in this process and (through the directory) in others. Only load blobs you
/// trust: their objects become code that runs. Throws rcjit::Error on a malformed blob or one
/// saved by another rcjit version; returns the number of objects loaded.
size_t load_artifacts(const std::vector<uint8_t> &blob);

/// Empties the memory cache and removes every entry of the disk cache directory (not the
/// remote server's, which other processes share).
void clear();

/// What the cache did in this process (counters since start or reset_stats()).
struct Stats {
  uint64_t lookups = 0; // compiles that asked the cache first
  uint64_t memory_hits = 0;
  uint64_t disk_hits = 0;
  uint64_t remote_hits = 0; // found on the remote server (set_remote), verified
  uint64_t misses = 0;      // lookups that found nothing: compiled from scratch
  uint64_t disk_writes = 0;
  uint64_t write_failures = 0;
  uint64_t rejections = 0;    // disk entries refused: corrupt, truncated, foreign, forged
  uint64_t evictions = 0;     // disk entries removed for the size bound
  uint64_t remote_misses = 0; // lookups the remote server answered without an entry
  uint64_t remote_writes = 0; // entries published to the remote server
  uint64_t remote_errors = 0; // remote calls failed: unreachable, timed out, write refused
  uint64_t memory_entries = 0;
  uint64_t memory_bytes = 0;
};
Stats stats();
void reset_stats();

/// The disk cache directory's contents now.
struct DiskUsage {
  std::string dir; // "" when the disk cache is off
  uint64_t entries = 0;
  uint64_t bytes = 0;
  uint64_t valid = 0;   // with verify: entries that pass every check
  uint64_t invalid = 0; // with verify: entries that would be refused
  uint64_t max_bytes = 0;
};
/// Lists the directory; with `verify`, also checks every entry (nothing is deleted).
DiskUsage disk_usage(bool verify = false);

} // namespace rcjit::cache
