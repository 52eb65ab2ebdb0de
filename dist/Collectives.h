// The collectives' start steps without the shape check, for callers that checked a whole
// list of tensors with one record (all_reduce_gradients). Internal to dist/.
#pragma once
#include <chrono>
#include <functional>
#include <string>

#include <rcjit/Dist.h>

#include "dist/Comm.h"

namespace rcjit::dist::detail {

/// Seconds since `t0` (the communication-wait counters).
inline double secondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

/// Starts a non-blocking all_reduce of `buffer` (contiguous, CPU, a reducible dtype) in
/// place; after the transfer (and the division of `mean`) wait() runs `then` and returns
/// its result, or returns `buffer` without one. `context` starts its error messages. The
/// caller holds lockMpi().
Work startAllReduce(const Tensor &buffer, ReduceOp op, const std::string &context, const Comm &c,
                    std::function<Tensor()> then = nullptr);

} // namespace rcjit::dist::detail
