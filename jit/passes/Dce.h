// Dce: dead code elimination.
//
// Why: decompose, constant folding and CSE leave nodes behind that no output reads (the
// operands of a folded constant, a traced value the function dropped); lowering would
// still compute and store them.
#pragma once
#include "tracer/Graph.h"

namespace rcjit {

/// Drops every node no output depends on, except input nodes (the calling convention:
/// an unused argument is still an argument). Returns its input unchanged when every node
/// is live. Pure; thread-safe.
Graph dce(const Graph &g);

} // namespace rcjit
