// Key file creation (temp file + link, so racing processes agree on one secret) and checks.
#include "cache/Secret.h"

#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

namespace rcjit::cache {

namespace {

namespace fs = std::filesystem;

std::string errnoText(const std::string &what) { return what + ": " + std::strerror(errno); }

bool randomBytes(Secret &s) {
  size_t got = 0;
  while (got < s.size()) {
    ssize_t n = getrandom(s.data() + got, s.size() - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    got += static_cast<size_t>(n);
  }
  return true;
}

bool writeAll(int fd, const uint8_t *p, size_t n) {
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

// Creates `path` with a fresh secret unless it exists; a racing creator's file wins.
bool createKeyFile(const std::string &path, std::string &why) {
  std::error_code ec;
  fs::path dir = fs::path(path).parent_path();
  if (!dir.empty()) fs::create_directories(dir, ec);
  std::string tmp = path + ".tmp-XXXXXX";
  int fd = mkstemp(tmp.data()); // mode 0600
  if (fd < 0) {
    why = errnoText("cannot create the cache key file " + path);
    return false;
  }
  Secret s{};
  bool ok = randomBytes(s) && writeAll(fd, s.data(), s.size()) && ::fsync(fd) == 0;
  ::close(fd);
  if (ok && ::link(tmp.c_str(), path.c_str()) != 0 && errno != EEXIST) ok = false;
  if (!ok) why = errnoText("cannot write the cache key file " + path);
  ::unlink(tmp.c_str());
  return ok;
}

} // namespace

std::string defaultKeyFile() {
  if (const char *f = std::getenv("RCJIT_CACHE_KEY_FILE"); f && *f) return f;
  if (const char *x = std::getenv("XDG_CONFIG_HOME"); x && *x) {
    return std::string(x) + "/rcjit/cache.key";
  }
  if (const char *h = std::getenv("HOME"); h && *h) {
    return std::string(h) + "/.config/rcjit/cache.key";
  }
  return "";
}

std::optional<Secret> loadOrCreateSecret(const std::string &path, std::string &why) {
  if (path.empty()) {
    why = "no cache key file (set RCJIT_CACHE_KEY_FILE or HOME)";
    return std::nullopt;
  }
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0 && errno == ENOENT) {
    if (!createKeyFile(path, why)) return std::nullopt;
    fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  }
  if (fd < 0) {
    why = errnoText("cannot open the cache key file " + path);
    return std::nullopt;
  }
  struct stat st {};
  Secret s{};
  bool ok = ::fstat(fd, &st) == 0 && ::read(fd, s.data(), s.size()) == ssize_t(s.size());
  ::close(fd);
  if (!ok || !S_ISREG(st.st_mode) || st.st_size != ssize_t(s.size())) {
    why = "the cache key file " + path + " is not a regular 32-byte file";
    return std::nullopt;
  }
  if (st.st_uid != ::geteuid() || (st.st_mode & 077) != 0) {
    why = "the cache key file " + path + " must be owned by this user with mode 0600";
    return std::nullopt;
  }
  return s;
}

} // namespace rcjit::cache
