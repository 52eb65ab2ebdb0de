// The registry of cache::clear() callbacks.
#include "cache/ClearHooks.h"

#include <mutex>
#include <vector>

namespace rcjit::cache::detail {

namespace {
std::mutex &hooksMutex() {
  static std::mutex *mu = new std::mutex();
  return *mu;
}
std::vector<std::function<void()>> &hooks() {
  static auto *h = new std::vector<std::function<void()>>();
  return *h;
}
} // namespace

void onClear(std::function<void()> fn) {
  std::lock_guard<std::mutex> lock(hooksMutex());
  hooks().push_back(std::move(fn));
}

void runClearHooks() {
  std::vector<std::function<void()>> copy;
  {
    std::lock_guard<std::mutex> lock(hooksMutex());
    copy = hooks();
  }
  for (auto &fn : copy) fn();
}

} // namespace rcjit::cache::detail
