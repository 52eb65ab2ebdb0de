// The eager autograd tape and engine, and the Tensor/rcjit autograd API on top of it.
#include "autograd/Autograd.h"

#include <algorithm>
#include <atomic>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include <rcjit/Autograd.h>
#include <rcjit/Ops.h>

#include "autograd/GradRules.h"
#include "tracer/EagerHook.h"
#include "tracer/TensorImpl.h"
#include "tracer/Tracer.h"

namespace rcjit::autograd {

namespace {

std::atomic<uint64_t> nextSeq{1};

SavedValue save(const Tensor &t) {
  return {detachedHandle(t), t.impl()->storage->version.load(std::memory_order_relaxed), false};
}

// One element for placeholders: on the CPU a shared static zero (never written, not
// counted by memory_stats), elsewhere a fresh element on the device.
Tensor placeholderElement(DType dtype, Device device) {
  if (!device.is_cpu()) return detail::makeTensor({1}, dtype, device);
  alignas(64) static unsigned char zero[64] = {};
  return Tensor::from_blob(zero, {1}, dtype);
}

// t's geometry without its values (see SavedValue).
SavedValue placeholder(const Tensor &t) {
  Tensor one = placeholderElement(t.dtype(), t.device());
  return {detail::makeView(one, t.shape(), Shape(t.shape().size(), 0), 0), 0, true};
}

std::string where(const char *caller, const Tensor &t) {
  return std::string(caller) + ": " + std::string(dtypeName(t.dtype())) + shapeStr(t.shape());
}

void checkSaved(const Node &n, const SavedValue &s) {
  if (!s.placeholder &&
      s.value.impl()->storage->version.load(std::memory_order_relaxed) != s.version) {
    throw Error("backward: a value saved for the gradient of " + std::string(opName(n.op)) +
                " was modified in place (copy_) after the forward used it; clone() it before "
                "writing, or run the forward again after the write");
  }
}

} // namespace

bool ownsItsBlock(const Tensor &t) {
  const auto &impl = t.impl();
  // all of it, or nearly: a view at offset 0 of a larger block (the first gradient of a
  // ddp bucket, a slice of the bucket's buffer) kept as a grad() would keep the whole block
  // alive; a tail of at most an eighth of t (a fused cross-entropy's packed result, whose
  // weight gradient leads it) is kept rather than copying t
  const size_t bytes = static_cast<size_t>(t.numel()) * dtypeSize(t.dtype());
  return impl.use_count() == 1 && impl->storage.use_count() == 1 && impl->storage->release &&
         impl->offset == 0 && t.is_contiguous() && impl->storage->nbytes <= bytes + bytes / 8;
}

bool scatterRowsInto(const Tensor &acc, const Shape &weight, const Tensor &rows,
                     const Tensor &ids) {
  if (Tracer::current() || !acc.defined() || !acc.device().is_cpu() || !rows.device().is_cpu() ||
      (acc.dtype() != DType::f32 && acc.dtype() != DType::f64) || rows.dtype() != acc.dtype() ||
      acc.dim() != 2 || acc.shape() != weight || !ownsItsBlock(acc))
    return false;
  acc.impl()->storage->version.fetch_add(1, std::memory_order_relaxed);
  detail::embeddingBackwardIntoEager(acc, rows, ids);
  return true;
}

namespace {

// slot + g, written into slot's own block where it may be (ownsItsBlock, host tensors of
// one dtype and shape, no trace recording the ops), so that the sum of two gradients (a
// tied weight's two uses, compiled in two regions; a gradient accumulated over backward()
// calls) needs no third block; else a new tensor.
void addInPlaceOrNew(Tensor &slot, const Tensor &g) {
  if (!Tracer::current() && slot.device().is_cpu() && g.device().is_cpu() &&
      slot.dtype() == g.dtype() && slot.shape() == g.shape() && ownsItsBlock(slot)) {
    slot.impl()->storage->version.fetch_add(1, std::memory_order_relaxed);
    detail::addIntoEager(slot, g);
    return;
  }
  slot = slot + g;
}

// Adds g into slot (which may be undefined).
void accumulate(Tensor &slot, const Tensor &g) {
  if (slot.defined()) {
    addInPlaceOrNew(slot, g);
  } else {
    slot = g;
  }
}

// Adds g into output `index` of a node's pending gradients.
void accumulate(std::vector<Tensor> &slots, int index, const Tensor &g) {
  if (slots.size() <= static_cast<size_t>(index)) slots.resize(static_cast<size_t>(index) + 1);
  accumulate(slots[static_cast<size_t>(index)], g);
}

// The input edge of `t` for a new node: its producing node (and which output it is), or the
// leaf it is; empty when it needs no gradient.
Edge edgeOf(const Tensor &t) {
  Edge e;
  const std::shared_ptr<AutogradMeta> &m = t.impl()->autograd;
  if (m && m->requiresGrad) {
    if (m->gradFn) {
      e.fn = m->gradFn;
      e.index = m->outputIndex;
    } else {
      e.leaf = m;
    }
  }
  return e;
}

// A gradient a leaf may keep: owned alone (no other handle or view aliases it), contiguous.
Tensor ownedGrad(Tensor g) { return ownsItsBlock(g) ? g : g.clone(); }

// The gradient of the root `t` (given or implicit ones), checked against t.
Tensor rootGrad(const Tensor &t, const Tensor &given, const char *caller) {
  if (!given.defined()) {
    if (t.numel() != 1) {
      throw Error(std::string(caller) +
                  ": a gradient can be created implicitly only for a one-element tensor, got " +
                  shapeStr(t.shape()) + "; pass a gradient of that shape");
    }
    return Tensor::ones(t.shape(), t.dtype(), t.device());
  }
  if (given.shape() != t.shape()) {
    throw Error(std::string(caller) + ": the gradient's shape " + shapeStr(given.shape()) +
                " does not match the tensor's shape " + shapeStr(t.shape()));
  }
  if (given.device() != t.device()) {
    throw Error(std::string(caller) + ": the gradient is on " + given.device().str() +
                " but the tensor on " + t.device().str());
  }
  Tensor g = detachedHandle(given);
  return g.dtype() == t.dtype() ? g : g.to(t.dtype());
}

// Every node reachable from the roots, in reverse creation order (a reverse topological
// order: a node's inputs were always recorded before it).
std::vector<Node *> reachable(const std::vector<Node *> &roots) {
  std::vector<Node *> out, stack(roots);
  std::unordered_set<Node *> seen(roots.begin(), roots.end());
  while (!stack.empty()) {
    Node *n = stack.back();
    stack.pop_back();
    out.push_back(n);
    for (const Edge &e : n->next) {
      if (e.fn && seen.insert(e.fn.get()).second) stack.push_back(e.fn.get());
    }
  }
  std::sort(out.begin(), out.end(), [](Node *a, Node *b) { return a->seq > b->seq; });
  return out;
}

void release(Node &n) {
  n.released = true;
  n.inputs.clear();
  n.output = {};
  if (n.custom) n.custom->release();
}

} // namespace

Node::~Node() {
  std::vector<std::shared_ptr<Node>> owned;
  auto adopt = [&owned](std::vector<Edge> &edges) {
    for (Edge &e : edges) {
      if (e.fn && e.fn.use_count() == 1) owned.push_back(std::move(e.fn));
    }
  };
  adopt(next);
  while (!owned.empty()) {
    std::shared_ptr<Node> n = std::move(owned.back());
    owned.pop_back();
    adopt(n->next); // n dies here with no unique successors left to recurse into
  }
}

Tensor detachedHandle(const Tensor &t) {
  auto impl = std::make_shared<detail::TensorImpl>();
  const detail::TensorImpl &src = *t.impl();
  impl->storage = src.storage;
  impl->shape = src.shape;
  impl->strides = src.strides;
  impl->offset = src.offset;
  impl->dtype = src.dtype;
  impl->marks = src.marks;
  return Tensor(std::move(impl));
}

void record(OpKind op, const std::vector<Tensor> &in, const Attrs &a, const Tensor &out) {
  if (!isFloating(out.dtype())) return; // integer and boolean results carry no gradient
  for (const Tensor &t : in) {
    if (t.impl() == out.impl()) return; // an identity: out already carries the input's state
  }
  auto node = std::make_shared<Node>();
  node->op = op;
  node->attrs = a;
  node->seq = nextSeq.fetch_add(1, std::memory_order_relaxed);
  node->inputs.reserve(in.size());
  node->next.reserve(in.size());
  const SavedUse use = savedUse(op);
  for (size_t i = 0; i < in.size(); ++i) {
    const Tensor &t = in[i];
    node->inputs.push_back(use.input(i) ? save(t) : placeholder(t));
    node->next.push_back(edgeOf(t));
  }
  node->output = use.output ? save(out) : placeholder(out);
  auto meta = std::make_shared<AutogradMeta>();
  meta->requiresGrad = true;
  meta->gradFn = std::move(node);
  out.impl()->autograd = std::move(meta);
}

namespace {
// The ops record through the tensor runtime's hook (tracer/AutogradHook.h): installed when
// librcjit.so loads, before any tensor can require grad.
const bool tapeInstalled = (installTapeRecorder(&record), true);
} // namespace

void recordCustom(std::shared_ptr<CustomBackward> fn, const std::vector<Tensor> &inputs,
                  const std::vector<Tensor> &outputs) {
  auto node = std::make_shared<Node>();
  node->custom = std::move(fn);
  node->seq = nextSeq.fetch_add(1, std::memory_order_relaxed);
  for (const Tensor &t : inputs) node->next.push_back(edgeOf(t));
  for (size_t k = 0; k < outputs.size(); ++k) {
    if (!isFloating(outputs[k].dtype())) continue;
    auto meta = std::make_shared<AutogradMeta>();
    meta->requiresGrad = true;
    meta->gradFn = node;
    meta->outputIndex = static_cast<int>(k);
    outputs[k].impl()->autograd = std::move(meta);
  }
}

namespace {
// One run of the engine: the roots' gradients carried through the tape in reverse creation
// order into the leaves; for rcjit::grad (`inputs` set) only along the paths that lead to
// a requested input, and into the inputs instead of the leaves' grad().
struct BackwardRun {
  const std::vector<Tensor> *inputs;
  const char *caller;
  bool retainGraph;
  std::unordered_map<Node *, std::vector<Tensor>> pending; // per output of the node
  std::unordered_map<AutogradMeta *, Tensor> leafGrads;
  std::vector<Node *> rootNodes;
  // Non-leaf inputs of rcjit::grad: their gradient is what reaches their node.
  std::unordered_map<Node *, std::vector<Tensor>> captured; // per output of the node
  std::unordered_set<AutogradMeta *> wantedLeaves;
  std::unordered_set<Node *> leadsOn;

