// partitionJoint: split nodes by whether they depend on a tangent, decide per forward value
// the backward uses whether to save or recompute it, then build the two graphs.
#include "jit/autograd/Partition.h"

#include <map>

#include <rcjit/Error.h>

namespace rcjit {

namespace {

enum class Choice : uint8_t { undecided, save, recompute };

// Ops a fused backward kernel recomputes from its operands at no memory cost.
bool cheap(const Node &n) {
  switch (opInfo(n.op).category) {
  case OpCategory::Unary:
  case OpCategory::Binary:
  case OpCategory::Compare:
  case OpCategory::Where:
  case OpCategory::View:
    return true;
  case OpCategory::Source:
    return n.op == OpKind::full;
  case OpCategory::Reduce:
  case OpCategory::Normalize:
  case OpCategory::Matmul:
  case OpCategory::Nn:
  case OpCategory::Copy:
    return false;
  }
  return false;
}

int64_t bytesOf(const Node &n) {
  int64_t count = 1;
  for (const Dim &d : n.shape) count *= d.value;
  return count * static_cast<int64_t>(dtypeSize(n.dtype));
}

struct Planner {
  const Graph &g;
  std::vector<Choice> choice;

  explicit Planner(const Graph &graph) : g(graph), choice(graph.nodes.size(), Choice::undecided) {}

  // Saving input nodes costs nothing: the caller holds them already.
  bool isInput(int v) const { return g.nodes[v].op == OpKind::input; }

  // Bytes the backward must hold to have `v`: 0 when recomputed from inputs and constants.
  int64_t cost(int v) {
    Choice c = decide(v);
    if (c == Choice::save) return isInput(v) ? 0 : bytesOf(g.nodes[v]);
    int64_t sum = 0;
    for (int in : g.nodes[v].inputs) sum += cost(in);
    return sum;
  }

