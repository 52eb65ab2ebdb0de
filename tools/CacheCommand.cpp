// The cache command: option parsing, then one call into rcjit::cache per action.
#include "tools/CacheCommand.h"

#include <unistd.h>

#include <boost/program_options.hpp>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include <rcjit/Cache.h>

#include "cache/Artifacts.h"
#include "cache/ObjectStore.h"

#include "support/Env.h"
#include "tools/Cli.h"

namespace po = boost::program_options;

namespace rcjit::tools {

namespace {

struct CacheUsage : std::runtime_error {
  using std::runtime_error::runtime_error;
};

std::vector<uint8_t> readFile(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read '" + path + "'");
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

void writeFile(const std::string &path, const std::vector<uint8_t> &bytes) {
  std::ofstream o(path, std::ios::binary | std::ios::trunc);
  if (!o) throw std::runtime_error("cannot write '" + path + "': " + std::strerror(errno));
  o.write(reinterpret_cast<const char *>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  closeOutput(o, "export", path);
}

void printStats(std::ostream &out) {
  cache::DiskUsage u = cache::disk_usage(true);
  if (u.dir.empty()) {
    out << "disk cache: off (RCJIT_CACHE_DIR=off, or no usable key file)\n";
    return;
  }
  out << "directory:  " << u.dir << "\n"
      << "entries:    " << u.entries << " (" << u.valid << " valid, " << u.invalid << " invalid)\n"
      << "size:       " << u.bytes << " bytes of at most " << u.max_bytes << "\n";
}

// `stats --remote`: the server, what it holds under rcjit's prefix, and this process's counters.
// An unreachable server is an error (exit 1): the user asked about it.
void printRemote(std::ostream &out) {
  cache::ObjectStore &store = cache::ObjectStore::instance();
  std::shared_ptr<cache::RemoteStore> r = store.remote();
  if (!r) {
    out << "remote cache: off (set RCJIT_REMOTE_CACHE=redis://host:port[/db])\n";
    return;
  }
  cache::RemoteStore::Report rep = r->inspect();
  if (!rep.error.empty()) {
    throw std::runtime_error("remote cache " + r->url().text() + ": " + rep.error);
  }
  const cache::Stats s = cache::stats();
  out << "remote:     " << r->url().text() << " (redis " << rep.version << ", timeout "
      << r->limits().timeoutMs << " ms, retry after " << r->limits().retrySeconds << " s)\n"
      << "  entries:  " << rep.entries << " under " << cache::RemoteStore::prefix() << "*, "
      << rep.bytes << " bytes\n"
      << "  server:   used_memory " << rep.usedMemory << " bytes, maxmemory " << rep.maxMemory
      << " (" << rep.policy << ")\n"
      << "  this process: " << s.remote_hits << " hits, " << s.remote_misses << " misses, "
      << s.remote_writes << " writes, " << s.remote_errors << " errors\n";
}

// The disk cache directory, which must exist (export) or be creatable and writable (import).
std::string usableDir(bool forWriting) {
  namespace fs = std::filesystem;
  std::string d = cache::dir();
  if (d.empty()) {
    throw std::runtime_error("the disk cache is off (RCJIT_CACHE_DIR=off): no directory to " +
                             std::string(forWriting ? "import into" : "export from"));
  }
  std::error_code ec;
  if (forWriting && !fs::exists(d, ec) && !fs::create_directories(d, ec)) {
    throw std::runtime_error("cannot create the cache directory '" + d + "': " + ec.message());
  }
  if (!fs::exists(d, ec)) {
    throw std::runtime_error("the cache directory '" + d + "' does not exist");
  }
  if (!fs::is_directory(d, ec)) {
    throw std::runtime_error("the cache directory '" + d + "' is not a directory");
  }
  if (forWriting && ::access(d.c_str(), W_OK | X_OK) != 0) {
    throw std::runtime_error("the cache directory '" + d + "' is not writable");
  }
  return d;
}

int run(const std::string &action, const std::string &file, bool remote, std::ostream &out) {
  if (remote && action != "stats") throw CacheUsage("--remote goes with stats only");
  if (action == "stats") {
    printStats(out);
    if (remote) printRemote(out);
  } else if (action == "clear") {
    cache::clear();
    out << "cleared " << (cache::dir().empty() ? "the memory cache" : cache::dir()) << "\n";
  } else if (action == "export" || action == "import") {
    if (file.empty()) throw CacheUsage(action + " needs a FILE");
    if (action == "export") {
      usableDir(false);
      std::vector<uint8_t> blob = cache::save_disk_artifacts();
      writeFile(file, blob);
      // what the file holds, counted as `import` will read it
      const size_t n = cache::unpackArtifacts(blob).size();
      out << "exported " << plural(static_cast<int64_t>(n), "entry", "entries") << " to " << file
          << " (" << plural(static_cast<int64_t>(blob.size()), "byte") << ")\n";
    } else {
      std::string d = usableDir(true);
      std::vector<uint8_t> blob = readFile(file);
      const uint64_t failuresBefore = cache::stats().write_failures;
      size_t n = cache::load_artifacts(blob);
      if (uint64_t failed = cache::stats().write_failures - failuresBefore) {
        throw std::runtime_error("could not write " + std::to_string(failed) + " of " +
                                 std::to_string(n) + " entries into '" + d +
                                 "' (RCJIT_LOGS=cache says why)");
      }
      out << "imported " << plural(static_cast<int64_t>(n), "entry", "entries") << " into " << d
          << "\n";
    }
  } else {
    throw CacheUsage("unknown action '" + action + "' (expected stats, clear, export, import)");
  }
  return kOk;
}

} // namespace

int cacheCommand(const std::vector<std::string> &args, std::ostream &out, std::ostream &err) {
  po::options_description desc("rcjit cache stats|clear|export FILE|import FILE [--remote]");
  std::string action, file, dir;
  bool remote = false;
  desc.add_options()("help,h", "show this help")(
      "dir", po::value(&dir), "cache directory (default: $RCJIT_CACHE_DIR or ~/.cache/rcjit)")(
      "action", po::value(&action), "stats, clear, export or import")(
      "file", po::value(&file), "the artifact file of export and import")(
      "remote", po::bool_switch(&remote),
      "stats: also the remote cache ($RCJIT_REMOTE_CACHE): server, entries, this process's "
      "hits");
  po::positional_options_description pos;
  pos.add("action", 1).add("file", 1);
  try {
    po::variables_map vm;
    po::store(po::command_line_parser(args).options(desc).positional(pos).run(), vm);
    po::notify(vm);
    if (vm.count("help") || action.empty()) {
      (action.empty() && !vm.count("help") ? err : out) << desc;
      return vm.count("help") ? kOk : kUsage;
    }
    if (vm.count("dir")) cache::set_dir(dir);
    if (remote) { // a malformed RCJIT_REMOTE_CACHE is an error here, not a warning
      if (std::optional<std::string> url = envValue("RCJIT_REMOTE_CACHE")) cache::set_remote(*url);
    }
    return run(action, file, remote, out);
  } catch (const CacheUsage &e) {
    err << "rcjit cache: " << e.what() << "\n";
    return kUsage;
  } catch (const po::error &e) {
    err << "rcjit cache: " << e.what() << " (see 'rcjit cache --help')\n";
    return kUsage;
  } catch (const std::exception &e) {
    err << "rcjit cache: error: " << e.what() << "\n";
    return kFailure;
  }
}

} // namespace rcjit::tools
