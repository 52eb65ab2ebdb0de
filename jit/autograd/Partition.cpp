// partitionJoint: decide per forward value the backward uses whether to save or recompute
// it, then cut the joint graph into the forward and backward graphs.
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

Partition partitionJoint(const JointGraph &j) {
  const Graph &g = j.graph;
  const int nf = j.numForwardNodes;
  if (nf < 0 || static_cast<size_t>(nf) > g.nodes.size() || j.numForwardOutputs < 0 ||
      static_cast<size_t>(j.numForwardOutputs) > g.outputs.size()) {
    throw Error("partition: the joint graph's forward part is out of range");
  }
  for (int i = 0; i < nf; ++i) {
    for (int in : g.nodes[i].inputs) {
      if (in >= nf) throw Error("partition: forward node %" + std::to_string(i) + " reads %" +
                                std::to_string(in) + " of the backward");
    }
  }
  // the forward values the backward reads (operands of backward nodes, forward gradients)
  std::vector<bool> needed(g.nodes.size(), false);
  for (size_t i = static_cast<size_t>(nf); i < g.nodes.size(); ++i) {
    for (int in : g.nodes[i].inputs) {
      if (in < nf) needed[in] = true;
    }
  }
  for (size_t o = static_cast<size_t>(j.numForwardOutputs); o < g.outputs.size(); ++o) {
    if (g.outputs[o] < nf) needed[g.outputs[o]] = true;
  }
  Planner plan(g);
  // what the backward computes again, and what it must be handed
  std::vector<bool> recompute(g.nodes.size(), false), save(g.nodes.size(), false);
  std::vector<int> stack;
  for (int v = 0; v < nf; ++v) {
    if (needed[v]) stack.push_back(v);
  }
  while (!stack.empty()) {
    int v = stack.back();
    stack.pop_back();
    if (recompute[v] || save[v]) continue;
    if (plan.decide(v) == Choice::save) {
      save[v] = true;
      continue;
    }
    recompute[v] = true;
    for (int in : g.nodes[v].inputs) stack.push_back(in);
  }

  Partition p;
  p.forward.nodes.assign(g.nodes.begin(), g.nodes.begin() + nf);
  p.forward.regions = g.regions;
  std::erase_if(p.forward.regions, [&](const Region &r) { return r.end > nf; });
  p.forward.symbols = g.symbols;
  std::map<int, int> outputIndex; // forward node -> its first index among forward outputs
  for (int o = 0; o < j.numForwardOutputs; ++o) {
    p.forward.outputs.push_back(g.outputs[o]);
    outputIndex.emplace(g.outputs[o], o);
  }
  for (int v = 0; v < nf; ++v) {
    if (!save[v]) continue;
    p.saved.push_back(v);
    if (!plan.isInput(v)) p.savedBytes += bytesOf(g.nodes[v]);
    auto it = outputIndex.find(v);
    if (it == outputIndex.end()) {
      it = outputIndex.emplace(v, static_cast<int>(p.forward.outputs.size())).first;
      p.forward.outputs.push_back(v);
    }
    p.savedOutput.push_back(it->second);
  }

  // backward: saved values as args, then tangents, recomputed and backward nodes in order
  std::vector<int> newId(g.nodes.size(), -1);
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
  int tangents = 0;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node &n = g.nodes[i];
    bool backward = static_cast<int>(i) >= nf;
    if (!backward && !recompute[i]) continue;
    if (backward && n.op == OpKind::input) {
      newId[i] = addInput(n, static_cast<int>(p.saved.size()) + tangents++);
      continue;
    }
    if (!backward) p.recomputed.push_back(static_cast<int>(i));
    Node copy = n;
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
    int v = g.outputs[o];
    if (newId[v] < 0) {
      throw Error("partition: gradient output %" + std::to_string(v) + " is not computable");
    }
    b.outputs.push_back(newId[v]);
  }
  return p;
}

} // namespace rcjit