  Choice decide(int v) {
    if (choice[v] != Choice::undecided) return choice[v];
    const Node &n = g.nodes[v];
    if (isInput(v) || !cheap(n)) return choice[v] = Choice::save;
    if (n.inputs.empty()) return choice[v] = Choice::recompute; // a constant
    choice[v] = Choice::save; // provisional, for cost() of shared operands
    int64_t operands = 0;
    for (int in : n.inputs) operands += cost(in);
    return choice[v] = operands <= bytesOf(n) ? Choice::recompute : Choice::save;
  }
};

} // namespace

Partition partitionJoint(const JointGraph &j, const Partition *like) {
  const Graph &g = j.graph;
  const size_t n = g.nodes.size();
  if (like && like->jointNodes != n) {
    throw Error("partition: the joint graph at other sizes has " + std::to_string(n) +
                " nodes, at the traced sizes " + std::to_string(like->jointNodes));
  }
  std::vector<bool> savedLike(like ? n : 0, false);
  if (like) {
    for (int v : like->saved) savedLike[static_cast<size_t>(v)] = true;
  }
  std::vector<int> inputs = g.programInputs();
  if (j.numPrimalInputs < 0 || static_cast<size_t>(j.numPrimalInputs) > inputs.size() ||
      j.numForwardOutputs < 0 || static_cast<size_t>(j.numForwardOutputs) > g.outputs.size()) {
    throw Error("partition: the joint graph's primal inputs or forward outputs are out of range");
  }
  // backward = depends on a tangent
  std::vector<bool> backward(n, false);
  std::vector<int> tangentIndex(n, -1);
  for (size_t k = static_cast<size_t>(j.numPrimalInputs); k < inputs.size(); ++k) {
    backward[inputs[k]] = true;
    tangentIndex[inputs[k]] = static_cast<int>(k) - j.numPrimalInputs;
  }
  for (size_t i = 0; i < n; ++i) {
    for (int in : g.nodes[i].inputs) backward[i] = backward[i] || backward[in];
  }
  for (int o = 0; o < j.numForwardOutputs; ++o) {
    if (backward[g.outputs[o]]) {
      throw Error("partition: forward output " + std::to_string(o) + " (%" +
                  std::to_string(g.outputs[o]) + ") depends on a tangent");
    }
  }
  // the forward values the backward reads (operands of backward nodes, forward gradients)
  std::vector<bool> needed(n, false);
  for (size_t i = 0; i < n; ++i) {
    if (!backward[i]) continue;
    for (int in : g.nodes[i].inputs) {
      if (!backward[in]) needed[in] = true;
    }
  }
  for (size_t o = static_cast<size_t>(j.numForwardOutputs); o < g.outputs.size(); ++o) {
    if (!backward[g.outputs[o]]) needed[g.outputs[o]] = true;
  }
  Planner plan(g);
  // what the backward computes again, and what it must be handed
  std::vector<bool> recompute(n, false), save(n, false);
  std::vector<int> stack;
  for (size_t v = 0; v < n; ++v) {
    if (needed[v]) stack.push_back(static_cast<int>(v));
  }
  while (!stack.empty()) {
    int v = stack.back();
    stack.pop_back();
    if (recompute[v] || save[v]) continue;
    if (like ? savedLike[static_cast<size_t>(v)] || plan.isInput(v)
             : plan.decide(v) == Choice::save) {
      save[v] = true;
      continue;
    }
    recompute[v] = true;
    for (int in : g.nodes[v].inputs) stack.push_back(in);
  }

  Partition p;
  p.jointNodes = n;
  // forward: the forward nodes in order, renumbered
  std::vector<int> fwdId(n, -1);
  for (size_t i = 0; i < n; ++i) {
    if (backward[i]) continue;
    Node copy = g.nodes[i];
    copy.region = -1;
    for (int &in : copy.inputs) in = fwdId[in];
    fwdId[i] = p.forward.add(std::move(copy));
  }
  p.forward.symbols = g.symbols;
  std::map<int, int> outputIndex; // joint node -> its first index among forward outputs
  for (int o = 0; o < j.numForwardOutputs; ++o) {
    p.forward.outputs.push_back(fwdId[g.outputs[o]]);
    outputIndex.emplace(g.outputs[o], o);
  }
  for (size_t v = 0; v < n; ++v) {
    if (!save[v]) continue;
    p.saved.push_back(static_cast<int>(v));
    if (!plan.isInput(static_cast<int>(v))) p.savedBytes += bytesOf(g.nodes[v]);
    auto it = outputIndex.find(static_cast<int>(v));
    if (it == outputIndex.end()) {
      it = outputIndex.emplace(static_cast<int>(v), static_cast<int>(p.forward.outputs.size()))
               .first;
      p.forward.outputs.push_back(fwdId[v]);
    }
    p.savedOutput.push_back(it->second);
  }

  // backward: saved values as args, then tangents, recomputed and backward nodes in order
  std::vector<int> newId(n, -1);
  Graph &b = p.backward;
  b.symbols = g.symbols;
  auto addInput = [&](const Node &like, int index) {
    Node in;
    in.op = OpKind::input;
    in.dtype = like.dtype;
    in.shape = like.shape;
    in.inputKind = InputKind::arg;
    in.inputIndex = index;
    return b.add(std::move(in));
  };
  for (size_t s = 0; s < p.saved.size(); ++s) {
    newId[p.saved[s]] = addInput(g.nodes[p.saved[s]], static_cast<int>(s));
  }
  const int numSaved = static_cast<int>(p.saved.size());
  for (size_t i = 0; i < n; ++i) {
    const Node &node = g.nodes[i];
    if (!backward[i] && !recompute[i]) continue;
    if (tangentIndex[i] >= 0) {
      newId[i] = addInput(node, numSaved + tangentIndex[i]);
      continue;
    }
    if (!backward[i]) p.recomputed.push_back(static_cast<int>(i));
    Node copy = node;
    copy.region = -1;
    for (int &in : copy.inputs) {
      if (newId[in] < 0) {
        throw Error("partition: %" + std::to_string(i) + " reads %" + std::to_string(in) +
                    ", which the backward neither saves nor computes");
      }
      in = newId[in];
    }
    newId[i] = b.add(std::move(copy));
  }
  for (size_t o = static_cast<size_t>(j.numForwardOutputs); o < g.outputs.size(); ++o) {
    b.outputs.push_back(newId[g.outputs[o]]);
  }
  return p;
}

} // namespace rcjit
