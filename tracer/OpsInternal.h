// The one path every op takes: validate (inferMeta), run eagerly, record when tracing.
#pragma once
#include <vector>

#include <rcjit/Tensor.h>

#include "tracer/Graph.h"

namespace rcjit::detail {

/// Validates `op` on `in`, runs it on the eager target and, inside a trace, records it.
Tensor applyOp(OpKind op, const std::vector<Tensor> &in, const Attrs &a);
/// A source op (full, arange) of the given shape and dtype on `device`, recorded when tracing.
/// Errors (sizes, allocation) name `name`, or the op when null (e.g. "zeros" for a full).
Tensor applySource(OpKind op, const Shape &shape, DType dtype, const Attrs &a,
                   Device device = Device::cpu(), const char *name = nullptr);
/// log_softmax(linear(x, w))[target] per row, never holding the [R, N] logits (the
/// linear_ce_pick op; cross_entropy records it for a traced linear's logits).
Tensor linearCePick(const Tensor &x, const Tensor &w, const Tensor &target);
/// Whether a traced cross_entropy records linear_ce_pick (default: RCJIT_FUSED_LINEAR_CE=1);
/// returns the previous setting. Defined in autograd/Losses.cpp.
bool setFusedLinearCe(bool on);
/// Its gradient: dw [N*K], dx [R*K] and the per-row values [R] in one f32 tensor, for the
/// per-row gradient g.
Tensor linearCePickBackward(const Tensor &x, const Tensor &w, const Tensor &target,
                            const Tensor &g);
/// x converted to dtype (x itself when it already has it); recorded as `cast`.
Tensor castTo(const Tensor &x, DType dtype);
/// U(lo, hi) values from a counter-based generator (deterministic across threads).
Tensor randUniform(const Shape &shape, uint64_t seed, double lo, double hi, DType dtype);

} // namespace rcjit::detail
