// dce: a backward liveness walk from the outputs, then a renumbering copy.
#include "jit/passes/Dce.h"

#include <algorithm>

#include "jit/passes/GraphBuilder.h"

namespace rcjit {

namespace {

std::vector<bool> liveNodes(const Graph &g) {
  std::vector<bool> live(g.nodes.size(), false);
  for (int o : g.outputs) live[o] = true;
  for (size_t i = g.nodes.size(); i-- > 0;) {
    if (g.nodes[i].op == OpKind::input) live[i] = true;
    if (!live[i]) continue;
    for (int in : g.nodes[i].inputs) live[in] = true;
  }
  return live;
}

} // namespace

Graph dce(const Graph &g) {
  std::vector<bool> live = liveNodes(g);
  if (std::all_of(live.begin(), live.end(), [](bool l) { return l; })) return g;
  GraphBuilder b(g);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    b.begin(static_cast<int>(i));
    if (live[i]) b.copy(static_cast<int>(i));
  }
  return b.finish();
}

} // namespace rcjit
