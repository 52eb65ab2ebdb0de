// linear_ce_fold: the fused LM head's loss taken from its gradient op when both are traced.
//
// Why: linear_ce_pick (the loss's log_softmax(x @ w^T)[target] in row chunks) and its
// gradient op linear_ce_pick_backward each compute the logits chunk by chunk: four GEMMs of
// [rows, K] x [K, classes] size where the unfused head has three. Inside a whole training
// step both ops are in one graph, and the gradient op's row gradients come from the targets
// and the loss's scale, not from the loss's value; the gradient op also writes the per-row
// values, so the forward op is not needed: one pass over the logits yields loss and
// gradients (what Liger kernel's FusedLinearCrossEntropy does in its forward).
#pragma once
#include "tracer/Graph.h"

namespace rcjit {

/// Rewrites linear_ce_pick(x, w, t) into a slice of linear_ce_pick_backward(x, w, t, g)'s
/// packed output (its last rows values) where such a gradient op exists over the same three
/// nodes, g does not depend on the pick, and every shape involved is static. The gradient
/// op (and what only it needs) moves up to the pick's place; the graph is left unchanged
/// when that would split a region or nothing matches. The pick is left for DCE.
/// Pure; thread-safe.
Graph foldLinearCePicks(const Graph &g);

} // namespace rcjit
