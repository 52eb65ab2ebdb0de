// Fusion: which graph nodes run together in one loop kernel, and why each group starts.
//
// The fuse step of lowering (targets/lower/Fuse.cpp) walks the optimized graph once, in
// node order: elementwise, broadcast and reduction nodes join an open group whose
// iteration domain fits them; matmul, linear and conv2d become library calls (oneDNN or
// cuBLAS), absorbing a following eltwise op as a post-op where the target has them; views
// become strided views of a buffer; the few ops no kernel covers run as eager steps. The
// result is a FusionPlan: printable (`rcjit trace --dump fusion`, the `graph` log), so a
// reader sees each group's members and the reason a boundary was cut.
#pragma once
#include <string>
#include <vector>

#include <rcjit/Types.h>

#include "tracer/Graph.h"

namespace rcjit {

/// One fusion group: a loop kernel over `domain` (reducing `reduced`, if any).
struct FusionGroup {
  bool reduce = false;
  Shape domain;             // the full iteration shape
  Dims reduced;             // reduced dims of domain (sorted); empty for elementwise groups
  std::vector<int> members; // graph nodes computed in the group, in order
  std::string opened;       // why this node started a new group instead of joining one
  int order = 0;            // position among the program's steps
  int mergedInto = -1;      // >= 0: its members moved to that group (no kernel of its own)
  /// Nodes of other groups this kernel computes again from what it reads instead of
  /// loading them (their groups do not store them), in node order: a large value that is
  /// cheap to make from operands in memory anyway (the log-probabilities of a softmax
  /// from the logits and two row statistics) costs less memory made twice than stored.
  std::vector<int> recomputed;
};

/// A step that is not a fused group: a library call, an eager op, a collective, or an
/// embedding's gather/scatter kernel.
struct FusionCall {
  int node = -1;
  bool library = true;      // false: an eager step (or a collective)
  bool collective = false;  // a collective: started here, waited for before its first use
  std::vector<int> postOps; // unary nodes folded into the library call's epilogue
  int order = 0;
  bool kernel = false; // a gather or scatter kernel of its own (embedding on cuda)
};

/// The fuse step's decisions for one graph.
struct FusionPlan {
  std::vector<FusionGroup> groups; // index = group id (kernel "k<id>")
  std::vector<FusionCall> calls;
  std::vector<int> views; // nodes that became strided views (no step)
};

/// Readable listing: each group with its domain, members and why it was opened, then the
/// library and eager calls in step order.
std::string printFusionPlan(const FusionPlan &plan, const Graph &g);

} // namespace rcjit
