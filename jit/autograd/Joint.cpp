// buildJointGraph: replay the forward graph under a shape-only trace, then apply the gradient
// rules in reverse node order to the traced values.
#include "jit/autograd/Joint.h"

#include <rcjit/Error.h>
#include <rcjit/Ops.h>

#include "autograd/GradRules.h"
#include "tracer/OpsInternal.h"
#include "tracer/TensorImpl.h"
#include "tracer/Tracer.h"

namespace rcjit {

Tensor replayNode(const Node &n, const std::vector<Tensor> &in, Device device) {
  switch (opInfo(n.op).category) {
  case OpCategory::Source:
    return detail::applySource(n.op, concreteShape(n.shape), n.dtype, n.attrs, device);
  case OpCategory::Unary:
    if (n.op == OpKind::cast) return detail::castTo(in.at(0), n.dtype);
    return detail::applyOp(n.op, in, n.attrs);
  case OpCategory::Binary:
  case OpCategory::Compare:
  case OpCategory::Where:
  case OpCategory::Reduce:
  case OpCategory::Normalize:
  case OpCategory::Matmul:
  case OpCategory::Nn:
  case OpCategory::View:
  case OpCategory::Copy:
  case OpCategory::Collective: // a meta trace: no communication
    return detail::applyOp(n.op, in, n.attrs);
  }
  throw Error("joint graph: cannot replay op " + std::string(opName(n.op)));
}

JointGraph buildJointGraph(const Graph &forward, const std::vector<Tensor> &inputs,
                           const std::vector<bool> &wantGrad) {
  const std::vector<int> programInputs = forward.programInputs();
  if (programInputs.size() != inputs.size() || wantGrad.size() != inputs.size()) {
    throw Error("joint graph: the forward graph has " + std::to_string(programInputs.size()) +
                " inputs, given " + std::to_string(inputs.size()) + " tensors and " +
                std::to_string(wantGrad.size()) + " gradient flags");
  }
  const size_t n = forward.nodes.size();
  // which nodes depend on an input that wants a gradient
  std::vector<bool> reach(n, false);
  for (size_t k = 0; k < programInputs.size(); ++k) reach[programInputs[k]] = wantGrad[k];
  for (size_t i = 0; i < n; ++i) {
    for (int in : forward.nodes[i].inputs) reach[i] = reach[i] || reach[in];
  }
  std::vector<Tensor> args = inputs;
  for (int o : forward.outputs) {
    const Node &out = forward.nodes[o];
    args.push_back(Tensor::empty(concreteShape(out.shape), out.dtype,
                                 inputs.empty() ? Device::cpu() : inputs[0].device()));
  }
  const Device device = inputs.empty() ? Device::cpu() : inputs[0].device();
  auto joint = [&](const std::vector<Tensor> &a) {
    std::vector<Tensor> value(n);
    for (size_t k = 0; k < programInputs.size(); ++k) value[programInputs[k]] = a[k];
    for (size_t i = 0; i < n; ++i) {
      const Node &node = forward.nodes[i];
      if (node.op == OpKind::input) continue;
      std::vector<Tensor> in;
      for (int x : node.inputs) in.push_back(value[x]);
      value[i] = replayNode(node, in, device);
    }
    // d(output k) = tangent k; then every rule in reverse order
    std::vector<Tensor> grad(n);
    auto accumulate = [&](int v, const Tensor &g) {
      grad[v] = grad[v].defined() ? grad[v] + g : g;
    };
    for (size_t k = 0; k < forward.outputs.size(); ++k) {
      int o = forward.outputs[k];
      if (reach[o] && isFloating(forward.nodes[o].dtype)) accumulate(o, a[inputs.size() + k]);
    }
    for (size_t i = n; i-- > 0;) {
      const Node &node = forward.nodes[i];
      if (!grad[i].defined() || node.op == OpKind::input) continue;
      if (autograd::gradKind(node.op) == autograd::GradKind::none) continue;
      std::vector<Tensor> in;
      std::vector<bool> needs;
      for (int x : node.inputs) {
        in.push_back(value[x]);
        needs.push_back(reach[x] && isFloating(forward.nodes[x].dtype));
      }
      // a tied embedding (GPT-2's LM head multiplies by the table it looks tokens up in):
      // the lookup's gradient is scattered into the table's gradient so far, instead of
      // into a zero table that is then added to it (two fewer passes over the table)
      if (node.op == OpKind::embedding && needs[0] && grad[node.inputs[0]].defined()) {
        const int w = node.inputs[0];
        grad[w] = embedding_backward(grad[i], in[1], in[0].size(0), grad[w]);
        continue;
      }
      std::vector<Tensor> g =
          autograd::applyGradRule(node.op, node.attrs, in, value[i], grad[i], needs);
      for (size_t j = 0; j < node.inputs.size() && j < g.size(); ++j) {
        if (needs[j] && g[j].defined()) accumulate(node.inputs[j], g[j]);
      }
    }
    std::vector<Tensor> out;
    for (int o : forward.outputs) out.push_back(value[o]);
    for (size_t k = 0; k < programInputs.size(); ++k) {
      if (!wantGrad[k]) continue;
      int v = programInputs[k];
      out.push_back(grad[v].defined() ? grad[v]
                                      : Tensor::zeros(value[v].shape(), value[v].dtype(), device));
    }
    return out;
  };
  Trace t = traceFunction(joint, args, /*meta=*/true);
  if (!t.breaks.empty()) throw Error("joint graph: a gradient rule read a value on the host");
  if (!t.captured.empty()) {
    throw Error("joint graph: a gradient rule read a tensor that is not an input (" +
                std::to_string(t.captured.size()) + " captured)");
  }
  JointGraph j;
  j.graph = std::move(t.graph);
  j.numPrimalInputs = static_cast<int>(inputs.size());
  j.numForwardOutputs = static_cast<int>(forward.outputs.size());
  return j;
}

} // namespace rcjit
