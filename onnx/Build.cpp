// From a parsed model to a Program: values numbered, initializers decoded, nodes checked
// (supported op, every input defined, no cycle) and put in topological order.
#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include "onnx/Program.h"

namespace rcjit::onnx::detail {

namespace {

std::string nodeLabel(const NodeData &n) {
  return "'" + (n.name.empty() ? (n.outputs.empty() ? std::string("?") : n.outputs[0]) : n.name) +
         "' (" + n.opType + ")";
}

std::string normDomain(const std::string &d) { return d == "ai.onnx" ? "" : d; }

// The initializers of one element that nodes read only as a Pow's exponent (and that are
// no graph output): what an exporter writes for the literal of `x ** 3`. They are
// constants, not parameters, so that the exponent's value is known where the graph is
// compiled (Pow(x, 3) becomes x * x * x there, not a call of powf per element).
std::unordered_set<std::string> exponentConstants(const GraphData &g) {
  std::unordered_set<std::string> exponents, other;
  for (const NodeData &n : g.nodes) {
    const bool pow = n.opType == "Pow" && normDomain(n.domain).empty();
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      (pow && i == 1 ? exponents : other).insert(n.inputs[i]);
    }
  }
  for (const ValueInfo &o : g.outputs) other.insert(o.name);
  std::unordered_set<std::string> out;
  for (const TensorData &t : g.initializers) {
    // one element: every dim 1 (no product of the file's dims, which may overflow)
    const bool one = std::all_of(t.dims.begin(), t.dims.end(), [](int64_t d) { return d == 1; });
    if (one && exponents.count(t.name) && !other.count(t.name)) out.insert(t.name);
  }
  return out;
}

// Kahn's algorithm over the producers of each node's inputs; a node left over is on a
// cycle (or waits for one), and the error names them.
std::vector<size_t> topoOrder(const std::vector<Node> &nodes, const std::vector<int> &producer,
                              const std::string &what) {
  size_t n = nodes.size();
  std::vector<int> pending(n, 0);
  std::vector<std::vector<size_t>> users(n);
  for (size_t i = 0; i < n; ++i) {
    for (int v : nodes[i].in) {
      if (v < 0 || producer[v] < 0) continue;
      pending[i]++;
      users[producer[v]].push_back(i);
    }
  }
  std::vector<size_t> order, ready;
  for (size_t i = n; i-- > 0;) {
    if (pending[i] == 0) ready.push_back(i);
  }
  while (!ready.empty()) {
    size_t i = ready.back();
    ready.pop_back();
    order.push_back(i);
    for (auto it = users[i].rbegin(); it != users[i].rend(); ++it) {
      if (--pending[*it] == 0) ready.push_back(*it);
    }
  }
  if (order.size() != n) {
    std::string names;
    int listed = 0;
    for (size_t i = 0; i < n && listed < 8; ++i) {
      if (pending[i] > 0) {
        names += (listed++ ? ", " : "") + nodeLabel(nodes[i].d);
      }
    }
    throw Error("onnx: " + what + ": the graph has a cycle through nodes " + names);
  }
  // keep the file's order where it is already topological (stable for layer runs)
  std::vector<size_t> pos(n);
  for (size_t i = 0; i < n; ++i) pos[order[i]] = i;
  bool sorted = true;
  for (size_t i = 0; i < n && sorted; ++i) {
    for (int v : nodes[i].in) {
      if (v >= 0 && producer[v] >= 0 && static_cast<size_t>(producer[v]) > i) sorted = false;
    }
  }
  if (sorted) {
    for (size_t i = 0; i < n; ++i) order[i] = i;
  }
  return order;
}

} // namespace

