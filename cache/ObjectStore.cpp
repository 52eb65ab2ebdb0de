// The object cache's policy: environment defaults, lazy opening, memory then disk then remote.
#include "cache/ObjectStore.h"

#include <cstdlib>
#include <limits>

#include <rcjit/Error.h>

#include "cache/Key.h"
#include "cache/Secret.h"
#include "support/Env.h"
#include "support/Events.h"

namespace rcjit::cache {

namespace {

constexpr uint64_t kDefaultDiskBytes = uint64_t(1) << 30;
constexpr uint64_t kDefaultMemoryBytes = uint64_t(512) << 20;

std::string defaultDir() {
  if (const char *d = std::getenv("RCJIT_CACHE_DIR")) return d;
  if (const char *x = std::getenv("XDG_CACHE_HOME"); x && *x) return std::string(x) + "/rcjit";
  if (const char *h = std::getenv("HOME"); h && *h) return std::string(h) + "/.cache/rcjit";
  return "";
}

// A bad value is a warning, not an error: the cache never stops a program (it falls back).
uint64_t defaultMaxBytes() {
  const std::optional<std::string> s = envValue("RCJIT_CACHE_MAX_BYTES");
  try {
    return static_cast<uint64_t>(parseEnvInteger("RCJIT_CACHE_MAX_BYTES", s, kDefaultDiskBytes, 1,
                                                 std::numeric_limits<int64_t>::max(), "bytes"));
  } catch (const Error &) {
    logging::emit(logging::CacheBadSettingEvent{.variable = "RCJIT_CACHE_MAX_BYTES",
                                                .value = *s,
                                                .expected = "a positive integer",
                                                .fallback = "1 GiB"});
    return kDefaultDiskBytes;
  }
}

bool isOff(const std::string &dir) { return dir.empty() || dir == "off"; }

// RCJIT_REMOTE_CACHE: a malformed URL is logged and the remote layer left off (the cache never
// stops a program; cache::set_remote and `rcjit cache stats --remote` throw instead).
std::optional<RedisUrl> defaultRemote() {
  const std::optional<std::string> s = envValue("RCJIT_REMOTE_CACHE");
  if (!s || *s == "off") return std::nullopt;
  try {
    return parseRedisUrl(*s);
  } catch (const Error &) {
    logging::emit(logging::CacheBadSettingEvent{.variable = "RCJIT_REMOTE_CACHE",
                                                .value = *s,
                                                .expected = "redis://host:port[/db]",
                                                .fallback = "no remote cache"});
    return std::nullopt;
  }
}

} // namespace

ObjectStore &ObjectStore::instance() {
  static ObjectStore *s = new ObjectStore(); // never destroyed: used by code outliving statics
  return *s;
}

ObjectStore::ObjectStore()
    : memory_(kDefaultMemoryBytes), dir_(defaultDir()), keyFile_(defaultKeyFile()),
      maxBytes_(defaultMaxBytes()), remoteUrl_(defaultRemote()) {}

std::shared_ptr<RemoteStore> ObjectStore::remote() {
  std::lock_guard<std::mutex> lock(mu_);
  if (remoteTried_ || !remoteUrl_) return remote_;
  remoteTried_ = true;
  std::string why;
  std::optional<Secret> secret = loadOrCreateSecret(keyFile_, why);
  if (!secret) {
    logging::emit(logging::CacheRemoteEvent{
        .url = remoteUrl_->text(), .state = "off", .error = "no key file to sign entries: " + why});
    return nullptr;
  }
  remote_ = std::make_shared<RemoteStore>(*remoteUrl_, *secret, remoteLimitsFromEnv(), counters_);
  return remote_;
}

void ObjectStore::setRemote(const std::string &url) {
  std::optional<RedisUrl> u;
  if (!url.empty() && url != "off") u = parseRedisUrl(url); // throws: nothing changed
  std::lock_guard<std::mutex> lock(mu_);
  remoteUrl_ = std::move(u);
  remote_.reset();
  remoteTried_ = false;
}

std::string ObjectStore::remoteUrl() {
  std::lock_guard<std::mutex> lock(mu_);
  return remoteUrl_ ? remoteUrl_->text() : "";
}

std::shared_ptr<DiskStore> ObjectStore::disk() {
  std::lock_guard<std::mutex> lock(mu_);
  if (diskTried_ || isOff(dir_)) return disk_;
  diskTried_ = true;
  std::string why;
  std::optional<Secret> secret = loadOrCreateSecret(keyFile_, why);
  if (!secret) {
    logging::emit(logging::CacheOffEvent{.why = why});
    return nullptr;
  }
  disk_ = std::make_shared<DiskStore>(dir_, *secret, maxBytes_, counters_);
  return disk_;
}

void ObjectStore::markUsed(const std::string &key) {
  std::lock_guard<std::mutex> lock(mu_);
  used_.insert(key);
}

Bytes ObjectStore::lookup(const std::string &key, const std::string &name) {
  if (!isContentKey(key)) return nullptr;
  counters_.lookups.fetch_add(1, std::memory_order_relaxed);
  if (Bytes b = memory_.get(key)) {
    counters_.memoryHits.fetch_add(1, std::memory_order_relaxed);
    logging::emit(logging::CacheHitEvent{.where = "memory", .key = key, .name = name});
    markUsed(key);
    return b;
  }
  std::shared_ptr<DiskStore> d = disk();
  std::vector<uint8_t> payload;
  if (d) {
    if (d->read(key, payload) == DiskStore::Read::hit) {
      counters_.diskHits.fetch_add(1, std::memory_order_relaxed);
      logging::emit(logging::CacheHitEvent{.where = "disk", .key = key, .name = name});
      auto b = std::make_shared<const std::vector<uint8_t>>(std::move(payload));
      memory_.put(key, b);
      markUsed(key);
      return b;
    }
    counters_.diskMisses.fetch_add(1, std::memory_order_relaxed);
  }
  std::shared_ptr<RemoteStore> r = remote();
  const RemoteStore::Read got = r ? r->read(key, payload) : RemoteStore::Read::unavailable;
  if (got == RemoteStore::Read::hit) {
    logging::emit(logging::CacheHitEvent{.where = "remote", .key = key, .name = name});
    if (d) d->write(key, payload); // the next process on this machine hits on disk
    auto b = std::make_shared<const std::vector<uint8_t>>(std::move(payload));
    memory_.put(key, b);
    markUsed(key);
    return b;
  }
  // `where`: the last layer that answered (a remote cache being skipped did not)
  const char *where = got != RemoteStore::Read::unavailable ? "remote" : d ? "disk" : "memory";
  logging::emit(logging::CacheMissEvent{.where = where, .key = key, .name = name});
  return nullptr;
}

void ObjectStore::store(const std::string &key, std::span<const uint8_t> object,
                        const std::string &name) {
  if (!isContentKey(key)) return;
  counters_.stores.fetch_add(1, std::memory_order_relaxed);
  auto b = std::make_shared<const std::vector<uint8_t>>(object.begin(), object.end());
  memory_.put(key, b);
  markUsed(key);
  std::shared_ptr<DiskStore> d = disk();
  const bool onDisk = d && d->write(key, object);
  std::shared_ptr<RemoteStore> r = remote();
  const bool onRemote = r && r->write(key, object);
  logging::emit(logging::CacheStoreEvent{.where = onDisk && onRemote ? "disk+remote"
                                                  : onRemote         ? "remote"
                                                  : onDisk           ? "disk"
                                                                     : "memory",
                                         .key = key,
                                         .name = name,
                                         .bytes = static_cast<int64_t>(object.size())});
}

void ObjectStore::warm(const std::string &key, Bytes object) {
  if (!isContentKey(key)) return;
  memory_.put(key, object);
  markUsed(key);
  if (std::shared_ptr<DiskStore> d = disk()) d->write(key, *object);
}

void ObjectStore::evict(const std::string &key, const std::string &why) {
  counters_.rejections.fetch_add(1, std::memory_order_relaxed);
  memory_.erase(key);
  if (std::shared_ptr<DiskStore> d = disk()) d->remove(key);
  if (std::shared_ptr<RemoteStore> r = remote()) r->remove(key);
  logging::emit(
      logging::CacheRejectEvent{.key = key, .reason = why + " (recompiling)", .deleted = true});
}

void ObjectStore::setDir(const std::string &dir) {
  std::lock_guard<std::mutex> lock(mu_);
  dir_ = dir;
  disk_.reset();
  diskTried_ = false;
}

std::string ObjectStore::dir() const {
  std::lock_guard<std::mutex> lock(mu_);
  return isOff(dir_) ? "" : dir_;
}

void ObjectStore::setMaxBytes(uint64_t bytes) {
  std::shared_ptr<DiskStore> d;
  {
    std::lock_guard<std::mutex> lock(mu_);
    maxBytes_ = bytes;
    d = disk_;
  }
  if (d) {
    d->setMaxBytes(bytes);
    d->evict();
  }
}

uint64_t ObjectStore::maxBytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return maxBytes_;
}

