// partitionJoint: split nodes by whether they depend on a tangent, decide per forward value
// the backward uses whether to save or recompute it, then build the two graphs.
#include "jit/autograd/Partition.h"

#include <algorithm>
#include <map>

#include <rcjit/Error.h>

#include "tracer/GraphIO.h"
#include "tracer/OpKind.h"

namespace rcjit {

namespace {

enum class Choice : uint8_t { undecided, save, recompute };

// Ops a fused backward kernel recomputes from its operands at no memory cost.
bool cheap(const Node &n) {
  return isElementwise(n.op) || opInfo(n.op).category == OpCategory::View || n.op == OpKind::full;
}

// Recomputing a value needs at most this many saved values; past it, the value is saved.
constexpr size_t kMaxRecomputeLeaves = 8;

// Per forward node, in node order: save it, or recompute it from `leaves` (the saved values
// and constants its cheap chain starts from, each counted once however often the chain
// reads it). A cheap node is recomputed when its leaves hold no more bytes than it does.
struct Planner {
  const Graph &g;
  std::vector<Choice> choice;
  std::vector<std::vector<int>> leaves; // sorted; for recomputed nodes

  explicit Planner(const Graph &graph)
      : g(graph), choice(graph.nodes.size(), Choice::undecided), leaves(graph.nodes.size()) {}

  // Saving input nodes costs nothing: the caller holds them already.
  bool isInput(int v) const { return g.nodes[v].op == OpKind::input; }

  void plan(const std::vector<bool> &forward) {
    for (size_t v = 0; v < g.nodes.size(); ++v) {
      if (!forward[v]) continue;
      const Node &n = g.nodes[v];
      if (isInput(static_cast<int>(v)) || !cheap(n)) {
        choice[v] = Choice::save;
        continue;
      }
      std::vector<int> from;
      for (int in : n.inputs) {
        if (choice[in] == Choice::save) {
          from.push_back(in);
        } else {
          from.insert(from.end(), leaves[in].begin(), leaves[in].end());
        }
      }
      std::sort(from.begin(), from.end());
      from.erase(std::unique(from.begin(), from.end()), from.end());
      int64_t bytes = 0;
      for (int l : from) bytes += isInput(l) ? 0 : tracedBytes(g.nodes[l]);
      if (from.size() <= kMaxRecomputeLeaves && bytes <= tracedBytes(n)) {
        choice[v] = Choice::recompute;
        leaves[v] = std::move(from);
      } else {
        choice[v] = Choice::save;
      }
    }
  }
};

bool isInputNode(const Graph &g, int v) { return g.nodes[v].op == OpKind::input; }

// Per node: it depends on a tangent (the backward); `tangentIndex` gets each tangent input's
// index among the tangents. Throws when a forward output depends on one.
std::vector<bool> backwardNodes(const JointGraph &j, const std::vector<int> &inputs,
                                std::vector<int> &tangentIndex) {
  const Graph &g = j.graph;
  const size_t n = g.nodes.size();
  std::vector<bool> backward(n, false);
  tangentIndex.assign(n, -1);
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
  return backward;
}

// The forward values the backward reads (operands of backward nodes, forward gradients).
std::vector<bool> neededByBackward(const JointGraph &j, const std::vector<bool> &backward) {
  const Graph &g = j.graph;
  std::vector<bool> needed(g.nodes.size(), false);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    if (!backward[i]) continue;
    for (int in : g.nodes[i].inputs) {
      if (!backward[in]) needed[in] = true;
    }
  }
  for (size_t o = static_cast<size_t>(j.numForwardOutputs); o < g.outputs.size(); ++o) {
    if (!backward[g.outputs[o]]) needed[g.outputs[o]] = true;
  }
  return needed;
}

// What the backward computes again (`recompute`) and what it must be handed (`save`): the
// needed values, walking back through the recomputed ones; as `like` does when given.
void chooseSaved(const Graph &g, const std::vector<bool> &backward, const std::vector<bool> &needed,
                 const Partition *like, std::vector<bool> &recompute, std::vector<bool> &save) {
  const size_t n = g.nodes.size();
  std::vector<bool> savedLike(like ? n : 0, false);
  if (like) {
    for (int v : like->saved) savedLike[static_cast<size_t>(v)] = true;
  }
  Planner plan(g);
  if (!like) {
    std::vector<bool> forward(n);
    for (size_t i = 0; i < n; ++i) forward[i] = !backward[i];
    plan.plan(forward);
  }
  recompute.assign(n, false);
  save.assign(n, false);
  std::vector<int> stack;
  for (size_t v = 0; v < n; ++v) {
    if (needed[v]) stack.push_back(static_cast<int>(v));
  }
  while (!stack.empty()) {
    int v = stack.back();
    stack.pop_back();
    if (recompute[v] || save[v]) continue;
    if (like ? savedLike[static_cast<size_t>(v)] || plan.isInput(v)
             : plan.choice[v] == Choice::save) {
      save[v] = true;
      continue;
    }
    recompute[v] = true;
    for (int in : g.nodes[v].inputs) stack.push_back(in);
  }
}

// p.forward: the forward nodes in order, renumbered; outputs the function's, then the saved
// values not among them (p.saved, p.savedOutput, p.savedBytes).
void buildForward(const JointGraph &j, const std::vector<bool> &backward,
                  const std::vector<bool> &save, Partition &p) {
  const Graph &g = j.graph;
  const size_t n = g.nodes.size();
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
    if (!isInputNode(g, static_cast<int>(v))) p.savedBytes += tracedBytes(g.nodes[v]);
    auto it = outputIndex.find(static_cast<int>(v));
    if (it == outputIndex.end()) {
      it = outputIndex.emplace(static_cast<int>(v), static_cast<int>(p.forward.outputs.size()))
               .first;
      p.forward.outputs.push_back(fwdId[v]);
    }
    p.savedOutput.push_back(it->second);
  }
}

