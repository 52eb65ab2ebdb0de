// extractRegion: one region of a graph as a graph of its own, for regional compilation.
//
// The sub-graph's nodes are, in order: one input node per value the region uses from
// outside it (in order of first use), then a copy of the region's nodes. A value from
// outside keeps its input kind, dtype, shape and name when it is an input node of `g`
// (parameters stay captured); any other outside value becomes an arg. Input nodes inside
// the region stay where they are. inputIndex is renumbered per kind in order of first use
// (inputs never used inside come last, in node order), so identical layers with different
// parameters extract to equal graphs up to names. Regions nested in `r` are kept, re-based;
// nodes of `r` itself get region -1. Symbols are renumbered in order of first appearance.
// Outputs are the region's non-input nodes used after it or listed in g.outputs, in id order.
#include <string>

#include <rcjit/Error.h>

#include "tracer/GraphIO.h"

namespace rcjit {

namespace {

struct Extraction {
  const Graph &g;
  int begin;
  int end;
  std::vector<int> outside;   // outside values used, in order of first use
  std::vector<int> useOrder;  // g ids of the sub-graph's inputs, in order of first use
  std::vector<int> newId;     // g id -> sub-graph id, or -1
  std::vector<int> oldId;     // sub-graph id -> g id
  std::vector<int> newRegion; // g region -> sub-graph region, or -1
};

[[noreturn]] void fail(const std::string &msg) { throw Error("extractRegion: " + msg); }

const Region &checkedRegion(const Graph &g, int r) {
  if (r < 0 || static_cast<size_t>(r) >= g.regions.size()) {
    fail("no region " + std::to_string(r) + " (the graph has " + std::to_string(g.regions.size()) +
         ")");
  }
  const Region &reg = g.regions[static_cast<size_t>(r)];
  if (reg.begin < 0 || reg.begin > reg.end || static_cast<size_t>(reg.end) > g.nodes.size()) {
    fail("region " + std::to_string(r) + " has an invalid node range");
  }
  return reg;
}

void noteUse(Extraction &x, int in, std::vector<bool> &seen) {
  if (seen[static_cast<size_t>(in)]) return;
  seen[static_cast<size_t>(in)] = true;
  if (in < x.begin) x.outside.push_back(in);
  if (in < x.begin || x.g.nodes[static_cast<size_t>(in)].op == OpKind::input) {
    x.useOrder.push_back(in);
  }
}

// Finds the outside values and the first-use order of every sub-graph input.
void scanUses(Extraction &x) {
  std::vector<bool> seen(x.g.nodes.size(), false);
  for (int i = x.begin; i < x.end; ++i) {
    for (int in : x.g.nodes[static_cast<size_t>(i)].inputs) {
      if (in < 0 || in >= i) fail("node %" + std::to_string(i) + " is out of order");
      noteUse(x, in, seen);
    }
  }
  for (int i = x.begin; i < x.end; ++i) {
    if (x.g.nodes[static_cast<size_t>(i)].op == OpKind::input) noteUse(x, i, seen);
  }
}

bool isDescendant(const Graph &g, int q, int r) {
  const int n = static_cast<int>(g.regions.size());
  for (int steps = 0; steps < n; ++steps) {
    q = g.regions[static_cast<size_t>(q)].parent;
    if (q == r) return true;
    if (q < 0 || q >= n) return false;
  }
  return false;
}

void copyRegions(Extraction &x, int r, Graph &sub) {
  const int shift = static_cast<int>(x.outside.size()) - x.begin;
  x.newRegion.assign(x.g.regions.size(), -1);
  for (size_t q = 0; q < x.g.regions.size(); ++q) {
    if (!isDescendant(x.g, static_cast<int>(q), r)) continue;
    Region reg = x.g.regions[q];
    reg.parent = reg.parent == r ? -1 : x.newRegion[static_cast<size_t>(reg.parent)];
    reg.begin += shift;
    reg.end += shift;
    x.newRegion[q] = static_cast<int>(sub.regions.size());
    sub.regions.push_back(std::move(reg));
  }
}

Node boundaryInput(const Node &from) {
  Node n;
  n.dtype = from.dtype;
  n.shape = from.shape;
  if (from.op == OpKind::input) {
    n.inputKind = from.inputKind;
    n.name = from.name;
  }
  return n;
}

void copyNodes(Extraction &x, Graph &sub) {
  x.newId.assign(x.g.nodes.size(), -1);
  for (int id : x.outside) {
    const Node &from = x.g.nodes[static_cast<size_t>(id)];
    x.newId[static_cast<size_t>(id)] = sub.add(boundaryInput(from));
    x.oldId.push_back(id);
  }
  for (int i = x.begin; i < x.end; ++i) {
    Node n = x.g.nodes[static_cast<size_t>(i)];
    for (int &in : n.inputs) in = x.newId[static_cast<size_t>(in)];
    const bool known = n.region >= 0 && static_cast<size_t>(n.region) < x.newRegion.size();
    n.region = known ? x.newRegion[static_cast<size_t>(n.region)] : -1;
    x.newId[static_cast<size_t>(i)] = sub.add(std::move(n));
    x.oldId.push_back(i);
  }
}

void numberInputs(const Extraction &x, Graph &sub) {
  int next[2] = {0, 0};
  for (int id : x.useOrder) {
    Node &n = sub.nodes[static_cast<size_t>(x.newId[static_cast<size_t>(id)])];
    n.inputIndex = next[static_cast<int>(n.inputKind)]++;
  }
}

void renumberSymbols(const Graph &g, Graph &sub) {
  std::vector<int> map(g.symbols.size(), -1);
  for (Node &n : sub.nodes) {
    for (Dim &d : n.shape) {
      if (!d.isSymbolic()) continue;
      if (static_cast<size_t>(d.sym) >= g.symbols.size()) fail("undeclared symbol");
      int &m = map[static_cast<size_t>(d.sym)];
      if (m < 0) {
        m = static_cast<int>(sub.symbols.size());
        sub.symbols.push_back(g.symbols[static_cast<size_t>(d.sym)]);
      }
      d.sym = m;
    }
  }
}

std::vector<int> regionOutputs(const Extraction &x) {
  std::vector<bool> usedLater(x.g.nodes.size(), false);
  for (size_t i = static_cast<size_t>(x.end); i < x.g.nodes.size(); ++i) {
    for (int in : x.g.nodes[i].inputs) {
      if (in >= 0 && static_cast<size_t>(in) < usedLater.size()) usedLater[in] = true;
    }
  }
  for (int o : x.g.outputs) {
    if (o >= 0 && static_cast<size_t>(o) < usedLater.size()) usedLater[o] = true;
  }
  std::vector<int> outs;
  for (int i = x.begin; i < x.end; ++i) {
    const bool input = x.g.nodes[static_cast<size_t>(i)].op == OpKind::input;
    if (usedLater[static_cast<size_t>(i)] && !input) outs.push_back(i);
  }
  return outs;
}

} // namespace

Graph extractRegion(const Graph &g, int r, std::vector<int> *boundary,
                    std::vector<int> *outputsInG) {
  const Region &reg = checkedRegion(g, r);
  Extraction x{g, reg.begin, reg.end, {}, {}, {}, {}, {}};
  scanUses(x);
  Graph sub;
  copyRegions(x, r, sub);
  copyNodes(x, sub);
  numberInputs(x, sub);
  renumberSymbols(g, sub);
  const std::vector<int> outs = regionOutputs(x);
  for (int o : outs) sub.outputs.push_back(x.newId[static_cast<size_t>(o)]);
  if (boundary) {
    boundary->clear();
    for (int id : sub.inputNodes()) boundary->push_back(x.oldId[static_cast<size_t>(id)]);
  }
  if (outputsInG) *outputsInG = outs;
  return sub;
}

} // namespace rcjit