  // the roots' gradients into their nodes (or leaves)
  void seed(const std::vector<Tensor> &roots, const std::vector<Tensor> &rootGrads) {
    for (size_t i = 0; i < roots.size(); ++i) {
      const Tensor &t = roots[i];
      if (!t.defined())
        throw Error(std::string(caller) + ": output " + std::to_string(i) +
                    " is an undefined Tensor");
      AutogradMeta *m = metaOf(t);
      if (!m || !m->requiresGrad) {
        throw Error(where(caller, t) +
                    " does not require grad: nothing it was computed from requires a gradient "
                    "(call requires_grad_() on a leaf before the forward, outside NoGradGuard)");
      }
      Tensor g = rootGrad(t, rootGrads.empty() ? Tensor() : rootGrads[i], caller);
      if (m->gradFn) {
        accumulate(pending[m->gradFn.get()], m->outputIndex, g);
        rootNodes.push_back(m->gradFn.get());
      } else {
        accumulate(leafGrads[m], g);
      }
    }
  }

  void checkInputs() {
    for (const Tensor &t : *inputs) {
      if (!t.defined()) throw Error(std::string(caller) + ": an input is an undefined Tensor");
      AutogradMeta *m = metaOf(t);
      if (!m || !m->requiresGrad) {
        throw Error(where(caller, t) + " (an input) does not require grad");
      }
      if (m->gradFn) captured.emplace(m->gradFn.get(), std::vector<Tensor>());
    }
  }

