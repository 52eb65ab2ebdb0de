// The public rcjit::cache functions, over the process-wide ObjectStore.
#include "cache/ClearHooks.h"
#include <rcjit/Cache.h>

#include "cache/Artifacts.h"
#include "cache/ObjectStore.h"
#include "support/Events.h"

namespace rcjit::cache {

namespace {
ObjectStore &store() { return ObjectStore::instance(); }
uint64_t get(const std::atomic<uint64_t> &c) { return c.load(std::memory_order_relaxed); }
} // namespace

void set_dir(const std::string &path) { store().setDir(path); }
std::string dir() { return store().dir(); }
void set_max_bytes(uint64_t bytes) { store().setMaxBytes(bytes); }
uint64_t max_bytes() { return store().maxBytes(); }
void set_key_file(const std::string &path) { store().setKeyFile(path); }
void set_remote(const std::string &url) { store().setRemote(url); }

std::vector<uint8_t> save_artifacts() {
  detail::runSaveHooks(); // the background compiles in flight finish first
  return packArtifacts(store().usedObjects());
}
std::vector<uint8_t> save_disk_artifacts() { return packArtifacts(store().diskObjects()); }

size_t load_artifacts(const std::vector<uint8_t> &blob) {
  Objects objects = unpackArtifacts(blob);
  for (const auto &[key, obj] : objects) store().warm(key, obj);
  logging::emit(logging::CacheLoadEvent{.objects = static_cast<int64_t>(objects.size())});
  return objects.size();
}

void clear() {
  store().clear();
  detail::runClearHooks();
}

Stats stats() {
  const Counters &c = store().counters();
  Stats s;
  s.memory_hits = get(c.memoryHits); // hits before lookups: a lookup counts first
  s.disk_hits = get(c.diskHits);
  s.remote_hits = get(c.remoteHits);
  s.lookups = get(c.lookups);
  s.misses = s.lookups - s.memory_hits - s.disk_hits - s.remote_hits;
  s.disk_writes = get(c.diskWrites);
  s.write_failures = get(c.writeFailures);
  s.rejections = get(c.rejections);
  s.evictions = get(c.evictions);
  s.remote_misses = get(c.remoteMisses);
  s.remote_writes = get(c.remoteWrites);
  s.remote_errors = get(c.remoteErrors);
  s.memory_entries = store().memory().size();
  s.memory_bytes = store().memory().bytes();
  return s;
}

void reset_stats() {
  Counters &c = store().counters();
  for (std::atomic<uint64_t> *a :
       {&c.lookups, &c.memoryHits, &c.diskHits, &c.diskMisses, &c.stores, &c.diskWrites,
        &c.writeFailures, &c.rejections, &c.evictions, &c.remoteHits, &c.remoteMisses,
        &c.remoteWrites, &c.remoteErrors}) {
    a->store(0, std::memory_order_relaxed);
  }
}

DiskUsage disk_usage(bool verify) {
  DiskUsage u;
  u.max_bytes = store().maxBytes();
  std::shared_ptr<DiskStore> d = store().disk();
  if (!d) return u;
  DiskStore::Report r = d->inspect(verify);
  u.dir = d->dir();
  u.entries = r.entries;
  u.bytes = r.bytes;
  u.valid = r.valid;
  u.invalid = r.invalid;
  return u;
}

} // namespace rcjit::cache
