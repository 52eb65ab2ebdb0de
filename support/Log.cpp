// Log settings (RCJIT_LOGS / set_logs), stderr output and the JSON-lines trace file.
#include "support/Log.h"

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <unistd.h>

#include <rcjit/Error.h>
#include <rcjit/Logs.h>

#include "support/Events.h"

namespace rcjit {

namespace logging {
namespace {

constexpr const char *kNames[] = {
    "recompiles", "recompiles_verbose", "guards", "graph_breaks", "perf_hints", "dynamic",
    "graph",      "output_code",        "cache",  "passes",     "compile"};
constexpr unsigned kStderrKinds = 10; // all but `compile`

unsigned parseKinds(std::string_view list) {
  unsigned mask = 0;
  std::string s(list);
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    size_t a = item.find_first_not_of(" \t"), b = item.find_last_not_of(" \t");
    if (a == std::string::npos) continue;
    item = item.substr(a, b - a + 1);
    if (item == "all") {
      mask |= (1u << kStderrKinds) - 1;
      continue;
    }
    bool found = false;
    for (unsigned k = 0; k < kStderrKinds; ++k) {
      if (item == kNames[k]) {
        mask |= 1u << k;
        found = true;
      }
    }
    if (!found) {
      std::string known;
      for (unsigned k = 0; k < kStderrKinds; ++k) known += (k ? ", " : "") + std::string(kNames[k]);
      throw Error("set_logs: unknown log kind '" + item + "' (known: " + known + ", all)");
    }
  }
  return mask;
}

struct State {
  std::atomic<unsigned> mask{0};
  std::mutex mu;
  std::ofstream trace;
  std::string tracePath;
  std::atomic<bool> traceOn{false}; // written under mu
  State() {
    if (const char *env = std::getenv("RCJIT_LOGS")) {
      try {
        mask = parseKinds(env);
      } catch (const Error &e) {
        std::cerr << "[rcjit] ignoring RCJIT_LOGS: " << e.what() << "\n";
      }
    }
    if (const char *file = std::getenv("RCJIT_TRACE_FILE"); file && *file) {
      trace.open(file, std::ios::app);
      traceOn = trace.is_open();
      tracePath = file;
      if (!traceOn) {
        std::cerr << "[rcjit] error: cannot open RCJIT_TRACE_FILE " << file << " ("
                  << std::strerror(errno) << "): no trace is written\n";
      }
    }
  }
};

State &state() {
  static State *s = new State(); // never destroyed: logs may come from static destructors
  return *s;
}

} // namespace

const char *kindName(Kind k) { return kNames[static_cast<unsigned>(k)]; }

bool enabled(Kind k) {
  return (state().mask.load(std::memory_order_relaxed) >> static_cast<unsigned>(k)) & 1u;
}

// The trace file records every kind, the bulky ones (whole graphs, LLVM IR) included: the
// report (`rcjit logs --html`) shows them.
bool wanted(Kind k) { return enabled(k) || state().traceOn; }

namespace {

// Every line of `text` with the prefix (a trailing newline adds no empty line).
void printPrefixed(std::ostream &out, Kind k, const std::string &text) {
  const std::string prefix = std::string("[rcjit:") + kindName(k) + "]";
  size_t start = 0;
  do {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    out << prefix << (end > start ? " " : "") << std::string_view(text).substr(start, end - start)
        << "\n";
    start = end + 1;
  } while (start < text.size());
}

// A trace line did not reach the file (a full disk, /dev/full): said once on stderr, and the
// trace stops there, so that it is never silently missing lines in its middle. Under s.mu.
void traceWriteFailed(State &s, int err) {
  std::cerr << "[rcjit] error: cannot write the trace file " << s.tracePath << " ("
            << (err ? std::strerror(err) : "the write failed")
            << "): the trace stops here, later events are not recorded\n";
  s.trace.close();
  s.traceOn = false;
}

} // namespace

void write(Kind k, const std::string &message, const nlohmann::json &fields) {
  State &s = state();
  bool toStderr = enabled(k);
  if (!toStderr && !s.traceOn) return;
  std::lock_guard<std::mutex> lock(s.mu);
  bool toTrace = s.traceOn; // it may have changed: re-read under the lock
  if (toStderr) printPrefixed(std::cerr, k, message);
  if (toTrace) {
    nlohmann::json j = fields.is_object() ? fields : nlohmann::json::object();
    j["v"] = kTraceSchema;
    j["kind"] = kindName(k);
    j["pid"] = static_cast<int64_t>(getpid());
    j["message"] = message;
    j["time"] =
        std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    errno = 0;
    s.trace << j.dump() << "\n";
    s.trace.flush();
    if (!s.trace) traceWriteFailed(s, errno);
  }
}

void setTraceFile(const std::string &path) {
  State &s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.trace.is_open()) s.trace.close();
  s.trace.clear();
  s.traceOn = false;
  if (path.empty()) return;
  s.trace.open(path, std::ios::app);
  if (!s.trace.is_open()) {
    throw Error("cannot open the trace file '" + path + "' for appending: " + std::strerror(errno));
  }
  s.tracePath = path;
  s.traceOn = true;
}

} // namespace logging

void set_logs(std::string_view kinds) { logging::state().mask = logging::parseKinds(kinds); }

} // namespace rcjit
