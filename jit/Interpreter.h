// The graph interpreter: runs a Graph node by node on the eager target.
//
// Why: it is the reference every graph pass is tested against (a pass must not change
// what interpretGraph computes), the executor of last resort for a graph no compiled
// target takes, and the interpreted first tier of a tiered compile (jit/Tiered.h).
#pragma once
#include <vector>

#include <rcjit/Passes.h>
#include <rcjit/Tensor.h>

#include "tracer/Graph.h"

namespace rcjit {

/// Runs `g` on `inputs` (the function's args, then its captured tensors: an input node
/// with InputKind::arg and inputIndex i takes inputs[i], a captured one with index j takes
/// inputs[numArgs + j]) and returns the values of g.outputs. Symbolic dims take their
/// sizes from the inputs. Throws rcjit::Error when the inputs do not match the graph
/// (count, dtype, rank, static sizes) or an op rejects its operands. Thread-safe; the
/// results may share storage with the inputs (views) and with each other.
std::vector<Tensor> interpretGraph(const Graph &g, const std::vector<Tensor> &inputs);
/// The same for a caller that hands its inputs over: each is released after its last use
/// in the graph (held nowhere else, it is freed during the run).
std::vector<Tensor> interpretGraph(const Graph &g, std::vector<Tensor> &&inputs);

/// Runs `g` like interpretGraph and returns, per node, its time, the bytes of its value
/// (0 for inputs and views) and the bytes of the values held after it ran.
std::vector<NodeProfile> profileGraph(const Graph &g, const std::vector<Tensor> &inputs);

} // namespace rcjit
