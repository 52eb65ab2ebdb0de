// The tracer: runs a C++ function once on real tensors and records every op into a Graph.
//
// Tracing runs the ops eagerly (so values are real and a host read just works) while a
// thread-local Tracer records them. Arguments and every tensor the function reads without
// creating it (module parameters, captured tensors) become Input nodes; module calls and
// rcjit::region bodies become Regions; item()/to_vector() on a traced value is recorded
// as a graph break.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include <rcjit/Tensor.h>

#include "tracer/Graph.h"

namespace rcjit {

namespace nn {
class ModuleBase;
}

/// A host read of a traced value: where the trace would have to split.
struct GraphBreak {
  std::string op;   // "item", "to_vector"
  int node = -1;    // the value read
  std::string file; // where the read was called (last path component; "" when unknown)
  int line = 0;
  int readRegion = -1; // the module region whose forward made the read (-1: none)
};

namespace autograd {
struct AutogradMeta;
}

/// A write the traced function made to a tensor it did not create: Tensor::copy_ (an
/// optimizer step's update of a parameter or of its state), or backward() (and zero_grad)
/// setting a leaf's grad(). Compiled code computes the new value as an extra output, and
/// each call writes it back.
struct Mutation {
  enum class Kind { data, grad };
  Kind kind = Kind::data;
  Tensor target;   // the real tensor written (data), or the leaf whose grad() is set (grad)
  int output = -1; // index into graph.outputs; -1: grad() becomes undefined (zero_grad)
};

/// A leaf whose grad() the traced function read before setting it (accumulation): whether
/// it was defined then is part of what the trace assumed.
struct GradGuard {
  Tensor leaf;
  bool defined = false;
  int captured = -1; // the captured input that is that grad (when defined), or -1
};

/// The result of tracing a function.
struct Trace {
  Graph graph;
  std::vector<Tensor> args;     // bound to input nodes with InputKind::arg, by inputIndex
  std::vector<Tensor> captured; // bound to input nodes with InputKind::captured
  /// For each captured tensor, the registered module parameter it was read from (so later
  /// calls can read the parameter's current value), or nullptr.
  std::vector<Tensor *> capturedSlots;
  std::vector<Tensor> outputs; // the eager values of the function's outputs
  std::vector<GraphBreak> breaks;
  /// Writes to tensors the function did not create (their values are the graph outputs
  /// after the function's own, outputs.size() of them) and what they assumed.
  std::vector<Mutation> mutations;
  std::vector<GradGuard> gradGuards;
  bool backward = false; // backward() or grad() ran inside the function
  /// A whole training step (or any function that writes tensors it did not create).
  bool mutates() const { return backward || !mutations.empty(); }
};

using TracedFn = std::function<std::vector<Tensor>(const std::vector<Tensor> &)>;

/// Thrown out of a meta trace when the function reads a traced value on the host: the
/// value does not exist, so the caller traces again with real values.
struct MetaTraceAbort {
  std::string op;
};

/// Traces fn(args). With `meta`, ops compute only dtypes and shapes (their results have
/// storage but uninitialized contents), which makes tracing nearly free; the outputs are
/// then not values, and a host read of a traced value throws MetaTraceAbort. Exceptions
/// from fn propagate after tracing is switched off. With `autograd`, ops on values that
/// require grad also record autograd nodes (with grad mode on), so that backward() inside
/// fn traces the backward into the same graph, and writes to tensors fn did not create
/// (copy_, a leaf's grad) become Trace::mutations; every leaf's grad() is restored after.
Trace traceFunction(const TracedFn &fn, const std::vector<Tensor> &args, bool meta = false,
                    bool autograd = false);

class Tracer;

/// Switches this thread's tracer off for its lifetime: ops run eagerly and record autograd
/// nodes as untraced code does (a segment replayed with gradients inside a segmented run).
class TracerPause {
public:
  TracerPause();
  ~TracerPause();
  TracerPause(const TracerPause &) = delete;
  TracerPause &operator=(const TracerPause &) = delete;

private:
  Tracer *previous_;
};

/// A finished piece of a segmented trace: a graph over real inputs whose outputs are
/// still pending (meta) tensors that the caller must fill with real values.
struct Segment {
  Graph graph;
  std::vector<Tensor> inputs;  // bound like Trace: args (none here) then captured
  std::vector<Tensor> pending; // one per graph output: the tensor to fill
};

/// Called at each host read of a pending value and when the function returns: must
/// compute the segment and fill its pending tensors.
using SegmentFlush = std::function<void(Segment &)>;

/// Runs fn(args) with ops recorded on shapes only; at every host read of a pending value,
/// and at the end, the graph recorded so far is handed to `flush` (which compiles or reuses
/// code for it and fills the pending tensors with real values), and recording starts a new
/// graph. Returns fn's outputs, all real. This is how a function with graph breaks runs
/// compiled code: its C++ runs on every call and decides the path.
std::vector<Tensor> runSegmented(const TracedFn &fn, const std::vector<Tensor> &args,
                                 const SegmentFlush &flush);

/// The recorder behind traceFunction; one per tracing thread.
class Tracer {
public:
  /// The tracer active on this thread, or nullptr (the common, fast case).
  static Tracer *current();

