// Redis through hiredis's blocking API: URL parsing, timeouts, back-off, SIGPIPE kept away.
#include "cache/RemoteStore.h"

#include <hiredis/hiredis.h>
#include <signal.h>
#include <sys/time.h>
#include <unistd.h>

#include <charconv>
#include <cstring>
#include <limits>
#include <optional>

#include <rcjit/Error.h>

#include "support/Env.h"
#include "support/Events.h"

namespace rcjit::cache {

namespace {

const char *kExpected = "expected redis://host:port[/db]";

// The integer of all of `s` in [min, max], or nullopt.
std::optional<int> number(std::string_view s, int min, int max) {
  int v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || end != s.data() + s.size() || v < min || v > max) {
    return std::nullopt;
  }
  return v;
}

// A limit from the environment; a bad value is logged and `dflt` used (the cache never stops
// a program).
int64_t limitFromEnv(const char *name, int64_t dflt, int64_t min, int64_t max, const char *unit) {
  const std::optional<std::string> s = envValue(name);
  try {
    return parseEnvInteger(name, s, dflt, min, max, unit);
  } catch (const Error &) {
    logging::emit(logging::CacheBadSettingEvent{
        .variable = name,
        .value = *s,
        .expected = "an integer from " + std::to_string(min) + " to " + std::to_string(max),
        .fallback = std::to_string(dflt)});
    return dflt;
  }
}

timeval toTimeval(int ms) { return timeval{.tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000}; }

// Blocks SIGPIPE on this thread while hiredis writes to a socket whose peer may be gone (a
// killed server): the write fails with EPIPE instead of killing the process. A SIGPIPE raised
// meanwhile is consumed unless one was already pending.
class NoSigpipe {
public:
  NoSigpipe() {
    sigemptyset(&pipe_);
    sigaddset(&pipe_, SIGPIPE);
    sigset_t pending;
    sigpending(&pending);
    wasPending_ = sigismember(&pending, SIGPIPE) == 1;
    blocked_ = pthread_sigmask(SIG_BLOCK, &pipe_, &old_) == 0;
  }
  ~NoSigpipe() {
    if (!blocked_) return;
    if (!wasPending_) {
      const timespec zero{};
      while (sigtimedwait(&pipe_, nullptr, &zero) == SIGPIPE) {
      }
    }
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }
  NoSigpipe(const NoSigpipe &) = delete;
  NoSigpipe &operator=(const NoSigpipe &) = delete;

private:
  sigset_t pipe_, old_;
  bool wasPending_ = false, blocked_ = false;
};

// Frees a reply when it goes out of scope.
struct Reply {
  redisReply *r = nullptr;
  explicit Reply(void *p) : r(static_cast<redisReply *>(p)) {}
  ~Reply() {
    if (r) freeReplyObject(r);
  }
  Reply(const Reply &) = delete;
  Reply &operator=(const Reply &) = delete;
  bool isError() const { return r && r->type == REDIS_REPLY_ERROR; }
  std::string text() const { return r && r->str ? std::string(r->str, r->len) : std::string(); }
};

// The value of `field` in an INFO reply ("field:value\r\n" lines), "" when absent.
std::string infoField(const std::string &info, const std::string &field) {
  const std::string needle = field + ":";
  size_t at = 0;
  while ((at = info.find(needle, at)) != std::string::npos) {
    if (at == 0 || info[at - 1] == '\n') {
      size_t end = info.find_first_of("\r\n", at);
      return info.substr(at + needle.size(), end - at - needle.size());
    }
    at += needle.size();
  }
  return "";
}

} // namespace

std::string RedisUrl::text() const {
  const bool v6 = host.find(':') != std::string::npos; // [::1]
  return "redis://" + (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port) + "/" +
         std::to_string(db);
}

RedisUrl parseRedisUrl(const std::string &url) {
  auto bad = [&](const std::string &why) {
    return Error("remote cache URL '" + url + "': " + why + " (" + kExpected + ")");
  };
  const std::string scheme = "redis://";
  if (url.rfind(scheme, 0) != 0) throw bad("not a redis:// URL");
  std::string_view rest = std::string_view(url).substr(scheme.size());
  RedisUrl u;
  const size_t slash = rest.find('/');
  if (slash != std::string_view::npos) {
    std::optional<int> db = number(rest.substr(slash + 1), 0, 65535);
    if (!db) throw bad("the db '" + std::string(rest.substr(slash + 1)) + "' is not 0..65535");
    u.db = *db;
    rest = rest.substr(0, slash);
  }
  if (rest.find('@') != std::string_view::npos) throw bad("credentials are not supported");
  const size_t colon = rest.rfind(':');
  if (colon == std::string_view::npos) throw bad("no port");
  u.host = std::string(rest.substr(0, colon));
  if (u.host.size() > 2 && u.host.front() == '[' && u.host.back() == ']') { // [::1]
    u.host = u.host.substr(1, u.host.size() - 2);
  }
  if (u.host.empty()) throw bad("no host");
  std::optional<int> port = number(rest.substr(colon + 1), 1, 65535);
  if (!port) throw bad("the port '" + std::string(rest.substr(colon + 1)) + "' is not 1..65535");
  u.port = *port;
  return u;
}

