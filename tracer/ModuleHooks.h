// Hooks that run when a particular module is called (before its forward), for library code
// that must act as a model runs: ZeRO-3 gathers a module's sharded parameters just before
// the module uses them (dist/ZeroOptimizer). Internal; not part of the public API.
#pragma once
#include <functional>

namespace rcjit::nn {
class ModuleBase;
}

namespace rcjit::nn::detail {

/// Runs at the start of every call of its module (inside ModuleCallScope, before the trace
/// region opens); it may throw rcjit::Error, which the call then throws.
using ModuleCallHook = std::function<void(ModuleBase &)>;

/// Sets `m`'s hook (replacing any), or removes it when `hook` is empty. Thread-safe; a hook
/// runs on the thread that calls the module. The caller removes the hook before `m` dies.
void setModuleCallHook(const ModuleBase &m, ModuleCallHook hook);

/// Runs `m`'s hook if it has one (a relaxed atomic load when no module has a hook).
void runModuleCallHook(ModuleBase &m);

} // namespace rcjit::nn::detail