  /// Records an op whose eager result is `out`.
  void record(OpKind op, const std::vector<Tensor> &in, const Attrs &a, const Tensor &out);
  /// Records a source op (full, arange) with no inputs.
  void recordSource(OpKind op, const Attrs &a, const Tensor &out);
  void beginRegion(std::string name, std::string type, bool inList, const nn::ModuleBase *module);
  void endRegion();
  /// Called by host reads; records a break when `t` is a traced value (in a meta trace,
  /// throws MetaTraceAbort when `t` is an op's result).
  /// `where`: the caller of the host read (an empty file_name() when unknown).
  void hostRead(const char *op, const Tensor &t, const std::source_location &where);
  /// Whether ops should skip computing values (a meta trace).
  bool meta() const { return meta_; }
  /// Whether results of a meta trace need memory: a segmented run writes each segment's
  /// values into them; a shape-only trace never reads them.
  bool metaStorage() const { return flush_ != nullptr; }
  /// Whether ops record autograd nodes too (traceFunction's `autograd`).
  bool recordsAutograd() const { return autograd_; }
  /// `target.copy_(value)` inside the trace: later reads of target see value, and (for a
  /// tensor the function did not create) the write becomes a Mutation. Throws rcjit::Error
  /// for a destination it cannot write back (an argument, a view, a segmented run).
  void mutate(const Tensor &target, const Tensor &value);
  /// A leaf's grad() is about to be read (`reads`) or set by autograd inside the trace;
  /// `leaf` may be undefined when only its autograd state `m` is known.
  void gradAccess(const Tensor &leaf, autograd::AutogradMeta *m, bool reads);
  /// Whether `t` is a value of this trace (an input or an op's result).
  bool knows(const Tensor &t) const { return ids_.count(t.impl().get()) > 0; }
  /// The op that produced `t` in this trace and its input values; false for an input or a
  /// value this trace did not make (cross_entropy looks for the linear of its logits).
  bool producer(const Tensor &t, OpKind &op, std::vector<Tensor> &inputs) const;
  /// backward() or grad() ran inside the trace.
  void noteBackward() { trace_.backward = true; }

private:
  friend Trace traceFunction(const TracedFn &, const std::vector<Tensor> &, bool, bool);
  friend std::vector<Tensor> runSegmented(const TracedFn &, const std::vector<Tensor> &,
                                          const SegmentFlush &);
  /// Ends the current segment: its graph, with every pending result still referenced
  /// outside the tracer (and `mustOutput`) as outputs; then starts an empty graph.
  Segment takeSegment(const std::vector<Tensor> &mustOutput);
  int valueOf(const Tensor &t); // the node of t, adding a captured input when unknown
  std::string parameterName(const Tensor &t, Tensor **slot) const;
  // Ends an autograd trace: the mutations' values become outputs, grads are restored.
  void finishMutations();

  struct GradState {
    Tensor leaf;
    Tensor original;        // grad() before the trace, restored after
    bool firstRead = false; // read before anything in the trace set it
  };

  Trace trace_;
  std::unordered_map<const void *, int> ids_; // TensorImpl* -> node
  std::vector<Tensor> keepAlive_;             // so TensorImpl addresses are not reused
  std::vector<int> regionStack_;
  std::vector<const nn::ModuleBase *> moduleStack_;
  bool meta_ = false;
  bool autograd_ = false;
  const SegmentFlush *flush_ = nullptr;            // segmented runs only
  std::vector<std::pair<Tensor, int>> dataWrites_; // written real tensor -> node of its value
  // storage -> (node, tensor) of every value seen: another handle on the same storage with
  // the same geometry (autograd's saved, detached handles) is the same value
  std::unordered_multimap<const void *, std::pair<int, Tensor>> byStorage_;
  void remember(const Tensor &t, int node);
  std::vector<std::pair<autograd::AutogradMeta *, GradState>> grads_; // in first-touch order
};

} // namespace rcjit
