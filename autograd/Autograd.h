// The eager autograd tape: per-tensor metadata, recorded nodes, and the backward engine.
//
// A node is plain data (op kind, attrs, saved input/output values, one edge per input) so
// that the same gradient rules (GradRules.h) run on eager tensors here and on traced
// tensors when a joint forward+backward graph is built.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <rcjit/Tensor.h>

#include "tracer/AutogradHook.h"
#include "tracer/Graph.h"

namespace rcjit::autograd {

struct Node;

/// Where the gradient of one node input goes: the node that produced it, or the leaf it
/// is, or nowhere (the input does not require grad).
struct Edge {
  std::shared_ptr<Node> fn;
  std::shared_ptr<AutogradMeta> leaf;
  int index = 0; // with fn: which of its outputs the gradient belongs to
  bool valid() const { return fn || leaf; }
};

/// A node that is not one op: a compiled function's backward, run once for all of its
/// outputs' gradients (jit/autograd). Owned by its Node; called by the engine only.
class CustomBackward {
public:
  virtual ~CustomBackward() = default;
  /// For errors: "compiled function 3".
  virtual std::string name() const = 0;
  /// Whether backward() may add the gradient of input edge `input` into the one that reached
  /// that edge before it (a tied weight's gradient from its other use) in that gradient's
  /// own block, so that their sum needs no block of its own.
  virtual bool sumsInto(size_t input) const {
    (void)input;
    return false;
  }
  /// The gradient of each input edge (undefined where needs[i] is false or none flows),
  /// given the gradient of each output (undefined where none reached it). Without
  /// `retainGraph` the saved values are not needed again (release() follows), so the
  /// backward may free each as soon as it has used it. `sums[i]`, where sumsInto(i) and a
  /// gradient reached edge i before, is that gradient, moved out of the engine: a backward
  /// that adds its own into it in place returns it as edge i's gradient and leaves sums[i]
  /// undefined; one that does not leaves it, and the engine adds the two as usual.
  virtual std::vector<Tensor> backward(const std::vector<Tensor> &gradOutputs,
                                       const std::vector<bool> &needs, bool retainGraph,
                                       std::vector<Tensor> &sums) = 0;
  /// Frees what the backward saved (after a backward without retain_graph).
  virtual void release() = 0;
};

/// A value saved for backward, with the storage version it had when saved (copy_ bumps
/// it; a changed version at backward time is an Error). A value the op's rule does not read
/// (GradRules.h savedUse) is kept as a placeholder: a stride-0 view of one element with the
/// value's shape, dtype and device, so the value's own storage can be freed.
struct SavedValue {
  Tensor value; // a detached handle (no autograd metadata, so no reference cycles)
  uint32_t version = 0;
  bool placeholder = false;
};

/// One recorded op: out = op(inputs; attrs).
struct Node {
  OpKind op = OpKind::input;
  Attrs attrs;
  std::vector<SavedValue> inputs;
  SavedValue output;
  std::vector<Edge> next;                 // one per input
  uint64_t seq = 0;                       // creation order: inputs' nodes always have a smaller seq
  bool released = false;                  // saved values freed by a backward without retain_graph
  std::shared_ptr<CustomBackward> custom; // set: not an op; its backward runs instead

  Node() = default;
  Node(const Node &) = delete;
  Node &operator=(const Node &) = delete;
  /// Frees the chain of nodes only this one keeps alive without recursing (a graph of a
  /// million sequential ops must not overflow the stack).
  ~Node();
};

/// Records `out = op(in; a)` when grad mode is on and an input requires grad; does nothing
/// for non-floating results. The caller checks that no Tracer is active. The tensor runtime
/// reaches it through recordOnTape (tracer/AutogradHook.h), installed by Autograd.cpp.
void record(OpKind op, const std::vector<Tensor> &in, const Attrs &a, const Tensor &out);

/// Records a node computed by `fn` (a compiled function): outputs[k] becomes output k of one
/// node whose input edges are `inputs` (those that require grad). Floating outputs only.
void recordCustom(std::shared_ptr<CustomBackward> fn, const std::vector<Tensor> &inputs,
                  const std::vector<Tensor> &outputs);

/// The engine behind Tensor::backward and rcjit::grad. With `inputs` null, accumulates into
/// every reachable leaf's grad; otherwise returns the gradient of each of *inputs.
std::vector<Tensor> runBackward(const std::vector<Tensor> &roots,
                                const std::vector<Tensor> &rootGrads, bool retainGraph,
                                const std::vector<Tensor> *inputs, const char *caller);

/// A new handle on t's storage and geometry without autograd metadata.
Tensor detachedHandle(const Tensor &t);
/// Whether t's block is t's alone: no other handle on t, no view or tensor on its storage,
/// which t owns (not a from_blob), all of it but a tail of at most an eighth of t's bytes,
/// contiguous. Writing it in place then changes nothing anyone else can see, and keeping it
/// keeps little more than t alive.
bool ownsItsBlock(const Tensor &t);
/// Adds each row of `rows` into row ids[i] of `acc` in acc's own block (an embedding's
/// weight gradient summed into the gradient its weight got from another use) where acc may
/// be written there: held alone (ownsItsBlock), a host f32 or f64 tensor of shape `weight`
/// ([num, dim]) and of rows' dtype, no trace recording. Returns false, having done nothing,
/// otherwise.
bool scatterRowsInto(const Tensor &acc, const Shape &weight, const Tensor &rows, const Tensor &ids);
/// The op kinds of the nodes reachable from t's grad_fn (tests use it to check coverage).
std::vector<OpKind> graphOps(const Tensor &t);

} // namespace rcjit::autograd
