// Cse: common subexpression elimination over the graph's nodes.
//
// Why: tracing records every use of `x * 2` anew, decompose emits the same casts and
// constants for each composite, and constant folding produces equal constants; one node
// per distinct value means one load and one computation per kernel.
#pragma once
#include "tracer/Graph.h"

namespace rcjit {

/// Merges nodes with equal op, operands (after merging), used attrs, dtype and shape into
/// the first of them; later uses (and outputs) refer to it. Input nodes are never merged:
/// they are the calling convention. Every op is pure, so sources (full, arange) merge too.
/// Returns its input unchanged when nothing merges. Pure; thread-safe.
Graph cse(const Graph &g);

} // namespace rcjit
