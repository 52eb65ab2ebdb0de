// The profiler's event buffer and its Chrome trace event output.
#include "support/Profiler.h"

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

#include <rcjit/Error.h>
#include <rcjit/Profile.h>

namespace rcjit::profiler {

namespace detail {
std::atomic<bool> recording{false};
} // namespace detail

namespace {

struct Event {
  const char *category;
  std::string name;
  double ts, dur; // microseconds since start()
  uint64_t tid;
};

struct State {
  std::mutex mu;
  std::string path;
  std::chrono::steady_clock::time_point origin;
  std::vector<Event> events;
  std::vector<std::thread::id> threads; // tid = index + 1
};

State &state() {
  static State *s = new State(); // never destroyed: scopes may end during static destruction
  return *s;
}

uint64_t tidOf(State &s, std::thread::id id) {
  for (size_t i = 0; i < s.threads.size(); ++i) {
    if (s.threads[i] == id) return i + 1;
  }
  s.threads.push_back(id);
  return s.threads.size();
}

void writeTrace(const std::string &path, const std::vector<Event> &events) {
  nlohmann::json list = nlohmann::json::array();
  const int pid = static_cast<int>(getpid());
  for (const Event &e : events) {
    list.push_back({{"name", e.name},
                    {"cat", e.category},
                    {"ph", "X"},
                    {"ts", e.ts},
                    {"dur", e.dur},
                    {"pid", pid},
                    {"tid", e.tid}});
  }
  std::ofstream out(path);
  if (!out) throw Error("profiler: cannot write " + path + " (" + std::strerror(errno) + ")");
  out << nlohmann::json{{"traceEvents", list}, {"displayTimeUnit", "ms"}}.dump() << "\n";
  int err = out ? 0 : errno; // a write that already failed left its reason
  if (out) {
    errno = 0;
    out.flush(); // what is still buffered must reach the file too (a full disk, /dev/full)
    err = errno;
  }
  out.close();
  if (!err) err = errno;
  if (!out) {
    throw Error("profiler: writing " + path + " failed (" +
                (err ? std::strerror(err) : "the write failed") + "): the profile is lost");
  }
}

// RCJIT_PROFILE=FILE: record from load, write at exit.
struct FromEnvironment {
  FromEnvironment() {
    const char *path = std::getenv("RCJIT_PROFILE");
    if (!path || !*path) return;
    start(path);
    std::atexit([] {
      try {
        stop();
      } catch (const std::exception &e) {
        std::fprintf(stderr, "[rcjit] %s\n", e.what());
      }
    });
  }
} fromEnvironment;

} // namespace

namespace detail {
void record(const char *category, std::string name, std::chrono::steady_clock::time_point begin,
            std::chrono::steady_clock::time_point end) {
  State &s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  if (!recording.load(std::memory_order_relaxed)) return;
  using us = std::chrono::duration<double, std::micro>;
  s.events.push_back({category, std::move(name), us(begin - s.origin).count(),
                      us(end - begin).count(), tidOf(s, std::this_thread::get_id())});
}
} // namespace detail

void start(const std::string &path) {
  if (path.empty()) throw Error("profiler: start needs a file path");
  State &s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  s.path = path;
  s.events.clear();
  s.threads.clear();
  s.origin = std::chrono::steady_clock::now();
  detail::recording.store(true);
}

void stop() {
  State &s = state();
  std::vector<Event> events;
  std::string path;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    if (!detail::recording.load()) return;
    detail::recording.store(false);
    events.swap(s.events);
    path = s.path;
  }
  writeTrace(path, events);
}

bool enabled() { return detail::recording.load(std::memory_order_relaxed); }

} // namespace rcjit::profiler