// p.backward: the saved values as args, then the tangents, then the recomputed and backward
// nodes in order, each recomputed value just before its first use (so that it is not held
// from the start of the backward); outputs the gradients.
class BackwardBuilder {
public:
  BackwardBuilder(const JointGraph &j, const std::vector<bool> &backward,
                  const std::vector<bool> &recompute, Partition &p)
      : g_(j.graph), backward_(backward), recompute_(recompute), p_(p), b_(p.backward),
        newId_(j.graph.nodes.size(), -1) {}

  void build(const JointGraph &j, const std::vector<int> &tangentIndex) {
    const size_t n = g_.nodes.size();
    b_.symbols = g_.symbols;
    for (size_t s = 0; s < p_.saved.size(); ++s)
      newId_[p_.saved[s]] = addInput(g_.nodes[p_.saved[s]], static_cast<int>(s));
    const int numSaved = static_cast<int>(p_.saved.size());
    for (size_t i = 0; i < n; ++i) {
      if (tangentIndex[i] >= 0) newId_[i] = addInput(g_.nodes[i], numSaved + tangentIndex[i]);
    }
    for (size_t i = 0; i < n; ++i) {
      if (backward_[i] && newId_[i] < 0) addWithInputs(static_cast<int>(i));
    }
    // an output no backward node reads and that depends on no tangent (the zero gradient of
    // an input the function does not use) is recomputed at the end, unless it is saved
    for (size_t o = static_cast<size_t>(j.numForwardOutputs); o < g_.outputs.size(); ++o) {
      const int v = g_.outputs[o];
      if (newId_[v] < 0 && recompute_[v]) addWithInputs(v);
      if (newId_[v] < 0) {
        throw Error("partition: backward output " + std::to_string(o) + " (%" + std::to_string(v) +
                    ") is neither saved nor computed");
      }
      b_.outputs.push_back(newId_[v]);
    }
  }

private:
  int addInput(const Node &like, int index) {
    Node in;
    in.op = OpKind::input;
    in.dtype = like.dtype;
    in.shape = like.shape;
    in.inputKind = InputKind::arg;
    in.inputIndex = index;
    return b_.add(std::move(in));
  }

  // a node of the backward, after the recomputed values it reads
  void add(int v) {
    Node copy = g_.nodes[v];
    copy.region = -1;
    for (int &in : copy.inputs) {
      if (newId_[in] < 0) {
        throw Error("partition: %" + std::to_string(v) + " reads %" + std::to_string(in) +
                    ", which the backward neither saves nor computes");
      }
      in = newId_[in];
    }
    newId_[v] = b_.add(std::move(copy));
  }

  // adds `start` with the recomputed values it reads first, depth first
  void addWithInputs(int start) {
    std::vector<std::pair<int, size_t>> pending{{start, 0}}; // (node, next operand to look at)
    while (!pending.empty()) {
      const int v = pending.back().first;
      const size_t k = pending.back().second;
      const std::vector<int> &ins = g_.nodes[v].inputs;
      if (k < ins.size()) {
        ++pending.back().second;
        if (newId_[ins[k]] < 0 && recompute_[ins[k]]) pending.push_back({ins[k], 0});
        continue;
      }
      pending.pop_back();
      if (newId_[v] >= 0) continue; // reached twice
      if (!backward_[v]) p_.recomputed.push_back(v);
      add(v);
    }
  }

  const Graph &g_;
  const std::vector<bool> &backward_, &recompute_;
  Partition &p_;
  Graph &b_;
  std::vector<int> newId_;
};

} // namespace

Partition partitionJoint(const JointGraph &j, const Partition *like) {
  const Graph &g = j.graph;
  const size_t n = g.nodes.size();
  if (like && like->jointNodes != n) {
    throw Error("partition: the joint graph at other sizes has " + std::to_string(n) +
                " nodes, at the traced sizes " + std::to_string(like->jointNodes));
  }
  std::vector<int> inputs = g.programInputs();
  if (j.numPrimalInputs < 0 || static_cast<size_t>(j.numPrimalInputs) > inputs.size() ||
      j.numForwardOutputs < 0 || static_cast<size_t>(j.numForwardOutputs) > g.outputs.size()) {
    throw Error("partition: the joint graph's primal inputs or forward outputs are out of range");
  }
  std::vector<int> tangentIndex;
  const std::vector<bool> backward = backwardNodes(j, inputs, tangentIndex);
  std::vector<bool> recompute, save;
  chooseSaved(g, backward, neededByBackward(j, backward), like, recompute, save);
  Partition p;
  p.jointNodes = n;
  buildForward(j, backward, save, p);
  BackwardBuilder(j, backward, recompute, p).build(j, tangentIndex);
  return p;
}

} // namespace rcjit
