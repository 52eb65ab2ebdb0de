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
using Hooks = std::vector<std::function<void()>>;
Hooks &clearHooks() {
  static auto *h = new Hooks();
  return *h;
}
Hooks &saveHooks() {
  static auto *h = new Hooks();
  return *h;
}
void add(Hooks &to, std::function<void()> fn) {
  std::lock_guard<std::mutex> lock(hooksMutex());
  to.push_back(std::move(fn));
}
void runAll(const Hooks &hooks) {
  Hooks copy;
  {
    std::lock_guard<std::mutex> lock(hooksMutex());
    copy = hooks;
  }
  for (auto &fn : copy) fn();
}
} // namespace

void onClear(std::function<void()> fn) { add(clearHooks(), std::move(fn)); }
void runClearHooks() { runAll(clearHooks()); }
void onSaveArtifacts(std::function<void()> fn) { add(saveHooks(), std::move(fn)); }
void runSaveHooks() { runAll(saveHooks()); }

} // namespace rcjit::cache::detail
