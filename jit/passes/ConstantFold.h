// ConstantFold: elementwise ops on scalar constants become one constant.
//
// Why: the tracer records every Scalar operand as a `full` node and decompose adds more
// (1/sqrt(D), eps), so expressions like `1.0 / 8.0` or a cast of a constant would
// otherwise be computed by every kernel iteration. Folding them lets CSE merge the
// resulting equal constants and leaves kernels with one immediate each.
#pragma once
#include "tracer/Graph.h"

namespace rcjit {

/// Whether `n` is a one-element constant: a `full` node of shape [] or of dims all 1.
bool isScalarConstant(const Node &n);

/// Replaces each elementwise node (unary, binary, compare, where) whose operands are all
/// one-element `full` constants by a `full` node of its value, dtype and shape, computed
/// with the eager target (so the value is rounded exactly as at run time). The folded
/// node's operands stay (DCE removes them when unused). Returns its input unchanged when
/// nothing folds. Pure; thread-safe.
Graph constantFold(const Graph &g);

} // namespace rcjit
