// Callbacks run by cache::clear(): in-process tables above the byte cache (compiled
// kernels, regional stage programs) register here so a clear makes the next compile cold.
#pragma once
#include <functional>

namespace rcjit::cache::detail {

/// Registers `fn`, called (in registration order) by every cache::clear(). Thread-safe.
void onClear(std::function<void()> fn);
/// Runs every registered callback.
void runClearHooks();

} // namespace rcjit::cache::detail
