// Cooperative cancellation of a background compile: the thread that runs one (jit/Tiered.h)
// opens a CancelScope on a flag; the compile path checks it between steps and kernels.
#pragma once
#include <atomic>

namespace rcjit {

/// While alive, compiles on this thread stop at their next check once `flag` is set.
class CancelScope {
public:
  explicit CancelScope(const std::atomic<bool> &flag);
  ~CancelScope();
  CancelScope(const CancelScope &) = delete;
  CancelScope &operator=(const CancelScope &) = delete;

private:
  const std::atomic<bool> *outer_;
};

/// Whether this thread runs a compile that can be cancelled (a CancelScope is open).
bool cancellableCompile();
/// Throws rcjit::Error("compile cancelled") when this thread's scope's flag is set.
void throwIfCompileCancelled();

} // namespace rcjit
