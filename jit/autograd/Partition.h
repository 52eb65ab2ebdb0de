// Partition: a joint forward+backward graph split into a forward graph that also returns
// what the backward needs, and a backward graph that takes those plus the output gradients.
//
// Why: compiled training runs the forward when the function is called and the backward
// later (at backward()), so the two are compiled apart; what crosses between them is
// memory held from one to the other. Like PyTorch's min-cut partitioner, cheap values are
// recomputed in the backward instead of saved: an elementwise or view node is recomputed
// when the distinct values its cheap chain starts from (at most 8) take no more bytes than
// it does (gelu(x @ w), however many elementwise ops its formula has, saves x @ w once), so
// a fused backward kernel recomputes it for free. A recomputed value is computed just
// before its first use in the backward, not held from its start.
#pragma once
#include <cstdint>
#include <vector>

#include "tracer/Graph.h"

namespace rcjit {

/// A traced function followed by its backward. Program inputs [0, numPrimalInputs) are the
/// function's (args then captured tensors, as compiled code takes them); the program
/// inputs after them are the tangents (the gradients of the forward outputs). A node is
/// part of the backward when it depends on a tangent; every other node is forward (values
/// a rule computes from forward values alone are forward values the backward reads).
/// graph.outputs lists the forward outputs first (numForwardOutputs), then the gradients.
struct JointGraph {
  Graph graph;
  int numPrimalInputs = 0;
  int numForwardOutputs = 0;
};

struct Partition {
  /// The forward nodes in their order (the function's inputs keep their kinds and
  /// indices); outputs: the function's outputs, then the saved values not among them.
  Graph forward;
  /// Inputs (all args): saved value i is arg i, then tangent t is arg saved.size() + t (in
  /// the tangents' node order). Outputs: the gradients, in the joint graph's order.
  Graph backward;
  std::vector<int> saved;       // joint node ids the backward reads, in arg order
  std::vector<int> savedOutput; // per saved value: its index among forward.outputs
  std::vector<int> recomputed;  // forward nodes the backward computes again
  int64_t savedBytes = 0;       // saved values that are not inputs of the function
  size_t jointNodes = 0;        // nodes of the joint graph it was split from
};

/// Splits `j`. With `like` (the partition of the same function traced at other sizes), `j`
/// saves and recomputes exactly what `like` does, so that the samples of a symbolic program
/// have one structure. Throws rcjit::Error when the joint graph is malformed (a forward
/// output that depends on a tangent, input indices out of range) or has other nodes than
/// `like`'s.
Partition partitionJoint(const JointGraph &j, const Partition *like = nullptr);

} // namespace rcjit
