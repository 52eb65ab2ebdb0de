// CancelScope: a thread-local flag the compile path polls.
#include "support/CompileCancel.h"

#include <rcjit/Error.h>

namespace rcjit {

namespace {
thread_local const std::atomic<bool> *cancelFlag = nullptr;
} // namespace

CancelScope::CancelScope(const std::atomic<bool> &flag) : outer_(cancelFlag) { cancelFlag = &flag; }

CancelScope::~CancelScope() { cancelFlag = outer_; }

bool cancellableCompile() { return cancelFlag != nullptr; }

void throwIfCompileCancelled() {
  if (cancelFlag && cancelFlag->load(std::memory_order_acquire)) throw Error("compile cancelled");
}

} // namespace rcjit
