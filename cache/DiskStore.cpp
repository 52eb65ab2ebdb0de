// Disk entries: POSIX file I/O for atomic replace, verification on read, eviction by mtime.
#include "cache/DiskStore.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <optional>
#include <set>

#include "cache/Key.h"
#include "support/Events.h"

namespace rcjit::cache {

namespace {

namespace fs = std::filesystem;

constexpr const char *kSuffix = ".rcobj";
constexpr const char *kTempPrefix = ".tmp-";
// A temp file this old is a writer's that died (killed, SIGXFSZ under `ulimit -f`): a live
// write renames its file within moments, and every write() call updates its mtime.
constexpr auto kStaleTemp = std::chrono::minutes(1);

// The temp files this process is writing now: never swept, however slow the write.
struct InFlight {
  std::mutex mu;
  std::set<std::string> paths;
};
InFlight &inFlight() {
  static InFlight *f = new InFlight(); // never destroyed: a write may outlive static destruction
  return *f;
}

// Registers a temp file of this process for its lifetime.
class InFlightTemp {
public:
  explicit InFlightTemp(std::string path) : path_(std::move(path)) {
    std::lock_guard<std::mutex> lock(inFlight().mu);
    inFlight().paths.insert(path_);
  }
  ~InFlightTemp() {
    std::lock_guard<std::mutex> lock(inFlight().mu);
    inFlight().paths.erase(path_);
  }
  InFlightTemp(const InFlightTemp &) = delete;
  InFlightTemp &operator=(const InFlightTemp &) = delete;

private:
  std::string path_;
};

// Removes `path`, a temp file of the cache directory, when a writer that died left it: older
// than kStaleTemp, owned by this user (in a shared directory, another user's is theirs) and
// not one this process is writing.
void removeIfStaleTemp(const fs::path &path, fs::file_time_type mtime, fs::file_time_type now) {
  if (now - mtime <= kStaleTemp) return;
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != ::geteuid()) return;
  {
    std::lock_guard<std::mutex> lock(inFlight().mu);
    if (inFlight().paths.count(path.string())) return;
  }
  std::error_code ec;
  fs::remove(path, ec);
}

bool readAll(int fd, std::vector<uint8_t> &out, size_t n) {
  out.resize(n);
  size_t got = 0;
  while (got < n) {
    ssize_t r = ::read(fd, out.data() + got, n - got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    got += static_cast<size_t>(r);
  }
  out.resize(got);
  return true;
}

bool writeAll(int fd, std::span<const uint8_t> bytes) {
  while (!bytes.empty()) {
    ssize_t w = ::write(fd, bytes.data(), bytes.size());
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    bytes = bytes.subspan(static_cast<size_t>(w));
  }
  return true;
}

// Whether a refused entry should be removed: not when it is well formed but signed with
// another key (perhaps another user's, in a shared directory); our next write replaces it.
bool deletable(Verdict v) { return v != Verdict::badTag; }

// Unlinks `path` only if it is still the file we read (a racing writer may have replaced it).
bool unlinkIfSame(const std::string &path, const struct stat &seen) {
  struct stat now {};
  if (::lstat(path.c_str(), &now) != 0) return false;
  if (now.st_dev != seen.st_dev || now.st_ino != seen.st_ino) return false;
  return ::unlink(path.c_str()) == 0;
}

struct FileInfo {
  fs::path path;
  uint64_t bytes;
  fs::file_time_type mtime;
};

bool isEntryName(const std::string &name) {
  size_t n = std::strlen(kSuffix);
  return name.size() > n && name.compare(name.size() - n, n, kSuffix) == 0 &&
         isContentKey(std::string_view(name).substr(0, name.size() - n));
}

std::vector<FileInfo> listEntries(const std::string &dir, bool removeStaleTemps) {
  std::vector<FileInfo> out;
  std::error_code ec;
  auto now = fs::file_time_type::clock::now();
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    std::string name = it->path().filename().string();
    std::error_code e2;
    if (!it->is_regular_file(e2)) continue;
    fs::file_time_type mtime = it->last_write_time(e2);
    if (e2) continue;
    if (name.rfind(kTempPrefix, 0) == 0) {
      if (removeStaleTemps) removeIfStaleTemp(it->path(), mtime, now);
      continue;
    }
    if (!isEntryName(name)) continue;
    uint64_t size = it->file_size(e2);
    if (!e2) out.push_back({it->path(), size, mtime});
  }
  return out;
}

} // namespace

DiskStore::DiskStore(std::string dir, const Secret &secret, uint64_t maxBytes, Counters &counters)
    : dir_(std::move(dir)), secret_(secret), maxBytes_(maxBytes), counters_(counters) {
  listEntries(dir_, true); // sweeps the temp files of writers that died
}

std::string DiskStore::pathOf(const std::string &key) const { return dir_ + "/" + key + kSuffix; }

