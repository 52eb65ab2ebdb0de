// interpretGraph: binds inputs, resolves symbols, then eager::run for every node.
#include "jit/Interpreter.h"

#include <chrono>
#include <string>

#include <rcjit/Error.h>

#include "targets/eager/Eager.h"
#include "tracer/ShapeInference.h"

namespace rcjit {

namespace {

std::string inputLabel(const Node &n) {
  std::string s = n.inputKind == InputKind::arg ? "arg " : "captured ";
  s += std::to_string(n.inputIndex);
  if (!n.name.empty()) s += " (" + n.name + ")";
  return s;
}

struct Interpreter {
  const Graph &g;
  std::vector<Tensor> inputs; // until run() binds them to their nodes
  std::vector<Tensor> values;
  std::vector<int64_t> symbolValue;
  std::vector<size_t> lastUse; // node -> last node reading it (outputs: never released)
  std::vector<int> order;      // program input i -> its input node (Graph::programInputs)

  Interpreter(const Graph &graph, std::vector<Tensor> in)
      : g(graph), inputs(std::move(in)), values(graph.nodes.size()),
        symbolValue(graph.symbols.size(), -1), order(graph.programInputs()) {
    if (inputs.size() != order.size()) {
      int numArgs = 0;
      for (int id : order) numArgs += g.nodes[id].inputKind == InputKind::arg;
      throw Error("interpretGraph: the graph takes " + std::to_string(numArgs) + " args and " +
                  std::to_string(order.size() - numArgs) + " captured tensors (" +
                  std::to_string(order.size()) + " inputs), got " + std::to_string(inputs.size()));
    }
  }

  // Checks t against input node n's dtype and shape, recording symbol sizes.
  void checkInput(const Node &n, const Tensor &t) {
    bool ok = t.defined() && t.dtype() == n.dtype && t.dim() == static_cast<int>(n.shape.size());
    for (size_t d = 0; ok && d < n.shape.size(); ++d) {
      const Dim &dim = n.shape[d];
      int64_t size = t.shape()[d];
      if (!dim.isSymbolic()) {
        ok = size == dim.value;
      } else if (symbolValue[dim.sym] < 0) {
        symbolValue[dim.sym] = size;
      } else {
        ok = symbolValue[dim.sym] == size;
      }
    }
    if (ok) return;
    std::string got = t.defined() ? std::string(dtypeName(t.dtype())) + shapeStr(t.shape())
                                  : std::string("an undefined tensor");
    throw Error("interpretGraph: " + inputLabel(n) + " expects " + std::string(dtypeName(n.dtype)) +
                shapeStr(concreteShape(n.shape)) + ", got " + got);
  }

  Shape resolve(const SymShape &s) const {
    Shape out;
    for (const Dim &d : s) {
      bool bound = d.isSymbolic() && symbolValue[d.sym] >= 0;
      out.push_back(bound ? symbolValue[d.sym] : d.value);
    }
    return out;
  }

  Tensor runNode(const Node &n) {
    std::vector<Tensor> in;
    std::vector<TensorMeta> metas;
    for (int i : n.inputs) {
      in.push_back(values[i]);
      metas.push_back({values[i].dtype(), values[i].shape()});
    }
    TensorMeta out;
    if (opInfo(n.op).category == OpCategory::Source) {
      out = {n.dtype, resolve(n.shape)};
    } else {
      out = inferMeta(n.op, metas, n.attrs);
      if (n.op == OpKind::cast) out.dtype = n.dtype;
    }
    return eager::run(n.op, in, n.attrs, out);
  }

  void computeLastUse() {
    lastUse.assign(g.nodes.size(), 0);
    for (size_t i = 0; i < g.nodes.size(); ++i) {
      for (int in : g.nodes[i].inputs) lastUse[in] = i;
    }
    for (int o : g.outputs) lastUse[o] = g.nodes.size();
  }

  std::vector<Tensor> run(std::vector<NodeProfile> *profile = nullptr) {
    computeLastUse();
    int64_t live = 0;
    std::vector<int64_t> held(g.nodes.size(), 0); // bytes each value holds while alive
    if (profile) profile->assign(g.nodes.size(), NodeProfile{});
    for (size_t i = 0; i < order.size(); ++i) {
      checkInput(g.nodes[order[i]], inputs[i]);
      values[order[i]] = inputs[i];
    }
    inputs.clear(); // the values hold them now, each until its last use
    for (size_t i = 0; i < g.nodes.size(); ++i) {
      const Node &n = g.nodes[i];
      if (n.op == OpKind::input) continue;
      const auto t0 = profile ? std::chrono::steady_clock::now()
                              : std::chrono::steady_clock::time_point{};
      values[i] = runNode(n);
      if (profile) {
        NodeProfile &p = (*profile)[i];
        p.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
                   .count();
        if (opInfo(n.op).category != OpCategory::View) {
          p.bytes = values[i].numel() * static_cast<int64_t>(dtypeSize(values[i].dtype()));
        }
        held[i] = p.bytes;
        live += p.bytes;
      }
      for (int in : n.inputs) {
        if (lastUse[in] == i) { // frees intermediates early
          values[in] = Tensor();
          live -= held[in];
          held[in] = 0;
        }
      }
      if (profile) (*profile)[i].live_bytes = live;
    }
    std::vector<Tensor> outs;
    for (int o : g.outputs) outs.push_back(values[o]);
    return outs;
  }
};

} // namespace

std::vector<Tensor> interpretGraph(const Graph &g, const std::vector<Tensor> &inputs) {
  return Interpreter(g, inputs).run();
}

std::vector<Tensor> interpretGraph(const Graph &g, std::vector<Tensor> &&inputs) {
  return Interpreter(g, std::move(inputs)).run();
}

std::vector<NodeProfile> profileGraph(const Graph &g, const std::vector<Tensor> &inputs) {
  std::vector<NodeProfile> profile;
  Interpreter(g, inputs).run(&profile);
  return profile;
}

} // namespace rcjit
