// The persistent compile cache: cross-process hits, damaged and forged entries, concurrent
// writers, eviction, artifacts, the key file and the `rcjit cache` command.
#include <elf.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include <rcjit/rcjit.h>

#include "cache/Counters.h"
#include "cache/DiskStore.h"
#include "cache/EntryFormat.h"
#include "cache/Key.h"
#include "cache/MemoryLru.h"
#include "cache/Secret.h"

extern char **environ;

using namespace rcjit;
namespace fs = std::filesystem;

namespace {

// A fresh cache directory and key file, removed at the end of the test.
struct TempCache {
  fs::path root, dir, key;
  TempCache() {
    static int n = 0;
    root = fs::temp_directory_path() /
           ("rcjit-cache-test-" + std::to_string(::getpid()) + "-" + std::to_string(n++));
    fs::remove_all(root);
    fs::create_directories(root);
    dir = root / "cache";
    key = root / "cache.key";
  }
  ~TempCache() { fs::remove_all(root); }
  cache::Secret secret() const {
    std::string why;
    std::optional<cache::Secret> s = cache::loadOrCreateSecret(key.string(), why);
    EXPECT_TRUE(s) << why;
    return s.value_or(cache::Secret{});
  }
};

std::string readText(const fs::path &p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<uint8_t> readBytes(const fs::path &p) {
  std::ifstream in(p, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

void writeBytes(const fs::path &p, const std::vector<uint8_t> &b) {
  std::ofstream o(p, std::ios::binary | std::ios::trunc);
  o.write(reinterpret_cast<const char *>(b.data()), static_cast<std::streamsize>(b.size()));
}

std::vector<fs::path> entryFiles(const fs::path &dir) {
  std::vector<fs::path> out;
  for (const auto &e : fs::directory_iterator(dir)) {
    if (e.path().extension() == ".rcobj") out.push_back(e.path());
  }
  return out;
}

std::string keyOf(const fs::path &entry) { return entry.stem().string(); }

// The compiled workload: per block a distinct fused elementwise chain feeding a layer norm,
// then a softmax, so the compile time is mostly LLVM optimizing and generating code.
std::vector<Tensor> workload(const std::vector<Tensor> &in, int variant) {
  Tensor x = in[0];
  const Tensor &w = in[1];
  const Tensor &b = in[2];
  for (int i = 0; i < 4; ++i) {
    double c = 1.0 + 0.125 * i + variant;
    Tensor y = i % 2 ? gelu(x) * c + sin(x) : silu(x) * c - tanh(x) * cos(x);
    x = layer_norm(y + exp(-abs(x)) / (c + 1), w, b, 1e-5);
    x = softmax(x * (0.5 + i) + sigmoid(x), -1) * 64.0 - 1.0;
  }
  return {x};
}

std::vector<Tensor> workloadInputs() {
  return {Tensor::randn({64, 256}, 1), Tensor::randn({256}, 2), Tensor::randn({256}, 3)};
}

std::map<std::string, std::string> parseOptions(const std::string &s) {
  std::map<std::string, std::string> opts;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    size_t eq = item.find('=');
    opts[item.substr(0, eq)] = eq == std::string::npos ? "" : item.substr(eq + 1);
  }
  return opts;
}

// What a child process did: the numbers it wrote and its stderr (with `cache` log lines).
struct Child {
  std::map<std::string, double> v;
  std::string log;
  double operator[](const std::string &k) const { return v.count(k) ? v.at(k) : -1; }
};

// Starts this test binary running only CacheChild.Run with `opts` (see that test).
pid_t spawnChild(const TempCache &c, const std::string &opts, const fs::path &out) {
  std::vector<std::string> env;
  for (char **e = environ; *e; ++e) {
    std::string s = *e;
    if (s.rfind("RCJIT_", 0) != 0) env.push_back(s);
  }
  env.push_back("RCJIT_CACHE_DIR=" + c.dir.string());
  env.push_back("RCJIT_CACHE_KEY_FILE=" + c.key.string());
  env.push_back("RCJIT_LOGS=cache");
  // the object cache's own counts: one program per compile, no fast tier beside it (the
  // tiered compile's cache marker: tests/tiered_test.cpp)
  env.push_back("RCJIT_TIERED=0");
  env.push_back("RCJIT_CACHE_TEST_CHILD=" + opts);
  env.push_back("RCJIT_CACHE_TEST_OUT=" + out.string());
  std::vector<char *> envp;
  for (std::string &s : env) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::string exe = fs::read_symlink("/proc/self/exe").string();
  std::string filter = "--gtest_filter=CacheChild.Run";
  char *argv[] = {exe.data(), filter.data(), nullptr};
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  std::string log = out.string() + ".log";
  posix_spawn_file_actions_addopen(&fa, 2, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  pid_t pid = -1;
  int rc = posix_spawn(&pid, exe.c_str(), &fa, nullptr, argv, envp.data());
  posix_spawn_file_actions_destroy(&fa);
  EXPECT_EQ(rc, 0) << std::strerror(rc);
  return pid;
}

Child waitChild(pid_t pid, const fs::path &out) {
  int status = 0;
  ::waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child failed:\n"
                                                             << readText(out.string() + ".log");
  Child r;
  r.log = readText(out.string() + ".log");
  std::ifstream in(out);
  std::string name;
  double value;
  while (in >> name >> value) r.v[name] = value;
  return r;
}

Child runChild(const TempCache &c, const std::string &opts) {
  static int n = 0;
  fs::path out = c.root / ("child" + std::to_string(n++) + ".txt");
  return waitChild(spawnChild(c, opts, out), out);
}

// Runs in a child process only (RCJIT_CACHE_TEST_CHILD holds its options): optionally loads
// artifacts (load=FILE), compiles and runs the workload (variants=N functions, checked against
// eager), optionally saves artifacts (save=FILE), and writes its numbers to
// RCJIT_CACHE_TEST_OUT.
TEST(CacheChild, Run) {
  const char *optsEnv = std::getenv("RCJIT_CACHE_TEST_CHILD");
  if (!optsEnv) GTEST_SKIP() << "runs only as a child of the other Cache tests";
  std::map<std::string, std::string> opts = parseOptions(optsEnv);
  if (opts.count("load")) cache::load_artifacts(readBytes(opts["load"]));
  int variants = opts.count("variants") ? std::stoi(opts["variants"]) : 1;
  std::vector<Tensor> in = workloadInputs();
  double firstMs = 0;
  bool ok = true;
  for (int v = 0; v < variants; ++v) {
    auto fn = compile([v](const std::vector<Tensor> &x) { return workload(x, v); });
    auto t0 = std::chrono::steady_clock::now();
    std::vector<Tensor> got = fn(in);
    firstMs +=
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    ok = ok && allclose(got[0], workload(in, v)[0], 1e-3, 1e-4);
  }
  EXPECT_TRUE(ok);
  if (opts.count("save")) {
    std::vector<uint8_t> blob = cache::save_artifacts();
    writeBytes(opts["save"], blob);
  }
  cache::Stats s = cache::stats();
  std::ofstream out(std::getenv("RCJIT_CACHE_TEST_OUT"));
  out << "ok " << ok << "\nfirst_ms " << firstMs << "\nlookups " << s.lookups << "\nmemory_hits "
      << s.memory_hits << "\ndisk_hits " << s.disk_hits << "\nmisses " << s.misses
      << "\ndisk_writes " << s.disk_writes << "\nrejections " << s.rejections << "\n";
}

void expectColdCompile(const Child &r) {
  EXPECT_EQ(r["ok"], 1);
  EXPECT_GT(r["misses"], 0);
  EXPECT_EQ(r["disk_hits"], 0);
  EXPECT_EQ(r["disk_writes"], r["misses"]);
}

void expectAllHits(const Child &r) {
  EXPECT_EQ(r["ok"], 1);
  EXPECT_GT(r["lookups"], 0);
  EXPECT_EQ(r["misses"], 0);
  EXPECT_EQ(r["disk_writes"], 0);
}

cache::DiskStore::Report verifyDir(const TempCache &c) {
  cache::Counters counters;
  cache::DiskStore store(c.dir.string(), c.secret(), uint64_t(1) << 30, counters);
  return store.inspect(true);
}

TEST(CacheDisk, SecondProcessHitsTheDiskCache) {
  TempCache c;
  Child cold = runChild(c, "");
  Child warm = runChild(c, "");
  expectColdCompile(cold);
  expectAllHits(warm);
  EXPECT_EQ(warm["disk_hits"], cold["misses"]);
  EXPECT_NE(warm.log.find("[rcjit:cache] disk hit rcjit-"), std::string::npos) << warm.log;
  std::printf("[ cache    ] cold first call %.1f ms (%g modules compiled), warm %.1f ms "
              "(%g disk hits): %.1f %%\n",
              cold["first_ms"], cold["misses"], warm["first_ms"], warm["disk_hits"],
              100 * warm["first_ms"] / cold["first_ms"]);
}

using Damage = std::function<std::vector<uint8_t>(const std::string &key, std::vector<uint8_t>)>;

// Entries written by one cold compile, kept to be damaged in several ways.
struct Pristine {
  TempCache c;
  std::map<fs::path, std::vector<uint8_t>> entries;
  Pristine() {
    expectColdCompile(runChild(c, ""));
    for (const fs::path &f : entryFiles(c.dir)) entries[f] = readBytes(f);
    EXPECT_FALSE(entries.empty());
  }
};

// Replaces every entry by a damaged copy of the pristine one; the next process must refuse
// each with a `cache` log line naming `reason`, recompile, and leave only valid entries.
void expectRecompiledAfter(Pristine &p, const char *what, const Damage &damage,
                           const std::string &reason) {
  SCOPED_TRACE(what);
  for (const auto &[f, bytes] : p.entries) writeBytes(f, damage(keyOf(f), bytes));
  Child r = runChild(p.c, "");
  expectColdCompile(r);
  EXPECT_EQ(r["rejections"], static_cast<double>(p.entries.size()));
  EXPECT_NE(r.log.find("[rcjit:cache] rejected disk entry"), std::string::npos) << r.log;
  EXPECT_NE(r.log.find(reason), std::string::npos) << r.log;
  cache::DiskStore::Report rep = verifyDir(p.c);
  EXPECT_EQ(rep.invalid, 0u); // every damaged entry was replaced by a good one
  EXPECT_EQ(rep.valid, p.entries.size());
}

// The entry decoded with the test's secret, for re-encoding with one field changed.
cache::EntryFields decoded(const std::string &key, const std::vector<uint8_t> &bytes,
                           const cache::Secret &secret) {
  cache::EntryFields e;
  EXPECT_EQ(cache::decodeEntry(bytes, key, secret, e), cache::Verdict::ok);
  return e;
}

// A damage that re-signs the entry after `change` (to its fields or to the secret used).
Damage resigned(const cache::Secret &secret,
                std::function<void(cache::EntryFields &, cache::Secret &)> change) {
  return [secret, change](const std::string &key, std::vector<uint8_t> b) {
    cache::EntryFields e = decoded(key, b, secret);
    cache::Secret s = secret;
    change(e, s);
    return cache::encodeEntry(e, s);
  };
}

Damage flipByte(size_t (*where)(size_t size)) {
  return [where](const std::string &, std::vector<uint8_t> b) {
    b[where(b.size())] ^= 0x5a;
    return b;
  };
}

Damage truncateTo(size_t (*size)(size_t size)) {
  return [size](const std::string &, std::vector<uint8_t> b) {
    b.resize(size(b.size()));
    return b;
  };
}

TEST(CacheDisk, DamagedForeignOrOtherKeyEntriesAreRecompiled) {
  Pristine p;
  expectRecompiledAfter(p, "flipped payload byte", flipByte([](size_t n) { return n / 2; }),
                        "checksum mismatch");
  expectRecompiledAfter(p, "flipped magic byte", flipByte([](size_t) { return size_t(0); }),
                        "corrupt");
  expectRecompiledAfter(p, "truncated", truncateTo([](size_t n) { return n * 2 / 3; }),
                        "truncated");
  expectRecompiledAfter(p, "empty file", truncateTo([](size_t) { return size_t(0); }), "truncated");
  cache::Secret secret = p.c.secret();
  expectRecompiledAfter(
      p, "another rcjit version",
      resigned(secret, [](cache::EntryFields &e, cache::Secret &) { e.version = "0.0.1"; }),
      "written by another rcjit version");
  expectRecompiledAfter(
      p, "another format version",
      resigned(secret, [](cache::EntryFields &e, cache::Secret &) { e.format = 99; }),
      "another cache format version");
  expectRecompiledAfter(
      p, "another user's key",
      resigned(secret, [](cache::EntryFields &, cache::Secret &s) { s[0] ^= 0xff; }),
      "authentication failed");
}

// The attacker can write the directory but lacks the secret: they replace the code and fix
// the checksum, keeping the old tag. The reader must refuse it and run correct code.
TEST(CacheDisk, EntryForgedWithoutTheSecretIsRejected) {
  Pristine p;
  cache::Secret secret = p.c.secret();
  Damage forge = [&](const std::string &key, std::vector<uint8_t> bytes) {
    cache::EntryFields e = decoded(key, bytes, secret);
    e.payload.assign(e.payload.size(), 0xcc); // the attacker's code: int3 everywhere
    cache::Tag oldTag;
    std::memcpy(oldTag.data(), bytes.data() + 40, oldTag.size());
    std::vector<uint8_t> forged = cache::encodeEntryWithTag(e, oldTag); // valid checksum
    cache::EntryFields out;
    EXPECT_EQ(cache::decodeEntry(forged, key, secret, out), cache::Verdict::badTag);
    return forged;
  };
  expectRecompiledAfter(p, "forged", forge, "authentication failed");
}

// ---- objects that are damaged but correctly signed (what importing a bad blob makes)

// Rewrites the object inside every entry with `edit` and re-signs the entry.
Damage objectEdit(const cache::Secret &secret, std::function<void(std::vector<uint8_t> &)> edit) {
  return resigned(secret, [edit](cache::EntryFields &e, cache::Secret &) { edit(e.payload); });
}

template <class T> T &elfAt(std::vector<uint8_t> &b, uint64_t off) {
  EXPECT_LE(off + sizeof(T), b.size());
  return *reinterpret_cast<T *>(b.data() + off);
}

// Calls f on every section header of the ELF object in b.
void forEachSection(std::vector<uint8_t> &b, const std::function<void(Elf64_Shdr &)> &f) {
  auto &h = elfAt<Elf64_Ehdr>(b, 0);
  for (int i = 0; i < h.e_shnum; ++i) f(elfAt<Elf64_Shdr>(b, h.e_shoff + i * sizeof(Elf64_Shdr)));
}

// A signed entry whose object is unusable must be evicted and recompiled (correct results),
// and the next process must hit the replaced, good entry. Before: garbage or truncated
// objects were an Error on every run, and malformed ELF could crash the linker.
void expectObjectEvicted(Pristine &p, const char *what, const Damage &damage,
                         const std::string &reason) {
  SCOPED_TRACE(what);
  for (const auto &[f, bytes] : p.entries) writeBytes(f, damage(keyOf(f), bytes));
  Child r = runChild(p.c, "");
  EXPECT_EQ(r["ok"], 1);
  EXPECT_EQ(r["rejections"], static_cast<double>(p.entries.size()));
  EXPECT_NE(r.log.find("rejected cached object rcjit-"), std::string::npos) << r.log;
  EXPECT_NE(r.log.find(reason), std::string::npos) << r.log;
  EXPECT_EQ(r["disk_writes"], static_cast<double>(p.entries.size())); // recompiled and stored
  expectAllHits(runChild(p.c, ""));
}

TEST(CacheDisk, SignedButDamagedObjectsAreEvictedAndRecompiled) {
  Pristine p;
  cache::Secret secret = p.c.secret();
  expectObjectEvicted(p, "garbage",
                      objectEdit(secret,
                                 [](std::vector<uint8_t> &b) {
                                   for (size_t i = 0; i < b.size(); ++i)
                                     b[i] = static_cast<uint8_t>(i * 7);
                                 }),
                      "not a 64-bit little-endian ELF file");
  expectObjectEvicted(p, "truncated",
                      objectEdit(secret, [](std::vector<uint8_t> &b) { b.resize(b.size() / 2); }),
                      "rejected cached object");
  expectObjectEvicted(p, "section headers past the end",
                      objectEdit(secret,
                                 [](std::vector<uint8_t> &b) {
                                   elfAt<Elf64_Ehdr>(b, 0).e_shoff = uint64_t{1} << 40;
                                 }),
                      "bad section headers");
  expectObjectEvicted(p, "section contents past the end",
                      objectEdit(secret,
                                 [](std::vector<uint8_t> &b) {
                                   forEachSection(b, [](Elf64_Shdr &s) {
                                     if (s.sh_type == SHT_PROGBITS) s.sh_size = uint64_t{1} << 40;
                                   });
                                 }),
                      "contents lie outside");
  expectObjectEvicted(p, "relocation outside its section",
                      objectEdit(secret,
                                 [](std::vector<uint8_t> &b) {
                                   forEachSection(b, [&](Elf64_Shdr &s) {
                                     if (s.sh_type != SHT_RELA || s.sh_size == 0) return;
                                     elfAt<Elf64_Rela>(b, s.sh_offset).r_offset = uint64_t{1} << 40;
                                   });
                                 }),
                      "a relocation at offset 1099511627776 lies outside");
  expectObjectEvicted(p, "relocation naming a missing symbol",
                      objectEdit(secret,
                                 [](std::vector<uint8_t> &b) {
                                   forEachSection(b, [&](Elf64_Shdr &s) {
                                     if (s.sh_type != SHT_RELA || s.sh_size == 0) return;
                                     auto &r = elfAt<Elf64_Rela>(b, s.sh_offset);
                                     r.r_info = ELF64_R_INFO(1u << 30, ELF64_R_TYPE(r.r_info));
                                   });
                                 }),
                      "names a symbol past the symbol table");
  // Found by fuzz/cache_entry_fuzzer: a relocation against symbol 0, which JITLink
  // dereferenced null on while reporting it.
  expectObjectEvicted(p, "relocation naming symbol 0",
                      objectEdit(secret,
                                 [](std::vector<uint8_t> &b) {
                                   forEachSection(b, [&](Elf64_Shdr &s) {
                                     if (s.sh_type != SHT_RELA || s.sh_size == 0) return;
                                     auto &r = elfAt<Elf64_Rela>(b, s.sh_offset);
                                     r.r_info = ELF64_R_INFO(0, R_X86_64_8);
                                   });
                                 }),
                      "names symbol 0 (no symbol)");
  // Found by fuzz/cache_entry_fuzzer: only the null section header left, which JITLink
  // crashed on.
  expectObjectEvicted(p, "no sections",
                      objectEdit(secret,
                                 [](std::vector<uint8_t> &b) {
                                   elfAt<Elf64_Ehdr>(b, 0).e_shnum = 1;
                                   elfAt<Elf64_Ehdr>(b, 0).e_shstrndx = 0;
                                 }),
                      "no symbol table");
  // Structurally sound but the kernels are gone: linking (the lookup) fails instead.
  expectObjectEvicted(p, "kernel symbols undefined",
                      objectEdit(secret,
                                 [](std::vector<uint8_t> &b) {
                                   forEachSection(b, [&](Elf64_Shdr &s) {
                                     if (s.sh_type != SHT_SYMTAB) return;
                                     for (uint64_t o = s.sh_offset;
                                          o + sizeof(Elf64_Sym) <= s.sh_offset + s.sh_size;
                                          o += sizeof(Elf64_Sym)) {
                                       auto &sym = elfAt<Elf64_Sym>(b, o);
                                       if (ELF64_ST_TYPE(sym.st_info) == STT_FUNC)
                                         sym.st_shndx = SHN_UNDEF;
                                     }
                                   });
                                 }),
                      "it failed to link");
}

TEST(CacheDisk, FourProcessesShareOneDirectory) {
  TempCache c;
  std::vector<std::pair<pid_t, fs::path>> kids;
  for (int i = 0; i < 4; ++i) {
    fs::path out = c.root / ("racer" + std::to_string(i) + ".txt");
    kids.emplace_back(spawnChild(c, "variants=2", out), out);
  }
  for (auto &[pid, out] : kids) EXPECT_EQ(waitChild(pid, out)["ok"], 1);
  cache::DiskStore::Report rep = verifyDir(c);
  EXPECT_EQ(rep.invalid, 0u);
  EXPECT_GE(rep.valid, 2u); // at least one module per function
  for (const auto &e : fs::directory_iterator(c.dir)) {
    EXPECT_EQ(e.path().extension(), ".rcobj") << "left behind: " << e.path();
  }
  expectAllHits(runChild(c, "variants=2"));
}

// A writer killed mid-write (SIGXFSZ under `ulimit -f`, SIGKILL) leaves its temp file: opening
// the directory sweeps those older than a minute, and so does every write of a long-lived
// process; a recent one (perhaps a live writer's) stays.
TEST(CacheDisk, TempFilesOfDeadWritersAreSwept) {
  TempCache c;
  fs::create_directories(c.dir);
  const std::string key = cache::contentKey({"sweep", "0"});
  const fs::path stale = c.dir / (".tmp-" + key + "-AAAAAA");
  const fs::path recent = c.dir / (".tmp-" + key + "-BBBBBB");
  writeBytes(stale, std::vector<uint8_t>(100, 1));
  writeBytes(recent, std::vector<uint8_t>(100, 1));
  const auto now = fs::file_time_type::clock::now();
  fs::last_write_time(stale, now - std::chrono::seconds(90));
  cache::Counters counters;
  cache::DiskStore store(c.dir.string(), c.secret(), uint64_t(1) << 30, counters);
  EXPECT_FALSE(fs::exists(stale)) << "opening the directory sweeps";
  EXPECT_TRUE(fs::exists(recent)) << "under a minute old: perhaps a live writer's";
  fs::last_write_time(recent, now - std::chrono::seconds(90));
  ASSERT_TRUE(store.write(key, std::vector<uint8_t>(10, 2)));
  EXPECT_FALSE(fs::exists(recent)) << "a write sweeps too";
  std::vector<uint8_t> got;
  EXPECT_EQ(store.read(key, got), cache::DiskStore::Read::hit);
  for (const auto &e : fs::directory_iterator(c.dir)) {
    EXPECT_EQ(e.path().extension(), ".rcobj") << "left behind: " << e.path();
  }
}

TEST(CacheDisk, EvictionKeepsTheDirectoryUnderItsBound) {
  TempCache c;
  cache::Counters counters;
  const uint64_t bound = 64 * 1024;
  cache::DiskStore store(c.dir.string(), c.secret(), bound, counters);
  std::vector<uint8_t> payload(4000, 7);
  auto key = [](int i) { return cache::contentKey({"eviction", std::to_string(i)}); };
  for (int i = 0; i < 10; ++i) {
    ASSERT_TRUE(store.write(key(i), payload));
    std::this_thread::sleep_for(std::chrono::milliseconds(2)); // distinct mtimes
  }
  std::vector<uint8_t> got;
  EXPECT_EQ(store.read(key(0), got), cache::DiskStore::Read::hit); // 0 is now recent
  std::this_thread::sleep_for(std::chrono::milliseconds(2));
  for (int i = 10; i < 40; ++i) {
    ASSERT_TRUE(store.write(key(i), payload));
    EXPECT_LE(store.inspect(false).bytes, bound);
    if (i == 15) {
      EXPECT_EQ(store.read(key(0), got), cache::DiskStore::Read::hit);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  EXPECT_GT(counters.evictions.load(), 0u);
  EXPECT_EQ(store.read(key(1), got), cache::DiskStore::Read::miss); // least recently used
  EXPECT_EQ(store.read(key(39), got), cache::DiskStore::Read::hit);
  EXPECT_EQ(got, payload);
  store.setMaxBytes(10000);
  store.evict();
  EXPECT_LE(store.inspect(false).bytes, 10000u);
}

TEST(CacheArtifacts, SavedInOneProcessWarmAnotherWithAnEmptyDirectory) {
  TempCache a, b;
  fs::path blob = a.root / "artifacts.bin";
  Child saver = runChild(a, "variants=2,save=" + blob.string());
  expectColdCompile(saver);
  ASSERT_GT(fs::file_size(blob), 0u);
  Child loader = runChild(b, "variants=2,load=" + blob.string()); // b: other dir, other key
  EXPECT_EQ(loader["ok"], 1);
  EXPECT_EQ(loader["misses"], 0);
  EXPECT_EQ(loader["memory_hits"], saver["misses"]);
  EXPECT_EQ(loader["disk_writes"], saver["misses"]); // load_artifacts warmed the disk
  cache::DiskStore::Report rep = verifyDir(b);       // the disk is warm too, signed with b's key
  EXPECT_EQ(rep.valid, static_cast<uint64_t>(saver["misses"]));
  EXPECT_EQ(rep.invalid, 0u);
  Child next = runChild(b, "variants=2");
  expectAllHits(next);
  EXPECT_EQ(next["disk_hits"], saver["misses"]);
}

TEST(CacheArtifacts, MalformedBlobsAreErrors) {
  EXPECT_THROW(cache::load_artifacts({1, 2, 3}), Error);
  EXPECT_THROW(cache::load_artifacts({}), Error);
  std::vector<uint8_t> blob = cache::save_artifacts();
  blob.resize(blob.size() - 1);
  EXPECT_THROW(cache::load_artifacts(blob), Error);
}

// An 11-byte zstd frame whose header claims 1.9 GB: the whole claim was allocated (and
// zero-filled) before decompression failed.
TEST(CacheArtifacts, FrameClaimingMoreThanItCanHoldIsRefusedUpFront) {
  // magic, descriptor (single segment, 4-byte content size), 0x70000000, then 2 bytes.
  const std::vector<uint8_t> frame = {0x28, 0xb5, 0x2f, 0xfd, 0xa0, 0x00,
                                      0x00, 0x00, 0x70, 0x00, 0x00};
  rusage before{}, after{};
  ::getrusage(RUSAGE_SELF, &before);
  std::string e;
  try {
    cache::load_artifacts(frame);
  } catch (const Error &err) {
    e = err.what();
  }
  ::getrusage(RUSAGE_SELF, &after);
  EXPECT_NE(e.find("its header claims 1879048192 bytes, more than its 11 compressed bytes can "
                   "hold"),
            std::string::npos)
      << e;
  EXPECT_LT(after.ru_maxrss - before.ru_maxrss, 256 * 1024) << "KiB of peak memory grown";
  // A frame truncated mid-stream is an Error too (streamed, with a correct size claim).
  std::vector<uint8_t> blob = cache::save_artifacts();
  for (size_t cut : {blob.size() / 2, blob.size() - 3}) {
    std::vector<uint8_t> part(blob.begin(), blob.begin() + static_cast<std::ptrdiff_t>(cut));
    EXPECT_THROW(cache::load_artifacts(part), Error) << cut;
  }
  std::vector<uint8_t> trailing = blob;
  trailing.push_back(0);
  EXPECT_THROW(cache::load_artifacts(trailing), Error);
}

TEST(CacheKey, ContentKeysAreStableSafeNames) {
  std::string k = cache::contentKey({"a", "b"});
  EXPECT_EQ(k, cache::contentKey({"a", "b"}));
  EXPECT_NE(k, cache::contentKey({"ab", ""})); // parts are length-prefixed
  EXPECT_TRUE(cache::isContentKey(k));
  EXPECT_FALSE(cache::isContentKey("rcjit-../../etc/passwd"));
  EXPECT_FALSE(cache::isContentKey("rcjit_f0_e0"));
  EXPECT_FALSE(cache::buildId().empty()); // rebuilt code never reuses stale entries
}

TEST(CacheMemory, LruKeepsItsBound) {
  cache::MemoryLru lru(100);
  auto bytes = [](size_t n) { return std::make_shared<const std::vector<uint8_t>>(n, 1); };
  lru.put("a", bytes(40));
  lru.put("b", bytes(40));
  EXPECT_TRUE(lru.get("a")); // b is now the least recently used
  lru.put("c", bytes(40));
  EXPECT_FALSE(lru.get("b"));
  EXPECT_TRUE(lru.get("a"));
  EXPECT_LE(lru.bytes(), 100u);
  lru.put("huge", bytes(500));
  EXPECT_FALSE(lru.get("huge"));
}

TEST(CacheSecret, KeyFileIsPrivateAndCheckedForPermissions) {
  TempCache c;
  fs::path key = c.root / "sub" / "cache.key";
  std::string why;
  std::optional<cache::Secret> s1 = cache::loadOrCreateSecret(key.string(), why);
  ASSERT_TRUE(s1) << why;
  EXPECT_EQ(fs::status(key).permissions() & fs::perms::all,
            fs::perms::owner_read | fs::perms::owner_write);
  std::optional<cache::Secret> s2 = cache::loadOrCreateSecret(key.string(), why);
  EXPECT_EQ(s1, s2);
  ::chmod(key.c_str(), 0644);
  EXPECT_FALSE(cache::loadOrCreateSecret(key.string(), why));
  EXPECT_NE(why.find("mode 0600"), std::string::npos) << why;
}

// The CLI in its own process: stats, export, import into an empty directory, clear.
TEST(CacheCli, StatsExportImportClear) {
  TempCache a, b;
  expectColdCompile(runChild(a, ""));
  fs::path blob = a.root / "export.bin";
  auto cli = [](const TempCache &c, const std::string &args) {
    std::string out = (c.root / "cli.txt").string();
    std::string cmd = "RCJIT_CACHE_DIR=" + c.dir.string() +
                      " RCJIT_CACHE_KEY_FILE=" + c.key.string() + " " + RCJIT_CLI + " cache " +
                      args + " > " + out + " 2>&1";
    int rc = std::system(cmd.c_str());
    return std::make_pair(rc, readText(out));
  };
  auto [rc1, stats] = cli(a, "stats");
  EXPECT_EQ(rc1, 0) << stats;
  EXPECT_NE(stats.find("(" + std::to_string(entryFiles(a.dir).size()) + " valid, 0 invalid)"),
            std::string::npos)
      << stats;
  auto [rc2, exported] = cli(a, "export " + blob.string());
  EXPECT_EQ(rc2, 0) << exported;
  auto [rc3, imported] = cli(b, "import " + blob.string());
  EXPECT_EQ(rc3, 0) << imported;
  EXPECT_EQ(entryFiles(b.dir).size(), entryFiles(a.dir).size());
  // export counts what the file holds, as import reads it (it used to say "exported 0")
  const size_t n = entryFiles(a.dir).size();
  const std::string entries = std::to_string(n) + (n == 1 ? " entry " : " entries ");
  EXPECT_EQ(exported.rfind("exported " + entries + "to ", 0), 0u) << exported;
  EXPECT_EQ(imported.rfind("imported " + entries + "into ", 0), 0u) << imported;
  expectAllHits(runChild(b, ""));
  auto [rc4, cleared] = cli(b, "clear");
  EXPECT_EQ(rc4, 0) << cleared;
  EXPECT_TRUE(entryFiles(b.dir).empty());
  auto [rc5, bad] = cli(b, "frobnicate");
  EXPECT_EQ(rc5 >> 8, 2) << bad;
}

// Import into a directory that cannot be written, or export from one that does not exist,
// used to report success ("imported 1 entries", exit 0).
TEST(CacheCli, ImportAndExportIntoUnusableDirectoriesFail) {
  TempCache a;
  expectColdCompile(runChild(a, ""));
  fs::path blob = a.root / "export.bin";
  auto cli = [&](const std::string &args) {
    std::string out = (a.root / "cli.txt").string();
    std::string cmd = "RCJIT_CACHE_DIR=" + a.dir.string() +
                      " RCJIT_CACHE_KEY_FILE=" + a.key.string() + " " + RCJIT_CLI + " cache " +
                      args + " > " + out + " 2>&1";
    int rc = std::system(cmd.c_str());
    return std::make_pair(WIFEXITED(rc) ? WEXITSTATUS(rc) : -1, readText(out));
  };
  auto [rc0, exported] = cli("export " + blob.string());
  ASSERT_EQ(rc0, 0) << exported;
  fs::path file = a.root / "a-file";
  writeBytes(file, {1, 2, 3});
  auto [rc1, intoFile] = cli("import " + blob.string() + " --dir " + file.string());
  EXPECT_EQ(rc1, 1) << intoFile;
  EXPECT_NE(intoFile.find("'" + file.string() + "' is not a directory"), std::string::npos)
      << intoFile;
  auto [rc2, underFile] = cli("import " + blob.string() + " --dir " + (file / "sub").string());
  EXPECT_EQ(rc2, 1) << underFile;
  EXPECT_NE(underFile.find("cannot create the cache directory"), std::string::npos) << underFile;
  auto [rc3, missing] =
      cli("export " + (a.root / "x.bin").string() + " --dir " + (a.root / "missing").string());
  EXPECT_EQ(rc3, 1) << missing;
  EXPECT_NE(missing.find("does not exist"), std::string::npos) << missing;
  EXPECT_FALSE(fs::exists(a.root / "x.bin"));
  auto [rc4, off] = cli("import " + blob.string() + " --dir off");
  EXPECT_EQ(rc4, 1) << off;
  EXPECT_NE(off.find("the disk cache is off"), std::string::npos) << off;
  if (::geteuid() != 0) { // root writes anywhere
    fs::path ro = a.root / "read-only";
    fs::create_directories(ro);
    fs::permissions(ro, fs::perms::owner_read | fs::perms::owner_exec);
    auto [rc5, denied] = cli("import " + blob.string() + " --dir " + ro.string());
    EXPECT_EQ(rc5, 1) << denied;
    EXPECT_NE(denied.find("is not writable"), std::string::npos) << denied;
    fs::permissions(ro, fs::perms::owner_all);
  }
  auto [rc6, fine] = cli("import " + blob.string() + " --dir " + (a.root / "fresh").string());
  EXPECT_EQ(rc6, 0) << fine;
  EXPECT_FALSE(entryFiles(a.root / "fresh").empty());
}

} // namespace