RemoteLimits remoteLimitsFromEnv() {
  RemoteLimits l;
  l.timeoutMs = static_cast<int>(
      limitFromEnv("RCJIT_REMOTE_CACHE_TIMEOUT_MS", l.timeoutMs, 1, 60000, "milliseconds"));
  l.retrySeconds = static_cast<int>(
      limitFromEnv("RCJIT_REMOTE_CACHE_RETRY_S", l.retrySeconds, 0, 86400, "seconds"));
  l.maxEntryBytes = static_cast<uint64_t>(limitFromEnv("RCJIT_REMOTE_CACHE_MAX_ENTRY_BYTES",
                                                       static_cast<int64_t>(l.maxEntryBytes), 1,
                                                       int64_t(512) << 20, "bytes"));
  return l;
}

std::string RemoteStore::prefix() { return "rcjit:v" + std::to_string(kFormatVersion) + ":"; }

RemoteStore::RemoteStore(RedisUrl url, const Secret &secret, RemoteLimits limits,
                         Counters &counters)
    : url_(std::move(url)), secret_(secret), limits_(limits), counters_(counters) {}

RemoteStore::~RemoteStore() { drop(); }

void RemoteStore::drop() {
  if (!ctx_) return;
  NoSigpipe guard;
  redisFree(ctx_); // in a forked child, closes only the child's copy of the socket
  ctx_ = nullptr;
}

std::string RemoteStore::describeError() const {
  if (!ctx_) return "no connection";
  std::string e = ctx_->errstr;
  if (ctx_->err == REDIS_ERR_IO && (e.find("temporarily unavailable") != std::string::npos ||
                                    e.find("timed out") != std::string::npos)) {
    return "no reply within " + std::to_string(limits_.timeoutMs) + " ms";
  }
  return e.empty() ? "connection error" : e;
}

void RemoteStore::fail(const std::string &why) {
  counters_.remoteErrors.fetch_add(1, std::memory_order_relaxed);
  drop();
  retryAt_ = std::chrono::steady_clock::now() + std::chrono::seconds(limits_.retrySeconds);
  if (down_) return; // logged when it went down
  down_ = true;
  logging::emit(logging::CacheRemoteEvent{.url = url_.text(),
                                          .state = "unreachable",
                                          .error = why,
                                          .retrySeconds = limits_.retrySeconds});
}

redisContext *RemoteStore::connection(std::string &why) {
  if (ctx_ && pid_ != ::getpid()) drop(); // forked: the parent's connection is not ours
  if (ctx_) return ctx_;
  const timeval tv = toTimeval(limits_.timeoutMs);
  ctx_ = redisConnectWithTimeout(url_.host.c_str(), url_.port, tv);
  pid_ = ::getpid();
  if (!ctx_ || ctx_->err) {
    why = "connect: " + (ctx_ ? describeError() : std::string("out of memory"));
    drop();
    return nullptr;
  }
  if (redisSetTimeout(ctx_, tv) != REDIS_OK) {
    why = "setting the timeout: " + describeError();
    drop();
    return nullptr;
  }
  if (url_.db != 0) {
    Reply r(redisCommand(ctx_, "SELECT %d", url_.db));
    if (!r.r || r.isError()) {
      why = "SELECT " + std::to_string(url_.db) + ": " + (r.r ? r.text() : describeError());
      drop();
      return nullptr;
    }
  }
  if (down_) {
    down_ = false;
    logging::emit(logging::CacheRemoteEvent{.url = url_.text(), .state = "reachable"});
  }
  return ctx_;
}

