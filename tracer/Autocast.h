// Autocast's op policy (which ops run in the reduced dtype, which in f32) and its
// per-thread state, read by applyOp, the losses, the gradient rules and the guards.
#pragma once
#include <cstdint>
#include <vector>

#include <rcjit/Autocast.h>
#include <rcjit/Tensor.h>

#include "tracer/Graph.h"

namespace rcjit::detail {

/// The active scope's dtype as a small integer for guards: -1 outside autocast.
int autocastCode();

/// Casts `in` as the active scope wants for `op`: floating inputs of matmul, linear,
/// conv2d and sdpa to the reduced dtype; reduced-precision inputs of softmax, log_softmax,
/// layer_norm, rms_norm, sum and mean to f32. False (in untouched) when nothing changes.
bool autocastInputs(OpKind op, std::vector<Tensor> &in);

/// x in f32 when autocast is active and x is a reduced-precision float (losses); else x.
Tensor autocastToF32(const Tensor &x);

/// RAII: autocast off on this thread (the gradient rules run in the forward's dtypes).
struct NoAutocast {
  NoAutocast();
  ~NoAutocast();
  NoAutocast(const NoAutocast &) = delete;
  NoAutocast &operator=(const NoAutocast &) = delete;

private:
  int prev_;
};

} // namespace rcjit::detail
