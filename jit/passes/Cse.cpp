// cse: value numbering in one forward walk, keyed by op, operands and dtype.
#include "jit/passes/Cse.h"

#include <algorithm>
#include <map>
#include <tuple>

#include "jit/passes/GraphBuilder.h"

namespace rcjit {

namespace {

// Cheap part of a node's identity; candidates under one key are compared in full.
using Key = std::tuple<OpKind, std::vector<int>, DType>;

bool sameValue(const Node &a, const Node &b) {
  return a.op == b.op && a.inputs == b.inputs && a.dtype == b.dtype && a.shape == b.shape &&
         attrsEqual(a.op, a.attrs, b.attrs);
}

} // namespace

Graph cse(const Graph &g) {
  GraphBuilder b(g);
  std::map<Key, std::vector<int>> seen; // key -> new ids
  bool changed = false;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    int old = static_cast<int>(i);
    b.begin(old);
    if (g.nodes[i].op == OpKind::input) {
      b.copy(old);
      continue;
    }
    Node n = b.remapped(old);
    std::vector<int> &same = seen[Key{n.op, n.inputs, n.dtype}];
    auto match =
        std::find_if(same.begin(), same.end(), [&](int c) { return sameValue(b.node(c), n); });
    if (match == same.end()) {
      same.push_back(b.copy(old));
      continue;
    }
    b.map(old, *match);
    changed = true;
  }
  return changed ? b.finish() : g;
}

} // namespace rcjit
