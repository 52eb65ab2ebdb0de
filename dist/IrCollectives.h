// The collectives as ops of the IR (Ops.def's Collective category): how the eager target and
// the compiled CPU program run an all_reduce / all_gather / reduce_scatter / broadcast node
// through rcjit::dist. Internal; no mpi.h here (targets/ include it).
#pragma once
#include <rcjit/Dist.h>
#include <rcjit/Tensor.h>
#include <rcjit/ir/Graph.h>

#include "tracer/ShapeInference.h"

namespace rcjit::dist::detail {

/// Starts collective node `op` (attrs `a`) on `x`, non-blocking: the ranks' shape records
/// are swapped first (a mismatch is the same rcjit::Error on every rank), then the data
/// moves until Work::wait(), which returns the node's value (a new tensor: `x` is never
/// written, and is read until the wait). Throws rcjit::Error when `a.world` is not this job's
/// world size (the graph was made for another job), on a non-CPU tensor and on a bad dtype.
/// Runs untraced (a TracerPause), without autograd.
Work startCollectiveOp(OpKind op, const Tensor &x, const Attrs &a);

/// The same, waited for at once: the eager target's kernel of a Collective node; the result
/// must match `out` (the node's dtype and shape).
Tensor runCollectiveOp(OpKind op, const Tensor &x, const Attrs &a, const TensorMeta &out);

/// Attrs of a collective node for this job: `world` = world_size(), and the op's own field.
Attrs collectiveAttrs(int64_t dim, ReduceOp reduce, int root);

} // namespace rcjit::dist::detail
