// GraphBuilder: old-to-new id map, inferMeta for new nodes, remapped outputs and regions.
#include "jit/passes/GraphBuilder.h"

#include <algorithm>
#include <cassert>

namespace rcjit {

GraphBuilder::GraphBuilder(const Graph &src)
    : src_(src), newId_(src.nodes.size(), -1), start_(src.nodes.size() + 1, -1) {
  g_.symbols = src.symbols;
  g_.nodes.reserve(src.nodes.size());
}

void GraphBuilder::begin(int old) {
  start_[old] = static_cast<int>(g_.nodes.size());
  region_ = src_.nodes[old].region;
}

Node GraphBuilder::remapped(int old) const {
  Node n = src_.nodes[old];
  for (int &in : n.inputs) {
    in = newId_[in];
    assert(in >= 0 && "GraphBuilder: an input was dropped");
  }
  return n;
}

int GraphBuilder::copy(int old) {
  int id = g_.add(remapped(old));
  newId_[old] = id;
  return id;
}

TensorMeta GraphBuilder::meta(int id) const {
  const Node &n = g_.nodes[id];
  return {n.dtype, concreteShape(n.shape)};
}

int GraphBuilder::emit(OpKind op, std::vector<int> inputs, const Attrs &a) {
  std::vector<TensorMeta> in;
  for (int i : inputs) in.push_back(meta(i));
  TensorMeta m = inferMeta(op, in, a);
  Node n;
  n.op = op;
  n.inputs = std::move(inputs);
  n.dtype = m.dtype;
  n.shape = staticShape(m.shape);
  n.attrs = a;
  return append(std::move(n));
}

int GraphBuilder::cast(int x, DType t) {
  if (g_.nodes[x].dtype == t) return x;
  int id = emit(OpKind::cast, {x});
  g_.nodes[id].dtype = t; // inferMeta keeps the operand's dtype: a cast's is its target
  return id;
}

int GraphBuilder::scalar(double value, DType t) {
  Node n;
  n.op = OpKind::full;
  n.dtype = t;
  n.attrs.value = value;
  return append(std::move(n));
}

int GraphBuilder::arange(int64_t n) {
  Node a;
  a.op = OpKind::arange;
  a.dtype = DType::i64;
  a.shape = staticShape({n});
  return append(std::move(a));
}

int GraphBuilder::append(Node n) {
  n.region = region_;
  return g_.add(std::move(n));
}

Graph GraphBuilder::finish() {
  start_.back() = static_cast<int>(g_.nodes.size());
  assert(std::find(start_.begin(), start_.end(), -1) == start_.end() &&
         "GraphBuilder::finish: begin() was not called for every node");
  for (int o : src_.outputs) {
    assert(newId_[o] >= 0 && "GraphBuilder::finish: an output was dropped");
    g_.outputs.push_back(newId_[o]);
  }
  for (Region r : src_.regions) {
    r.begin = start_[r.begin];
    r.end = start_[r.end];
    g_.regions.push_back(std::move(r));
  }
  return std::move(g_);
}

std::vector<int> useCounts(const Graph &g) {
  std::vector<int> uses(g.nodes.size(), 0);
  for (const Node &n : g.nodes)
    for (int in : n.inputs) ++uses[static_cast<size_t>(in)];
  for (int o : g.outputs) ++uses[static_cast<size_t>(o)];
  return uses;
}

} // namespace rcjit
