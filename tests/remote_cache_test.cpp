// The remote compile cache against a real redis-server that each test starts on a free
// loopback port: a second process hits remotely, a killed, silent or full server costs no
// failed call, forged entries are refused and recompiled, and malformed URLs are Errors.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <thread>

#include <rcjit/rcjit.h>

#include "cache/EntryFormat.h"
#include "cache/ObjectStore.h"
#include "cache/RemoteStore.h"
#include "cache/Secret.h"
#include "jit/Tiered.h"
#include "tests/TestUtil.h"

extern char **environ;

using namespace rcjit;
namespace fs = std::filesystem;

namespace {

std::string redisServerPath() {
  const char *path = std::getenv("PATH");
  std::stringstream dirs(path ? path : "/usr/bin:/bin");
  std::string d;
  while (std::getline(dirs, d, ':')) {
    fs::path p = fs::path(d.empty() ? "." : d) / "redis-server";
    if (::access(p.c_str(), X_OK) == 0) return p.string();
  }
  return "";
}

// A loopback port nobody listens on now (the kernel's pick; free until someone binds it).
int freePort() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr *>(&a), sizeof a), 0);
  ::getsockname(fd, reinterpret_cast<sockaddr *>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

std::string readText(const fs::path &p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

size_t countOf(const std::string &text, const std::string &what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// Runs argv with the environment plus `env` (RCJIT_* of this process left out), stdout and
// stderr to `log`; returns the exit status (-1 when it did not exit).
int runWithEnv(std::vector<std::string> argv, std::vector<std::string> env, const fs::path &log) {
  for (char **e = environ; *e; ++e) {
    if (std::string(*e).rfind("RCJIT_", 0) != 0) env.push_back(*e);
  }
  std::vector<char *> av, ev;
  for (std::string &s : argv) av.push_back(s.data());
  av.push_back(nullptr);
  for (std::string &s : env) ev.push_back(s.data());
  ev.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  pid_t pid = -1;
  int rc = posix_spawn(&pid, av[0], &fa, nullptr, av.data(), ev.data());
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) return -1;
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// A redis-server of this test's own on a free loopback port, no persistence; stopped (and
// waited for) when the object goes.
class RedisServer {
public:
  explicit RedisServer(const fs::path &dir, std::vector<std::string> extra = {})
      : port_(freePort()) {
    std::vector<std::string> argv = {
        redisServerPath(), "--port", std::to_string(port_), "--bind", "127.0.0.1",
        "--save",          "",       "--appendonly",        "no",     "--dir",
        dir.string()};
    argv.insert(argv.end(), extra.begin(), extra.end());
    std::vector<char *> av;
    for (std::string &s : argv) av.push_back(s.data());
    av.push_back(nullptr);
    log_ = dir / ("redis-" + std::to_string(port_) + ".log");
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, log_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    int rc = posix_spawn(&pid_, av[0], &fa, nullptr, av.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0) pid_ = -1;
    for (int i = 0; i < 500 && pid_ > 0 && !ping(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  ~RedisServer() { kill(); }
  RedisServer(const RedisServer &) = delete;
  RedisServer &operator=(const RedisServer &) = delete;

  bool ping() const {
    redisContext *c = connect();
    if (!c) return false;
    auto *r = static_cast<redisReply *>(redisCommand(c, "PING"));
    bool ok = r && r->type == REDIS_REPLY_STATUS && std::string(r->str) == "PONG";
    if (r) freeReplyObject(r);
    redisFree(c);
    return ok;
  }
  // A connection for the test's own commands (nullptr when the server does not answer).
  redisContext *connect() const {
    redisContext *c = redisConnectWithTimeout("127.0.0.1", port_, timeval{2, 0});
    if (c && c->err) {
      redisFree(c);
      return nullptr;
    }
    if (c) redisSetTimeout(c, timeval{5, 0});
    return c;
  }
  void kill() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
  int port() const { return port_; }
  std::string url() const { return "redis://127.0.0.1:" + std::to_string(port_); }
  std::string log() const { return readText(log_); }

private:
  int port_;
  pid_t pid_ = -1;
  fs::path log_;
};

// The keys and values under rcjit's prefix.
std::vector<std::pair<std::string, std::vector<uint8_t>>> entries(const RedisServer &s) {
  std::vector<std::pair<std::string, std::vector<uint8_t>>> out;
  redisContext *c = s.connect();
  if (!c) return out;
  const std::string pattern = cache::RemoteStore::prefix() + "*";
  auto *keys = static_cast<redisReply *>(redisCommand(c, "KEYS %s", pattern.c_str()));
  for (size_t i = 0; keys && i < keys->elements; ++i) {
    std::string k(keys->element[i]->str, keys->element[i]->len);
    auto *v = static_cast<redisReply *>(redisCommand(c, "GET %b", k.data(), k.size()));
    if (v && v->type == REDIS_REPLY_STRING) {
      out.push_back({k, std::vector<uint8_t>(v->str, v->str + v->len)});
    }
    if (v) freeReplyObject(v);
  }
  if (keys) freeReplyObject(keys);
  redisFree(c);
  return out;
}

void put(const RedisServer &s, const std::string &key, const std::vector<uint8_t> &bytes) {
  redisContext *c = s.connect();
  ASSERT_NE(c, nullptr);
  auto *r = static_cast<redisReply *>(
      redisCommand(c, "SET %b %b", key.data(), key.size(), bytes.data(), bytes.size()));
  EXPECT_TRUE(r && r->type == REDIS_REPLY_STATUS);
  if (r) freeReplyObject(r);
  redisFree(c);
}

// A compiled elementwise chain and layer norm; `variant` changes its constants, so each
// variant is new code (distinct cache keys).
std::vector<Tensor> work(const std::vector<Tensor> &in, int variant) {
  Tensor x = in[0];
  for (int i = 0; i < 2; ++i) {
    const double c = 1.5 + 0.25 * i + variant;
    x = layer_norm(silu(x) * c + tanh(x) / (c + 1), in[1], in[2], 1e-5);
  }
  return {softmax(x, -1) * 8.0};
}

std::vector<Tensor> workInputs() {
  return {Tensor::randn({16, 64}, 1), Tensor::randn({64}, 2), Tensor::randn({64}, 3)};
}

// Compiles and runs variant `v`, checking it against eager: the call must succeed and be right
// whatever the remote server does. Then waits for its optimized tier's background compile,
// whose cache traffic would otherwise land in the test's next phase (a write to a server
// killed meanwhile put the remote layer in its back-off before the test looked: 1 run in 12).
void compileAndCheck(int v) {
  std::vector<Tensor> in = workInputs();
  auto fn = compile([v](const std::vector<Tensor> &x) { return work(x, v); });
  std::vector<Tensor> got = fn(in);
  EXPECT_TRUE(allclose(got[0], work(in, v)[0], 1e-4, 1e-5)) << "variant " << v;
  EXPECT_TRUE(waitForBackgroundCompiles(120)) << "variant " << v;
}

// Each test: its own local cache directory and key file, the remote layer off at the end.
class RemoteCache : public testing::Test {
protected:
  void SetUp() override {
    if (redisServerPath().empty())
      GTEST_SKIP() << "redis-server is not installed (scripts/deps.sh)";
    static int n = 0;
    root_ = fs::temp_directory_path() /
            ("rcjit-remote-test-" + std::to_string(::getpid()) + "-" + std::to_string(n++));
    fs::remove_all(root_);
    fs::create_directories(root_);
    keyFile_ = root_ / "cache.key";
    oldDir_ = cache::dir();
    cache::set_dir((root_ / "local").string());
    cache::set_key_file(keyFile_.string());
    cache::clear();
    cache::reset_stats();
  }
  void TearDown() override {
    if (root_.empty()) return;
    set_logs("");
    cache::set_remote("");
    cache::clear();
    cache::set_dir(oldDir_.empty() ? "off" : oldDir_);
    cache::set_key_file(cache::defaultKeyFile());
    ::unsetenv("RCJIT_REMOTE_CACHE_TIMEOUT_MS");
    fs::remove_all(root_);
  }
  // Empties memory and the local directory: the next compile asks the server.
  void forgetLocally() {
    cache::clear();
    cache::reset_stats();
  }
  fs::path root_, keyFile_;
  std::string oldDir_;
};

TEST_F(RemoteCache, UrlsAreCheckedAndMalformedOnesAreErrors) {
  for (const char *bad :
       {"http://127.0.0.1:6379", "redis://127.0.0.1", "redis://:6379", "redis://h:0",
        "redis://h:70000", "redis://h:6379/x", "redis://h:x", "redis://u:p@h:6379"}) {
    std::string e = test::errorOf([&] { cache::set_remote(bad); });
    EXPECT_NE(e.find(std::string("'") + bad + "'"), std::string::npos) << e;
    EXPECT_NE(e.find("redis://host:port[/db]"), std::string::npos) << e;
  }
  cache::set_remote("redis://127.0.0.1:6379/2");
  EXPECT_EQ(cache::ObjectStore::instance().remoteUrl(), "redis://127.0.0.1:6379/2");
  cache::set_remote("redis://[::1]:7000");
  EXPECT_EQ(cache::ObjectStore::instance().remoteUrl(), "redis://[::1]:7000/0");
  cache::set_remote("");
  EXPECT_EQ(cache::ObjectStore::instance().remoteUrl(), "");
  // the tool: a malformed RCJIT_REMOTE_CACHE is an error (exit 1) naming it
  fs::path log = root_ / "stats.log";
  EXPECT_EQ(
      runWithEnv({RCJIT_CLI, "cache", "stats", "--remote"},
                 {"RCJIT_REMOTE_CACHE=redis:/oops", "RCJIT_CACHE_DIR=" + (root_ / "d").string(),
                  "RCJIT_CACHE_KEY_FILE=" + keyFile_.string()},
                 log),
      1);
  EXPECT_NE(readText(log).find("'redis:/oops'"), std::string::npos) << readText(log);
}

// Two processes with empty local caches and one key file: the first compiles and publishes,
// the second loads everything from the server and compiles nothing.
TEST_F(RemoteCache, SecondProcessHitsRemotelyAndCompilesNothing) {
  RedisServer server(root_);
  ASSERT_TRUE(server.ping()) << server.log();
  auto bench = [&](const std::string &name) {
    fs::path json = root_ / (name + ".json"), trace = root_ / (name + ".trace");
    int rc = runWithEnv({RCJIT_CLI, "bench", "--model", "toy64", "--layers", "1", "--modes", "full",
                         "--batch", "1", "--seq", "4", "--reps", "1",
                         "--cache-dir=" + (root_ / name).string(), "--json=" + json.string()},
                        {"RCJIT_REMOTE_CACHE=" + server.url(),
                         "RCJIT_CACHE_KEY_FILE=" + keyFile_.string(), "RCJIT_LOGS=cache",
                         "RCJIT_TRACE_FILE=" + trace.string()},
                        root_ / (name + ".log"));
    EXPECT_EQ(rc, 0) << readText(root_ / (name + ".log"));
    std::ifstream in(json);
    nlohmann::json row = nlohmann::json::parse(in, nullptr, false)["results"][0];
    return std::make_pair(row, readText(trace));
  };
  auto [row1, trace1] = bench("first");
  EXPECT_EQ(row1["remote_cache_hits"], 0);
  EXPECT_GT(countOf(trace1, R"("event":"cache_store")"), 0u);
  EXPECT_EQ(countOf(trace1, R"("event":"cache_store")"),
            countOf(trace1, R"("where":"disk+remote")"))
      << "every compiled object is published";
  const size_t published = entries(server).size();
  EXPECT_GT(published, 0u);

  auto [row2, trace2] = bench("second");
  EXPECT_GT(row2["remote_cache_hits"].get<int>(), 0) << trace2;
  EXPECT_EQ(countOf(trace2, R"("event":"cache_store")"), 0u) << "nothing compiled:\n" << trace2;
  EXPECT_EQ(countOf(trace2, R"("event":"cache_miss")"), 0u) << trace2;
  EXPECT_EQ(countOf(trace2, R"("where":"remote")"), static_cast<size_t>(row2["remote_cache_hits"]));
  EXPECT_NE(readText(root_ / "second.log").find("remote hit rcjit-"), std::string::npos)
      << "the cache log names remote hits";

  fs::path statsLog = root_ / "stats.log";
  ASSERT_EQ(runWithEnv({RCJIT_CLI, "cache", "stats", "--remote"},
                       {"RCJIT_REMOTE_CACHE=" + server.url(),
                        "RCJIT_CACHE_DIR=" + (root_ / "second").string(),
                        "RCJIT_CACHE_KEY_FILE=" + keyFile_.string()},
                       statsLog),
            0)
      << readText(statsLog);
  const std::string stats = readText(statsLog);
  EXPECT_NE(stats.find("remote:     " + server.url() + "/0 (redis "), std::string::npos) << stats;
  EXPECT_NE(stats.find("entries:  " + std::to_string(published) + " under rcjit:v"),
            std::string::npos)
      << stats;
  EXPECT_NE(stats.find("this process: 0 hits"), std::string::npos) << stats;
}

// The server dies between compiles: every call still succeeds (local compiles), the outage is
// logged once and, inside the retry interval, not asked again.
TEST_F(RemoteCache, KilledServerCostsNoFailedCall) {
  auto server = std::make_unique<RedisServer>(root_);
  ASSERT_TRUE(server->ping()) << server->log();
  cache::set_remote(server->url());
  compileAndCheck(0);
  EXPECT_GT(cache::stats().remote_writes, 0u);
  server->kill();
  forgetLocally();
  set_logs("cache");
  testing::internal::CaptureStderr();
  for (int v = 0; v < 3; ++v) compileAndCheck(v);
  const std::string log = testing::internal::GetCapturedStderr();
  set_logs("");
  const cache::Stats s = cache::stats();
  EXPECT_EQ(countOf(log, "unreachable"), 1u) << log;
  EXPECT_NE(log.find("remote cache " + server->url() + "/0 unreachable"), std::string::npos) << log;
  EXPECT_EQ(s.remote_errors, 1u) << "one failure, then the back-off skips the server";
  EXPECT_EQ(s.remote_hits, 0u);
  EXPECT_GT(s.misses, 0u);
  EXPECT_EQ(s.write_failures, 0u);
}

// A server that accepts connections and never answers (a socket of the test's own): the
// first lookup waits for the timeout, then the back-off keeps later calls off it.
TEST_F(RemoteCache, SilentServerIsBoundedByTheTimeout) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr *>(&a), sizeof a), 0);
  ASSERT_EQ(::listen(fd, 16), 0);
  ::getsockname(fd, reinterpret_cast<sockaddr *>(&a), &len);
  std::atomic<int> accepted{0};
  std::vector<int> held;
  std::thread acceptor([&] {
    for (;;) {
      int c = ::accept(fd, nullptr, nullptr);
      if (c < 0) return; // the listening socket was shut down
      ++accepted;
      held.push_back(c); // read nothing, answer nothing
    }
  });
  ::setenv("RCJIT_REMOTE_CACHE_TIMEOUT_MS", "100", 1);
  cache::set_remote("redis://127.0.0.1:" + std::to_string(ntohs(a.sin_port)));
  set_logs("cache");
  testing::internal::CaptureStderr();
  for (int v = 0; v < 3; ++v) compileAndCheck(v);
  const std::string log = testing::internal::GetCapturedStderr();
  set_logs("");
  ::shutdown(fd, SHUT_RDWR);
  acceptor.join();
  ::close(fd);
  for (int c : held) ::close(c);
  EXPECT_EQ(accepted.load(), 1) << "one connection, then the back-off";
  EXPECT_EQ(countOf(log, "unreachable"), 1u) << log;
  EXPECT_NE(log.find("no reply within 100 ms"), std::string::npos) << log;
  EXPECT_EQ(cache::stats().remote_errors, 1u);
}

// Entries on the server replaced by ones signed with another key, and by damaged bytes:
// refused (logged, counted), recompiled, and replaced by good entries that later hit.
TEST_F(RemoteCache, ForgedAndCorruptEntriesAreRejectedAndRecompiled) {
  RedisServer server(root_);
  ASSERT_TRUE(server.ping()) << server.log();
  cache::set_remote(server.url());
  for (int v = 0; v < 2; ++v) compileAndCheck(v); // two functions: two entries at least
  auto good = entries(server);
  ASSERT_GE(good.size(), 2u);
  cache::Secret other{};
  other.fill(7); // not this test's key file
  for (size_t i = 0; i < good.size(); ++i) {
    auto &[k, bytes] = good[i];
    std::vector<uint8_t> bad = bytes;
    if (i % 2 == 0) {
      cache::EntryFields e;
      e.key = k.substr(cache::RemoteStore::prefix().size());
      e.payload = {0x7f, 'E', 'L', 'F', 0xcc, 0xcc}; // would run if it were trusted
      bad = cache::encodeEntry(e, other);
    } else {
      // the payload's last byte (the entry ends with it): a byte in the middle of a
      // one-byte marker entry is in its header's tag, which fails authentication instead
      // (this test failed when the server's key order put two markers at odd positions)
      bad.back() ^= 0x5a;
    }
    put(server, k, bad);
  }
  forgetLocally();
  set_logs("cache");
  testing::internal::CaptureStderr();
  for (int v = 0; v < 2; ++v) compileAndCheck(v);
  const std::string log = testing::internal::GetCapturedStderr();
  set_logs("");
  cache::Stats s = cache::stats();
  EXPECT_EQ(s.remote_hits, 0u);
  EXPECT_EQ(s.rejections, good.size()) << log;
  EXPECT_EQ(countOf(log, "rejected remote entry " + server.url() + "/0 rcjit:v"), good.size())
      << log;
  EXPECT_NE(log.find("authentication failed"), std::string::npos) << log;
  EXPECT_NE(log.find("checksum mismatch"), std::string::npos) << log;
  // republished: the server holds good entries again, which the next process hits
  std::string why;
  const cache::Secret mine = cache::loadOrCreateSecret(keyFile_.string(), why).value();
  for (auto &[k, bytes] : entries(server)) {
    cache::EntryFields e;
    EXPECT_EQ(cache::decodeEntry(bytes, k.substr(cache::RemoteStore::prefix().size()), mine, e),
              cache::Verdict::ok)
        << k;
  }
  // a warm start from them compiles nothing: what it reads hits (tiered: each function's
  // optimized-tier marker and program; its fast tier is not needed then)
  forgetLocally();
  for (int v = 0; v < 2; ++v) compileAndCheck(v);
  s = cache::stats();
  EXPECT_EQ(s.misses, 0u);
  EXPECT_GE(s.remote_hits, 2u);
  EXPECT_LE(s.remote_hits, good.size());
  EXPECT_EQ(s.rejections, 0u);
}

// A server over its maxmemory under noeviction refuses every write: calls succeed, reads go
// on, the refusal is logged once.
TEST_F(RemoteCache, FullServerCostsNoFailedCall) {
  RedisServer server(root_, {"--maxmemory", "1", "--maxmemory-policy", "noeviction"});
  ASSERT_TRUE(server.ping()) << server.log();
  cache::set_remote(server.url());
  set_logs("cache");
  testing::internal::CaptureStderr();
  for (int v = 0; v < 2; ++v) compileAndCheck(v);
  const std::string log = testing::internal::GetCapturedStderr();
  set_logs("");
  const cache::Stats s = cache::stats();
  EXPECT_EQ(s.remote_writes, 0u);
  EXPECT_GT(s.remote_errors, 0u);
  EXPECT_GT(s.remote_misses, 0u) << "reads still work";
  EXPECT_EQ(countOf(log, "refuses writes"), 1u) << log;
  EXPECT_NE(log.find("OOM"), std::string::npos) << log;
  EXPECT_EQ(countOf(log, "unreachable"), 0u) << log;
  EXPECT_TRUE(entries(server).empty());
}

} // namespace
