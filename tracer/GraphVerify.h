// The IR verifier: checks a Graph's invariants, run between the compile path's steps.
//
// Why: a pass that breaks an invariant (an operand after its user, a wrong arity, a shape
// that shape inference would not give) otherwise surfaces far away, in lowering or in
// generated code. The compile path runs the verifier after every graph step in debug builds
// and whenever RCJIT_VERIFY_IR=1 (the test suite sets it).
#pragma once
#include <string>

#include "tracer/Graph.h"

namespace rcjit {

/// Throws rcjit::Error "IR verifier (after <after>): %<id> <op>: <what is wrong>" at the
/// first broken invariant: operands before users, op arity, output and region ranges,
/// dense input indices, symbol ids, and each node's dtype and shape equal to what shape
/// inference gives for its operands.
void verifyGraph(const Graph &g, const std::string &after);

/// Whether the compile path verifies: debug builds, or RCJIT_VERIFY_IR=1. Read once.
bool verifyIrEnabled();

} // namespace rcjit