void DiskStore::reject(const std::string &path, Verdict v, bool deleted) {
  counters_.rejections.fetch_add(1, std::memory_order_relaxed);
  logging::emit(
      logging::CacheRejectEvent{.path = path, .reason = verdictText(v), .deleted = deleted});
}

DiskStore::Read DiskStore::read(const std::string &key, std::vector<uint8_t> &payload) {
  std::string path = pathOf(key);
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return Read::miss;
  struct stat st {};
  std::vector<uint8_t> bytes;
  bool ok = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
  if (ok && static_cast<uint64_t>(st.st_size) <= std::max<uint64_t>(maxBytes_, 1 << 20)) {
    readAll(fd, bytes, static_cast<size_t>(st.st_size));
  }
  EntryFields e;
  Verdict v = ok ? decodeEntry(bytes, key, secret_, e) : Verdict::corrupt;
  if (v == Verdict::ok) ::futimens(fd, nullptr); // marks it recently used (LRU eviction)
  ::close(fd);
  if (v != Verdict::ok) {
    reject(path, v, ok && deletable(v) && unlinkIfSame(path, st));
    return Read::rejected;
  }
  payload = std::move(e.payload);
  return Read::hit;
}

bool DiskStore::write(const std::string &key, std::span<const uint8_t> payload) {
  EntryFields e;
  e.key = key;
  e.payload.assign(payload.begin(), payload.end());
  std::vector<uint8_t> bytes = encodeEntry(e, secret_);
  std::error_code ec;
  fs::create_directories(dir_, ec);
  std::string tmp = dir_ + "/" + kTempPrefix + key + "-XXXXXX";
  int fd = ::mkstemp(tmp.data()); // mode 0600, a unique name per writer
  std::optional<InFlightTemp> ours;
  if (fd >= 0) ours.emplace(tmp);
  bool ok = fd >= 0 && writeAll(fd, bytes) && ::fsync(fd) == 0;
  if (fd >= 0) ok = ::close(fd) == 0 && ok;
  ok = ok && ::rename(tmp.c_str(), pathOf(key).c_str()) == 0;
  if (!ok) {
    int err = errno;
    if (fd >= 0) ::unlink(tmp.c_str());
    counters_.writeFailures.fetch_add(1, std::memory_order_relaxed);
    logging::emit(logging::CacheWriteFailedEvent{.dir = dir_, .error = std::strerror(err)});
    return false;
  }
  counters_.diskWrites.fetch_add(1, std::memory_order_relaxed);
  evict();
  return true;
}

size_t DiskStore::evict() {
  std::vector<FileInfo> files = listEntries(dir_, true);
  uint64_t total = 0;
  for (const FileInfo &f : files) total += f.bytes;
  if (total <= maxBytes_) return 0;
  std::sort(files.begin(), files.end(),
            [](const FileInfo &a, const FileInfo &b) { return a.mtime < b.mtime; });
  size_t removed = 0;
  for (const FileInfo &f : files) {
    if (total <= maxBytes_) break;
    std::error_code ec;
    if (fs::remove(f.path, ec)) ++removed;
    total -= f.bytes; // gone either way: removed here or by a racing process
  }
  counters_.evictions.fetch_add(removed, std::memory_order_relaxed);
  if (removed && logging::wanted(logging::Kind::cache)) {
    logging::emit(logging::CacheEvictEvent{.count = static_cast<int64_t>(removed), .dir = dir_});
  }
  return removed;
}

void DiskStore::remove(const std::string &key) {
  std::error_code ec;
  fs::remove(pathOf(key), ec);
}

void DiskStore::clear() {
  std::error_code ec;
  for (fs::directory_iterator it(dir_, ec), end; !ec && it != end; it.increment(ec)) {
    std::string name = it->path().filename().string();
    std::error_code e2;
    if (isEntryName(name) || name.rfind(kTempPrefix, 0) == 0) fs::remove(it->path(), e2);
  }
}

DiskStore::Report DiskStore::inspect(bool verify) const {
  Report r;
  for (const FileInfo &f : listEntries(dir_, false)) {
    ++r.entries;
    r.bytes += f.bytes;
    if (!verify) continue;
    std::string name = f.path.filename().string();
    std::string key = name.substr(0, name.size() - std::strlen(kSuffix));
    std::vector<uint8_t> bytes;
    int fd = ::open(f.path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd >= 0) {
      readAll(fd, bytes, static_cast<size_t>(f.bytes));
      ::close(fd);
    }
    EntryFields e;
    (fd >= 0 && decodeEntry(bytes, key, secret_, e) == Verdict::ok ? r.valid : r.invalid) += 1;
  }
  return r;
}

std::vector<std::string> DiskStore::keys() const {
  std::vector<std::string> out;
  for (const FileInfo &f : listEntries(dir_, false)) {
    std::string name = f.path.filename().string();
    out.push_back(name.substr(0, name.size() - std::strlen(kSuffix)));
  }
  return out;
}

} // namespace rcjit::cache
