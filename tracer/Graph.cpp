// The graph IR's value semantics: input lookup, attribute and structural equality, shapes.
#include "tracer/Graph.h"
#include "tracer/GraphIO.h"

#include <rcjit/Error.h>

#include <string>

#include <bit>
#include <cmath>

namespace rcjit {

namespace {

// Doubles compare by bit pattern so that -0.0 differs from 0.0, except that every NaN
// equals every NaN (the text form prints all NaNs alike).
bool sameDouble(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  return std::bit_cast<uint64_t>(a) == std::bit_cast<uint64_t>(b);
}

bool inputBindingEqual(const Node &a, const Node &b) {
  return a.inputKind == b.inputKind && a.inputIndex == b.inputIndex && a.name == b.name;
}

} // namespace

std::vector<int> Graph::inputNodes() const {
  std::vector<int> ids;
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (nodes[i].op == OpKind::input) ids.push_back(static_cast<int>(i));
  }
  return ids;
}

std::vector<int> Graph::programInputs() const {
  std::vector<int> args, captured;
  for (int id : inputNodes())
    (nodes[id].inputKind == InputKind::arg ? args : captured).push_back(id);
  std::vector<int> order(args.size() + captured.size(), -1);
  for (const std::vector<int> *kind : {&args, &captured}) {
    size_t base = kind == &args ? 0 : args.size();
    for (int id : *kind) {
      size_t idx = static_cast<size_t>(nodes[id].inputIndex);
      if (idx >= kind->size() || order[base + idx] >= 0) {
        throw Error("graph: input %" + std::to_string(id) + " has index " +
                    std::to_string(nodes[id].inputIndex) + ", but its kind's indices must be " +
                    "0.." + std::to_string(kind->size() - 1) + ", each once");
      }
      order[base + idx] = id;
    }
  }
  return order;
}

bool attrsEqual(OpKind op, const Attrs &a, const Attrs &b) {
  const uint32_t used = opInfo(op).attrs;
  auto differs = [used](uint32_t bit, bool same) { return (used & bit) && !same; };
  return !(differs(kDims, a.dims == b.dims) || differs(kDim, a.dim == b.dim) ||
           differs(kStart, a.start == b.start) || differs(kEnd, a.end == b.end) ||
           differs(kStride, a.stride == b.stride) || differs(kPadding, a.padding == b.padding) ||
           differs(kValue, sameDouble(a.value, b.value)) ||
           differs(kEps, sameDouble(a.eps, b.eps)) || differs(kKeepdim, a.keepdim == b.keepdim) ||
           differs(kCausal, a.causal == b.causal) || differs(kReduce, a.reduce == b.reduce) ||
           differs(kRoot, a.root == b.root) || differs(kWorld, a.world == b.world));
}

bool operator==(const Node &a, const Node &b) {
  if (a.op != b.op || a.inputs != b.inputs || a.dtype != b.dtype || a.shape != b.shape ||
      a.region != b.region || !attrsEqual(a.op, a.attrs, b.attrs)) {
    return false;
  }
  return a.op != OpKind::input || inputBindingEqual(a, b);
}

bool operator==(const Region &a, const Region &b) {
  return a.name == b.name && a.type == b.type && a.parent == b.parent && a.begin == b.begin &&
         a.end == b.end && a.inList == b.inList;
}

bool operator==(const Graph &a, const Graph &b) {
  return a.nodes == b.nodes && a.outputs == b.outputs && a.regions == b.regions &&
         a.symbols == b.symbols;
}

int64_t tracedBytes(const Node &n) {
  int64_t count = 1;
  for (const Dim &d : n.shape) count *= d.value;
  return count * static_cast<int64_t>(dtypeSize(n.dtype));
}

Shape concreteShape(const SymShape &s) {
  Shape out;
  out.reserve(s.size());
  for (const Dim &d : s) out.push_back(d.value);
  return out;
}

SymShape staticShape(const Shape &s) {
  SymShape out;
  out.reserve(s.size());
  for (int64_t v : s) out.push_back(Dim{v, -1});
  return out;
}

} // namespace rcjit
