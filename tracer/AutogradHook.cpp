// The grad mode, a leaf's gradient, and the slot of the tape recorder that autograd installs.
#include "tracer/AutogradHook.h"

#include <atomic>

#include <rcjit/Error.h>

#include "tracer/Tracer.h"

namespace rcjit::autograd {

namespace {
thread_local bool tlsGradEnabled = true;
std::atomic<TapeRecorder> tapeRecorder{nullptr}; // constant-initialized: no load order
} // namespace

bool gradEnabled() { return tlsGradEnabled; }
void setGradEnabled(bool on) { tlsGradEnabled = on; }

AutogradMeta *metaOf(const Tensor &t) { return t.defined() ? t.impl()->autograd.get() : nullptr; }

void setGrad(const Tensor &leaf, const Tensor &grad) {
  AutogradMeta *m = metaOf(leaf);
  if (!m) {
    if (!grad.defined()) return;
    leaf.impl()->autograd = std::make_shared<AutogradMeta>();
    m = leaf.impl()->autograd.get();
  }
  if (Tracer *tr = Tracer::current(); tr && tr->recordsAutograd())
    tr->gradAccess(leaf, m, /*reads=*/false);
  m->grad = grad;
}

void installTapeRecorder(TapeRecorder recorder) {
  tapeRecorder.store(recorder, std::memory_order_release);
}

void recordOnTape(OpKind op, const std::vector<Tensor> &in, const Attrs &a, const Tensor &out) {
  TapeRecorder recorder = tapeRecorder.load(std::memory_order_acquire);
  if (!recorder) throw Error("internal: no autograd tape recorder is installed");
  recorder(op, in, a, out);
}

} // namespace rcjit::autograd