  // rcjit::grad computes only the paths that lead to a requested input: an edge is needed
  // when it reaches a requested leaf, a requested node, or a node that leads to one.
  bool needed(const Edge &e) const {
    if (!inputs) return e.valid();
    if (e.fn) return captured.count(e.fn.get()) > 0 || leadsOn.count(e.fn.get()) > 0;
    return e.leaf && wantedLeaves.count(e.leaf.get()) > 0;
  }

  void markPaths(const std::vector<Node *> &order) {
    for (const Tensor &t : *inputs) {
      if (!metaOf(t)->gradFn) wantedLeaves.insert(metaOf(t));
    }
    for (auto it = order.rbegin(); it != order.rend(); ++it) { // inputs before consumers
      for (const Edge &e : (*it)->next) {
        if (needed(e)) {
          leadsOn.insert(*it);
          break;
        }
      }
    }
  }

  // node n's rule applied to the gradient that reached it, its results passed on
  void runNode(Node *n) {
    auto it = pending.find(n);
    if (it == pending.end()) return; // no gradient reached it
    std::vector<Tensor> gs = std::move(it->second);
    pending.erase(it);
    if (auto c = captured.find(n); c != captured.end()) c->second = gs;
    if (inputs && !leadsOn.count(n)) return; // leads to no requested input
    if (n->released) {
      throw Error(std::string(caller) +
                  ": trying to backward through the graph a second time (the values saved "
                  "for the gradient of " +
                  (n->custom ? n->custom->name() : std::string(opName(n->op))) +
                  " were freed by the first backward); pass retain_graph = true to the first "
                  "backward() or grad() to keep them");
    }
    std::vector<bool> needs;
    for (const Edge &e : n->next) needs.push_back(needed(e));
    // the gradients that reached n's input edges before, where n sums its own into them
    std::vector<Tensor> sums(n->next.size());
    std::vector<Tensor> grads;
    if (n->custom) {
      for (size_t i = 0; i < sums.size(); ++i) {
        if (needs[i] && n->custom->sumsInto(i)) sums[i] = take(n->next[i]);
      }
      grads = n->custom->backward(gs, needs, retainGraph, sums);
    } else {
      std::vector<Tensor> in;
      in.reserve(n->inputs.size());
      for (size_t i = 0; i < n->inputs.size(); ++i) {
        checkSaved(*n, n->inputs[i]);
        in.push_back(n->inputs[i].value);
      }
      checkSaved(*n, n->output);
      if (n->op == OpKind::embedding && needs[0]) grads = scatterIntoSum(in, gs.at(0), *n, sums);
      if (grads.empty())
        grads = applyGradRule(n->op, n->attrs, in, n->output.value, gs.at(0), needs);
    }
    for (size_t i = 0; i < n->next.size(); ++i) {
      const Edge &e = n->next[i];
      for (const Tensor *g : {&sums[i], i < grads.size() ? &grads[i] : nullptr}) {
        if (!g || !g->defined()) continue;
        if (e.fn) {
          accumulate(pending[e.fn.get()], e.index, *g);
        } else if (e.leaf) {
          accumulate(leafGrads[e.leaf.get()], *g);
        }
      }
    }
    if (!retainGraph) release(*n);
  }

