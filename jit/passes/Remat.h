// remat: recompute cheap values next to their late uses instead of keeping them alive.
//
// Why: a whole training step (forward, backward and update in one graph) reads many
// forward values again in the backward, long after they were made, and the buffer planner
// must keep each alive across the gap. A value made by an elementwise op (or a view chain
// over one) from operands that stay alive across that gap anyway costs no memory to make
// again where it is needed: this pass clones it just before its first late use and lets
// the original die after its early uses. PyTorch's min-cut partitioner makes the same
// choice between a forward and a backward graph; here it runs inside one graph.
#pragma once
#include <cstdint>

#include "tracer/Graph.h"

namespace rcjit {

struct RematOptions {
  int64_t minBytes = 256 << 10; // only values at least this large are worth moving
  int minGap = 64;              // nodes between the early and the late uses, at least
  int rounds = 3;               // repeats: a moved value can free its own operands next
};

/// The graph with cheap values recomputed next to their late uses (see above); `g`
/// unchanged when nothing qualifies. Computes the same outputs.
Graph remat(const Graph &g, const RematOptions &o = {});

} // namespace rcjit
