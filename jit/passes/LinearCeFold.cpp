// linear_ce_fold: see LinearCeFold.h.
#include "jit/passes/LinearCeFold.h"

#include <algorithm>

#include "jit/passes/GraphBuilder.h"

namespace rcjit {

namespace {

bool isStatic(const SymShape &s) {
  return std::none_of(s.begin(), s.end(), [](const Dim &d) { return d.isSymbolic(); });
}

// The gradient op over the pick's own x, w and target, or -1.
int gradientOpOf(const Graph &g, int pick) {
  const Node &p = g.nodes[static_cast<size_t>(pick)];
  for (size_t i = static_cast<size_t>(pick) + 1; i < g.nodes.size(); ++i) {
    const Node &n = g.nodes[i];
    if (n.op == OpKind::linear_ce_pick_backward && n.inputs.size() == 4 &&
        std::equal(p.inputs.begin(), p.inputs.end(), n.inputs.begin()) && isStatic(n.shape)) {
      return static_cast<int>(i);
    }
  }
  return -1;
}

// The nodes after `pick` that `grad` needs (itself included), in id order; empty when one
// of them is the pick or reads it.
std::vector<int> neededAfter(const Graph &g, int pick, int grad) {
  std::vector<bool> need(g.nodes.size(), false);
  need[static_cast<size_t>(grad)] = true;
  std::vector<int> out;
  for (int i = grad; i > pick; --i) {
    if (!need[static_cast<size_t>(i)]) continue;
    out.push_back(i);
    for (int in : g.nodes[static_cast<size_t>(i)].inputs) {
      if (in == pick) return {};
      if (in > pick) need[static_cast<size_t>(in)] = true;
    }
  }
  std::reverse(out.begin(), out.end());
  return out;
}

// `g` with `moved` (ids after `at`, ascending) placed just before node `at`; false when a
// region would no longer be one contiguous range.
bool moveBefore(const Graph &g, int at, const std::vector<int> &moved, Graph &out) {
  std::vector<bool> isMoved(g.nodes.size(), false);
  for (int m : moved) isMoved[static_cast<size_t>(m)] = true;
  std::vector<int> order;
  order.reserve(g.nodes.size());
  for (int i = 0; i < static_cast<int>(g.nodes.size()); ++i) {
    if (i == at) order.insert(order.end(), moved.begin(), moved.end());
    if (!isMoved[static_cast<size_t>(i)]) order.push_back(i);
  }
  std::vector<int> newId(g.nodes.size());
  for (size_t i = 0; i < order.size(); ++i)
    newId[static_cast<size_t>(order[i])] = static_cast<int>(i);
  out = Graph();
  out.symbols = g.symbols;
  for (int old : order) {
    Node n = g.nodes[static_cast<size_t>(old)];
    for (int &in : n.inputs) in = newId[static_cast<size_t>(in)];
    out.nodes.push_back(std::move(n));
  }
  for (int o : g.outputs) out.outputs.push_back(newId[static_cast<size_t>(o)]);
  for (Region r : g.regions) {
    if (r.end > r.begin) {
      int lo = newId[static_cast<size_t>(r.begin)], hi = lo;
      for (int i = r.begin; i < r.end; ++i) {
        lo = std::min(lo, newId[static_cast<size_t>(i)]);
        hi = std::max(hi, newId[static_cast<size_t>(i)]);
      }
      if (hi - lo + 1 != r.end - r.begin) return false;
      r.begin = lo;
      r.end = hi + 1;
    }
    out.regions.push_back(r);
  }
  return true;
}

// Replaces pick `pick` by the values slice of gradient op `grad` (which precedes it).
Graph readPickFromGradient(const Graph &g, int pick, int grad) {
  GraphBuilder b(g);
  for (int i = 0; i < static_cast<int>(g.nodes.size()); ++i) {
    b.begin(i);
    if (i != pick) {
      b.copy(i);
      continue;
    }
    const Node &p = g.nodes[static_cast<size_t>(pick)];
    const int64_t packed = g.nodes[static_cast<size_t>(grad)].shape[0].value;
    int64_t rows = 1;
    for (const Dim &d : p.shape) rows *= d.value;
    Attrs s;
    s.dim = 0;
    s.start = packed - rows;
    s.end = packed;
    int v = b.emit(OpKind::slice, {b.at(grad)}, s);
    if (p.shape.size() != 1) {
      Attrs r;
      for (const Dim &d : p.shape) r.dims.push_back(d.value);
      v = b.emit(OpKind::reshape, {v}, r);
    }
    b.map(i, v);
  }
  return b.finish();
}

} // namespace

Graph foldLinearCePicks(const Graph &in) {
  Graph g = in;
  for (int i = 0; i < static_cast<int>(g.nodes.size()); ++i) {
    const Node &n = g.nodes[static_cast<size_t>(i)];
    if (n.op != OpKind::linear_ce_pick || !isStatic(n.shape)) continue;
    const int grad = gradientOpOf(g, i);
    if (grad < 0) continue;
    const std::vector<int> moved = neededAfter(g, i, grad);
    Graph reordered;
    if (moved.empty() || !moveBefore(g, i, moved, reordered)) continue;
    // the pick now sits after the moved nodes, the gradient op last among them
    const int pick = i + static_cast<int>(moved.size());
    g = readPickFromGradient(reordered, pick, pick - 1);
    i = pick; // the slice (and its reshape) stand where the pick was; go on after them
  }
  return g;
}

} // namespace rcjit