  // The gradient that reached edge e so far, moved out of the engine (undefined if none).
  Tensor take(const Edge &e) {
    if (e.fn) {
      auto it = pending.find(e.fn.get());
      const size_t k = static_cast<size_t>(e.index);
      return it == pending.end() || it->second.size() <= k ? Tensor() : std::move(it->second[k]);
    }
    auto it = e.leaf ? leafGrads.find(e.leaf.get()) : leafGrads.end();
    if (it == leafGrads.end()) return Tensor();
    Tensor t = std::move(it->second);
    leafGrads.erase(it);
    return t;
  }

  // An embedding's weight gradient scattered into the gradient that reached the weight
  // before (a tied weight: gpt2's LM head), in that gradient's block (scatterRowsInto):
  // {the sum, nothing for the ids}. Empty where it cannot (sums[0] then holds what was
  // there, added as usual). Under a trace nothing is taken out of the engine.
  std::vector<Tensor> scatterIntoSum(const std::vector<Tensor> &in, const Tensor &g, const Node &n,
                                     std::vector<Tensor> &sums) {
    if (Tracer::current()) return {};
    sums[0] = take(n.next[0]);
    if (!scatterRowsInto(sums[0], in[0].shape(), g, in[1])) return {};
    return {std::move(sums[0]), Tensor()};
  }

  // backward(): the leaves' gradients accumulated into their grad()
  void accumulateLeaves() {
    for (auto &[m, g] : leafGrads) {
      if (Tracer *tr = Tracer::current(); tr && tr->recordsAutograd())
        tr->gradAccess(Tensor(), m, /*reads=*/true); // accumulates into grad()
      if (m->grad.defined()) {
        addInPlaceOrNew(m->grad, g);
      } else {
        Tensor owned = std::move(g);
        m->grad = ownedGrad(std::move(owned));
      }
    }
  }

