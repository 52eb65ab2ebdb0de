// What the tensor runtime knows of autograd: a tensor's autograd state, the thread's grad
// mode, and the tape recorder, a hook that autograd/Autograd.cpp installs.
//
// Why a hook: the ops (tracer/Ops.cpp) record a tape node for every op whose input requires
// grad, but the tape, its nodes and the backward engine live in autograd/, a layer above.
// The runtime declares what it calls here; autograd installs the recorder when librcjit.so
// loads (both are in that library, so the recorder is in place before any code outside the
// library runs). Only autograd/ makes a tensor that requires grad (requires_grad_, record,
// recordCustom), so no op can reach the recorder before autograd exists.
#pragma once
#include <memory>
#include <vector>

#include <rcjit/Tensor.h>

#include "tracer/Graph.h"
#include "tracer/TensorImpl.h"

namespace rcjit::autograd {

struct Node; // autograd/Autograd.h

/// What autograd keeps on a TensorImpl. Leaves (gradFn null) accumulate `grad`.
struct AutogradMeta {
  bool requiresGrad = false;
  std::shared_ptr<Node> gradFn; // the node that produced this tensor; null for a leaf
  int outputIndex = 0;          // which output of gradFn it is (compiled functions have many)
  Tensor grad;                  // accumulated gradient of a leaf
};

/// The thread's grad mode (on by default). Thread-local: each thread has its own.
bool gradEnabled();
void setGradEnabled(bool on);

/// True when some input requires grad (the one check an op pays when grad mode is on).
inline bool anyRequiresGrad(const std::vector<Tensor> &in) {
  for (const Tensor &t : in) {
    const auto &m = t.impl()->autograd;
    if (m && m->requiresGrad) return true;
  }
  return false;
}

/// The autograd metadata of t (owned by t's impl), or null.
AutogradMeta *metaOf(const Tensor &t);
/// Replaces a leaf's accumulated gradient (undefined clears it). Used by zero_grad and
/// the optimizers; inside an autograd trace the tracer sees the write.
void setGrad(const Tensor &leaf, const Tensor &grad);

/// Records `out = op(in; a)` on the autograd tape (autograd::record).
using TapeRecorder = void (*)(OpKind op, const std::vector<Tensor> &in, const Attrs &a,
                              const Tensor &out);
/// Installs the tape recorder (autograd/Autograd.cpp, once, at library load). Thread-safe.
void installTapeRecorder(TapeRecorder recorder);
/// Records through the installed recorder: what the ops call when grad mode is on and an
/// input requires grad (the caller checks both, and that no Tracer is active unless it
/// records autograd). Throws rcjit::Error when no recorder is installed (a broken build).
void recordOnTape(OpKind op, const std::vector<Tensor> &in, const Attrs &a, const Tensor &out);

} // namespace rcjit::autograd
