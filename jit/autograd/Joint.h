// The joint forward+backward graph of a traced function, built with the one table of
// gradient rules (autograd/GradRules.h) — the AOTAutograd role.
//
// How: the forward graph is replayed op by op inside a new shape-only trace, then the rules
// run over it in reverse order on the traced values, so the backward is recorded by the same
// tracer into the same graph. Broadcasting, casts and composite ops need nothing special:
// each rule is written with the public ops, which trace like any user code.
#pragma once
#include <vector>

#include <rcjit/Tensor.h>

#include "jit/autograd/Partition.h"
#include "tracer/Graph.h"

namespace rcjit {

/// The joint graph of `forward` (a traced, static graph) whose program inputs are bound to
/// `inputs` (args then captured tensors: their shapes, dtypes and devices; values unused).
/// `wantGrad[i]` says whether program input i gets a gradient output. The joint graph's
/// program inputs are `inputs` (all as args, in that order) then one tangent per forward
/// output; its outputs are the forward outputs, then one gradient per wanted input (zeros
/// when no output depends on it). Throws rcjit::Error for an op whose gradient rule is not
/// implemented, naming it.
JointGraph buildJointGraph(const Graph &forward, const std::vector<Tensor> &inputs,
                           const std::vector<bool> &wantGrad);

/// The value of node `n` of a static graph given its operands' values, computed by the
/// public op path: traced by the active tracer, or eager with autograd outside one.
Tensor replayNode(const Node &n, const std::vector<Tensor> &in, Device device);

} // namespace rcjit
