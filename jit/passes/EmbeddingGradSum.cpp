// embedding_grad_sum: see EmbeddingGradSum.h.
#include "jit/passes/EmbeddingGradSum.h"

#include <algorithm>

#include "jit/passes/GraphBuilder.h"

namespace rcjit {

Graph foldEmbeddingGradSums(const Graph &g) {
  const std::vector<int> uses = useCounts(g);
  auto foldable = [&](const Node &sum, int e, int a) {
    const Node &eb = g.nodes[static_cast<size_t>(e)], &base = g.nodes[static_cast<size_t>(a)];
    return eb.op == OpKind::embedding_backward && eb.inputs.size() == 2 &&
           uses[static_cast<size_t>(e)] == 1 && eb.dtype == sum.dtype && base.dtype == sum.dtype &&
           eb.shape == sum.shape && base.shape == sum.shape;
  };
  Graph out;
  bool changed = false;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node &n = g.nodes[i];
    if (n.op != OpKind::add || n.inputs.size() != 2 || n.inputs[0] == n.inputs[1]) continue;
    for (int side = 0; side < 2; ++side) {
      const int e = n.inputs[static_cast<size_t>(side)],
                a = n.inputs[static_cast<size_t>(1 - side)];
      if (!foldable(n, e, a)) continue;
      if (!changed) out = g;
      changed = true;
      const Node &eb = g.nodes[static_cast<size_t>(e)];
      Node &folded = out.nodes[i];
      folded.op = OpKind::embedding_backward;
      folded.inputs = {eb.inputs[0], eb.inputs[1], a};
      folded.attrs = eb.attrs;
      break;
    }
  }
  return changed ? out : g;
}

} // namespace rcjit