std::shared_ptr<Program> buildProgram(ModelData &m, const std::string &dir,
                                      const std::string &what) {
  if (!m.hasGraph) throw Error("onnx: " + what + ": not an ONNX model (no graph)");
  auto p = std::make_shared<Program>();
  p->what = what;
  std::unordered_map<std::string, int64_t> opsets;
  for (const auto &[d, v] : m.opsets) opsets[normDomain(d)] = v;
  if (!opsets.count("")) throw Error("onnx: " + what + ": imports no ai.onnx opset");
  p->opset = opsets[""];
  p->producer = m.producerName + (m.producerVersion.empty() ? "" : " " + m.producerVersion);
  GraphData &g = m.graph;
  if (g.sparseInitializers) {
    throw Error("onnx: " + what + ": sparse initializers are not supported");
  }

  std::unordered_map<std::string, int> ids;
  auto define = [&](const std::string &name, const std::string &by) {
    if (name.empty()) return -1;
    if (ids.count(name)) {
      throw Error("onnx: " + what + ": value '" + name + "' is defined twice (again by " + by +
                  ")");
    }
    int id = static_cast<int>(p->valueNames.size());
    ids[name] = id;
    p->valueNames.push_back(name);
    return id;
  };
  const std::unordered_set<std::string> exponents = exponentConstants(g);
  for (const TensorData &t : g.initializers) {
    int id = define(t.name, "an initializer");
    if (id < 0) throw Error("onnx: " + what + ": an initializer has no name");
    Tensor v = decodeTensor(t, dir, what);
    if (isFloating(v.dtype()) && !exponents.count(t.name)) {
      p->parameters.emplace_back(id, v);
      p->parameterNames.push_back(t.name);
    } else {
      p->constants.emplace_back(id, v);
    }
  }
  for (const ValueInfo &in : g.inputs) {
    if (ids.count(in.name)) continue; // an initializer listed as an input (IR < 4)
    p->inputIds.push_back(define(in.name, "a graph input"));
    p->inputNames.push_back(in.name);
    p->inputInfo.push_back(in);
  }
  std::vector<Node> nodes(g.nodes.size());
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    Node &n = nodes[i];
    n.d = std::move(g.nodes[i]);
    n.d.domain = normDomain(n.d.domain);
    auto os = opsets.find(n.d.domain);
    n.opset = os == opsets.end() ? 1 : os->second;
    n.op = findOp(n.d.domain, n.d.opType);
    if (!n.op) {
      throw Error("onnx: " + what + ": unsupported op '" + n.d.opType + "' (domain '" +
                  (n.d.domain.empty() ? std::string("ai.onnx") : n.d.domain) + "', opset " +
                  std::to_string(n.opset) + ") at node " + nodeLabel(n.d));
    }
    for (Attribute &a : n.d.attributes) {
      if (!a.refAttrName.empty() || a.hasGraph) {
        throw Error("onnx: " + what + ": node " + nodeLabel(n.d) + ": attribute '" + a.name +
                    "' is a subgraph or a function reference, not supported");
      }
      n.attrTensors.push_back(a.t.size() == 1 ? decodeTensor(a.t[0], dir, what) : Tensor());
      a.t.clear(); // their views into the file's bytes end with this call
    }
    for (const std::string &o : n.d.outputs) n.out.push_back(define(o, "node " + nodeLabel(n.d)));
  }
  std::vector<int> producer(p->valueNames.size(), -1);
  for (size_t i = 0; i < nodes.size(); ++i) {
    for (int o : nodes[i].out) {
      if (o >= 0) producer[o] = static_cast<int>(i);
    }
  }
  for (Node &n : nodes) {
    for (const std::string &name : n.d.inputs) {
      if (name.empty()) {
        n.in.push_back(-1);
        continue;
      }
      auto it = ids.find(name);
      if (it == ids.end()) {
        throw Error("onnx: " + what + ": node " + nodeLabel(n.d) + " reads '" + name +
                    "', which no node, graph input or initializer defines");
      }
      n.in.push_back(it->second);
    }
  }
  for (size_t i : topoOrder(nodes, producer, what)) p->nodes.push_back(std::move(nodes[i]));
  for (const ValueInfo &o : g.outputs) {
    auto it = ids.find(o.name);
    if (it == ids.end()) {
      throw Error("onnx: " + what + ": graph output '" + o.name + "' is never defined");
    }
    p->outputIds.push_back(it->second);
    p->outputNames.push_back(o.name);
  }
  std::vector<std::string> layerOf = findLayers(*p);
  for (size_t i = 0; i < p->nodes.size(); ++i) {
    if (layerOf[i].empty()) continue;
    auto it = std::find(p->layers.begin(), p->layers.end(), layerOf[i]);
    p->nodes[i].layer = static_cast<int>(it - p->layers.begin());
    if (it == p->layers.end()) p->layers.push_back(layerOf[i]);
  }
  return p;
}

} // namespace rcjit::onnx::detail
