// Internal side of the profiler (include/rcjit/Profile.h): scopes that record one complete
// event each while the profiler records, and cost one relaxed load when it does not.
#pragma once
#include <atomic>
#include <chrono>
#include <string>

namespace rcjit::profiler {

namespace detail {
extern std::atomic<bool> recording;
void record(const char *category, std::string name, std::chrono::steady_clock::time_point begin,
            std::chrono::steady_clock::time_point end);
} // namespace detail

/// Records [construction, destruction) as one event named by `name()` (called only when
/// recording, so building the name costs nothing otherwise).
template <class NameFn> class Scope {
public:
  Scope(const char *category, NameFn name)
      : on_(detail::recording.load(std::memory_order_relaxed)), category_(category),
        name_(std::move(name)) {
    if (on_) begin_ = std::chrono::steady_clock::now();
  }
  ~Scope() {
    if (on_) detail::record(category_, name_(), begin_, std::chrono::steady_clock::now());
  }
  Scope(const Scope &) = delete;
  Scope &operator=(const Scope &) = delete;

private:
  bool on_;
  const char *category_;
  NameFn name_;
  std::chrono::steady_clock::time_point begin_;
};

} // namespace rcjit::profiler