  // grad(): the gradient of each requested input
  std::vector<Tensor> inputGrads() {
    std::vector<Tensor> out;
    for (const Tensor &t : *inputs) {
      AutogradMeta *m = metaOf(t);
      if (m->gradFn) {
        const std::vector<Tensor> &gs = captured[m->gradFn.get()];
        size_t k = static_cast<size_t>(m->outputIndex);
        out.push_back(k < gs.size() ? gs[k] : Tensor());
      } else {
        auto it = leafGrads.find(m);
        out.push_back(it == leafGrads.end() ? Tensor() : it->second);
      }
    }
    return out;
  }
};
} // namespace

std::vector<Tensor> runBackward(const std::vector<Tensor> &roots,
                                const std::vector<Tensor> &rootGrads, bool retainGraph,
                                const std::vector<Tensor> *inputs, const char *caller) {
  if (roots.empty()) throw Error(std::string(caller) + ": no outputs to differentiate");
  if (Tracer *tr = Tracer::current()) {
    if (!tr->recordsAutograd()) {
      throw Error(std::string(caller) +
                  " inside a trace that keeps no autograd tape (a function with graph breaks, "
                  "or a graph being replayed): compute the loss in the compiled function and "
                  "call " +
                  caller + " outside it, or remove the host reads");
    }
    tr->noteBackward();
  }
  if (!rootGrads.empty() && rootGrads.size() != roots.size()) {
    throw Error(std::string(caller) + ": " + std::to_string(rootGrads.size()) +
                " gradients given for " + std::to_string(roots.size()) + " outputs");
  }
  NoGradGuard noGrad; // the rules' ops are not recorded (no higher-order gradients)
  BackwardRun run{inputs, caller, retainGraph, {}, {}, {}, {}, {}, {}};
  run.seed(roots, rootGrads);
  if (inputs) run.checkInputs();
  const std::vector<Node *> order = reachable(run.rootNodes);
  if (inputs) run.markPaths(order);
  for (Node *n : order) run.runNode(n);
  if (inputs) return run.inputGrads();
  run.accumulateLeaves();
  return {};
}

std::vector<OpKind> graphOps(const Tensor &t) {
  std::vector<OpKind> ops;
  AutogradMeta *m = metaOf(t);
  if (!m || !m->gradFn) return ops;
  for (Node *n : reachable({m->gradFn.get()})) ops.push_back(n->op);
  return ops;
}

} // namespace rcjit::autograd

namespace rcjit {

bool is_grad_enabled() { return autograd::gradEnabled(); }

NoGradGuard::NoGradGuard() : prev_(autograd::gradEnabled()) { autograd::setGradEnabled(false); }
NoGradGuard::~NoGradGuard() { autograd::setGradEnabled(prev_); }

std::vector<Tensor> grad(const std::vector<Tensor> &outputs, const std::vector<Tensor> &inputs,
                         const std::vector<Tensor> &grad_outputs, bool retain_graph) {
  return autograd::runBackward(outputs, grad_outputs, retain_graph, &inputs, "grad");
}

Tensor &Tensor::requires_grad_(bool on) {
  if (!impl_) throw Error("requires_grad_: the Tensor is undefined (default-constructed)");
  autograd::AutogradMeta *m = impl_->autograd.get();
  if (m && m->gradFn) {
    if (on) return *this;
    throw Error("requires_grad_: only a leaf's flag can be changed, and this tensor is the "
                "result of " +
                std::string(opName(m->gradFn->op)) +
                "; use detach() for a tensor outside the graph");
  }
  if (on && !isFloating(dtype())) {
    throw Error("requires_grad_: only floating tensors can require gradients, got " +
                std::string(dtypeName(dtype())) + shapeStr(shape()) +
                "; convert it first, e.g. t.to(DType::f32)");
  }
  if (!m) {
    if (!on) return *this;
    impl_->autograd = std::make_shared<autograd::AutogradMeta>();
    m = impl_->autograd.get();
  }
  m->requiresGrad = on;
  return *this;
}

bool Tensor::requires_grad() const {
  const autograd::AutogradMeta *m = autograd::metaOf(*this);
  return m && m->requiresGrad;
}

bool Tensor::is_leaf() const {
  const autograd::AutogradMeta *m = autograd::metaOf(*this);
  return !m || !m->gradFn;
}

Tensor Tensor::grad() const {
  autograd::AutogradMeta *m = autograd::metaOf(*this);
  if (Tracer *tr = Tracer::current(); tr && m && tr->recordsAutograd())
    tr->gradAccess(*this, m, /*reads=*/true);
  return m ? m->grad : Tensor();
}

void Tensor::backward(const Tensor &grad, bool retain_graph) const {
  if (!impl_) throw Error("backward: the Tensor is undefined (default-constructed)");
  autograd::runBackward({*this}, {grad}, retain_graph, nullptr, "backward");
}

Tensor Tensor::detach() const {
  if (!impl_) return Tensor();
  return autograd::detachedHandle(*this);
}

} // namespace rcjit