void ObjectStore::setKeyFile(const std::string &path) {
  std::lock_guard<std::mutex> lock(mu_);
  keyFile_ = path;
  disk_.reset();
  diskTried_ = false;
  remote_.reset();
  remoteTried_ = false;
}

std::string ObjectStore::keyFile() const {
  std::lock_guard<std::mutex> lock(mu_);
  return keyFile_;
}

void ObjectStore::clear() {
  memory_.clear();
  {
    std::lock_guard<std::mutex> lock(mu_);
    used_.clear();
  }
  if (std::shared_ptr<DiskStore> d = disk()) d->clear();
}

std::vector<std::pair<std::string, Bytes>> ObjectStore::usedObjects() {
  std::set<std::string> keys;
  {
    std::lock_guard<std::mutex> lock(mu_);
    keys = used_;
  }
  std::shared_ptr<DiskStore> d = disk();
  std::vector<std::pair<std::string, Bytes>> out;
  for (const std::string &k : keys) {
    Bytes b = memory_.get(k);
    std::vector<uint8_t> payload;
    if (!b && d && d->read(k, payload) == DiskStore::Read::hit) {
      b = std::make_shared<const std::vector<uint8_t>>(std::move(payload));
    }
    if (b) out.emplace_back(k, std::move(b));
  }
  return out;
}

std::vector<std::pair<std::string, Bytes>> ObjectStore::diskObjects() {
  std::vector<std::pair<std::string, Bytes>> out;
  std::shared_ptr<DiskStore> d = disk();
  if (!d) return out;
  for (const std::string &k : d->keys()) {
    std::vector<uint8_t> payload;
    if (d->read(k, payload) != DiskStore::Read::hit) continue;
    out.emplace_back(k, std::make_shared<const std::vector<uint8_t>>(std::move(payload)));
  }
  return out;
}

} // namespace rcjit::cache