RemoteStore::Read RemoteStore::read(const std::string &key, std::vector<uint8_t> &payload) {
  std::lock_guard<std::mutex> lock(mu_);
  if (std::chrono::steady_clock::now() < retryAt_) return Read::unavailable;
  NoSigpipe guard;
  std::string why;
  redisContext *c = connection(why);
  if (!c) {
    fail(why);
    return Read::unavailable;
  }
  const std::string k = prefix() + key;
  Reply r(redisCommand(c, "GET %b", k.data(), k.size()));
  if (!r.r || r.isError()) {
    fail("GET: " + (r.r ? r.text() : describeError()));
    return Read::unavailable;
  }
  if (r.r->type == REDIS_REPLY_NIL) {
    counters_.remoteMisses.fetch_add(1, std::memory_order_relaxed);
    return Read::miss;
  }
  Verdict v = Verdict::corrupt;
  EntryFields e;
  if (r.r->type == REDIS_REPLY_STRING && r.r->len <= limits_.maxEntryBytes) {
    std::span<const uint8_t> bytes(reinterpret_cast<const uint8_t *>(r.r->str), r.r->len);
    v = decodeEntry(bytes, key, secret_, e);
  }
  if (v != Verdict::ok) {
    counters_.rejections.fetch_add(1, std::memory_order_relaxed);
    logging::emit(logging::CacheRejectEvent{
        .key = key, .path = url_.text() + " " + k, .reason = verdictText(v), .deleted = false});
    return Read::rejected;
  }
  payload = std::move(e.payload);
  counters_.remoteHits.fetch_add(1, std::memory_order_relaxed);
  return Read::hit;
}

bool RemoteStore::write(const std::string &key, std::span<const uint8_t> payload) {
  EntryFields e;
  e.key = key;
  e.payload.assign(payload.begin(), payload.end());
  const std::vector<uint8_t> bytes = encodeEntry(e, secret_);
  if (bytes.size() > limits_.maxEntryBytes) return false; // documented: not published
  std::lock_guard<std::mutex> lock(mu_);
  if (std::chrono::steady_clock::now() < retryAt_) return false;
  NoSigpipe guard;
  std::string why;
  redisContext *c = connection(why);
  if (!c) {
    fail(why);
    return false;
  }
  const std::string k = prefix() + key;
  Reply r(redisCommand(c, "SET %b %b", k.data(), k.size(), bytes.data(), bytes.size()));
  if (!r.r) {
    fail("SET: " + describeError());
    return false;
  }
  if (r.isError()) { // reachable, but refuses: full (OOM under noeviction), read-only replica
    counters_.remoteErrors.fetch_add(1, std::memory_order_relaxed);
    if (!refusingWrites_) {
      refusingWrites_ = true;
      logging::emit(logging::CacheRemoteEvent{
          .url = url_.text(), .state = "refuses_writes", .error = "SET: " + r.text()});
    }
    return false;
  }
  refusingWrites_ = false;
  counters_.remoteWrites.fetch_add(1, std::memory_order_relaxed);
  return true;
}

void RemoteStore::remove(const std::string &key) {
  std::lock_guard<std::mutex> lock(mu_);
  if (std::chrono::steady_clock::now() < retryAt_) return;
  NoSigpipe guard;
  std::string why;
  redisContext *c = connection(why);
  if (!c) {
    fail(why);
    return;
  }
  const std::string k = prefix() + key;
  Reply r(redisCommand(c, "DEL %b", k.data(), k.size()));
  if (!r.r) fail("DEL: " + describeError());
}

RemoteStore::Report RemoteStore::inspect() {
  std::lock_guard<std::mutex> lock(mu_);
  NoSigpipe guard;
  Report out;
  std::string why;
  redisContext *c = connection(why);
  if (!c) {
    out.error = why;
    return out;
  }
  {
    Reply info(redisCommand(c, "INFO"));
    if (!info.r || info.isError()) {
      out.error = "INFO: " + (info.r ? info.text() : describeError());
      drop();
      return out;
    }
    const std::string text = info.text();
    out.version = infoField(text, "redis_version");
    out.usedMemory = infoField(text, "used_memory");
    out.maxMemory = infoField(text, "maxmemory");
    out.policy = infoField(text, "maxmemory_policy");
  }
  const std::string pattern = prefix() + "*";
  std::string cursor = "0";
  do {
    Reply scan(redisCommand(c, "SCAN %s MATCH %b COUNT 1000", cursor.c_str(), pattern.data(),
                            pattern.size()));
    if (!scan.r || scan.r->type != REDIS_REPLY_ARRAY || scan.r->elements != 2) {
      out.error = "SCAN: " + (scan.r ? scan.text() : describeError());
      drop();
      return out;
    }
    cursor = std::string(scan.r->element[0]->str, scan.r->element[0]->len);
    const redisReply *keys = scan.r->element[1];
    for (size_t i = 0; i < keys->elements; ++i) {
      redisAppendCommand(c, "STRLEN %b", keys->element[i]->str, keys->element[i]->len);
    }
    for (size_t i = 0; i < keys->elements; ++i) {
      void *p = nullptr;
      if (redisGetReply(c, &p) != REDIS_OK) {
        out.error = "STRLEN: " + describeError();
        drop();
        return out;
      }
      Reply len(p);
      if (len.r->type == REDIS_REPLY_INTEGER && len.r->integer > 0) { // 0: evicted meanwhile
        ++out.entries;
        out.bytes += static_cast<uint64_t>(len.r->integer);
      }
    }
  } while (cursor != "0");
  return out;
}

} // namespace rcjit::cache
