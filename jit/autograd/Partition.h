// Partition: a joint forward+backward graph split into a forward graph that also returns
// what the backward needs, and a backward graph that takes those plus the output gradients.
//
// Why: compiled training runs the forward when the function is called and the backward
// later (at backward()), so the two are compiled apart; what crosses between them is
// memory held from one to the other. Like PyTorch's min-cut partitioner, cheap values are
// recomputed in the backward instead of saved: an elementwise or view node is recomputed
// when the values it would then need saved take no more bytes than it does (gelu(x @ w)
// saves x @ w once, not also the gelu), so a fused backward kernel recomputes it for free.
#pragma once
#include <cstdint>
#include <vector>

#include "tracer/Graph.h"

namespace rcjit {

/// A traced function followed by its backward: nodes [0, numForwardNodes) are the forward
/// pass (with every input node of the function); later nodes are the backward, whose input
/// nodes are the tangents (the gradients of the forward outputs). graph.outputs lists the
/// forward outputs first (numForwardOutputs of them), then the gradients.
struct JointGraph {
  Graph graph;
  int numForwardNodes = 0;
  int numForwardOutputs = 0;
};

struct Partition {
  /// The forward nodes unchanged (same ids, inputs and regions); outputs: the function's
  /// outputs, then the saved values that are not already among them.
  Graph forward;
  /// Inputs (all args): saved value i is arg i, then tangent t is arg saved.size() + t (in
  /// the tangents' node order). Outputs: the gradients, in the joint graph's order.
  Graph backward;
  std::vector<int> saved;        // joint node ids the backward reads, in arg order
  std::vector<int> savedOutput;  // per saved value: its index among forward.outputs
  std::vector<int> recomputed;   // forward nodes the backward computes again
  int64_t savedBytes = 0;        // saved values that are not inputs of the function
};

/// Splits `j`. Throws rcjit::Error when the joint graph is malformed (a forward node that
/// reads a backward one, a tangent among the forward nodes).
Partition partitionJoint(const JointGraph &j);

} // namespace rcjit
