// embedding_grad_sum: a tied embedding's two gradients summed in one scatter pass.
//
// Why: a weight used as an embedding and elsewhere (gpt2's tied token embedding and LM
// head) gets two gradients that autograd adds: add(other, embedding_backward(g, ids)).
// Traced inside a whole training step, that is a [vocab, hidden] zero table scattered into
// and then a third [vocab, hidden] block for the sum. embedding_backward with a base does
// both in one pass over the base's rows, and a compiled CPU call whose base dies there
// scatters into the base itself (targets/cpu/CpuCall.cpp), so the sum costs no block of
// its own: the peak of gpt2's whole step falls by one weight gradient (147 MiB).
#pragma once
#include "tracer/Graph.h"

namespace rcjit {

/// Rewrites add(a, embedding_backward(g, ids)) (either operand order) into
/// embedding_backward(g, ids, base = a) where the embedding gradient has no base, no other
/// reader and is not a graph output, and a, the gradient and the sum share dtype and
/// shape. The embedding gradient is left for DCE. Returns its input unchanged when
/// nothing matches. Pure; thread-safe.
Graph foldEmbeddingGradSums(const Graph &g);

} // namespace rcjit
