// The one table of gradient rules: a vector-Jacobian product (or "no gradient") per op.
//
// Rules are written with the public Tensor ops only, so they run on eager tensors (the
// eager tape, Autograd.cpp) and on traced tensors alike: run under a Tracer they record
// the backward graph's nodes (how a joint forward+backward graph is built).
#pragma once
#include <cstdint>
#include <vector>

#include <rcjit/Tensor.h>

#include "tracer/Graph.h"

namespace rcjit::autograd {

/// Whether an op has a gradient. Every OpKind is classified (a switch without default).
enum class GradKind {
  differentiable, // has a rule in applyGradRule
  none,           // no gradient flows through it (sources, comparisons, argmax)
  notImplemented, // differentiable in principle; its rule raises an Error for now
};
GradKind gradKind(OpKind op);

/// Which forward values `op`'s rule reads (the others it uses only for their shape, dtype
/// and device). The eager tape keeps just these alive. Every OpKind is classified.
struct SavedUse {
  bool output = false;
  uint32_t inputs = 0; // bit i: input i's values
  bool input(size_t i) const { return i < 32 && (inputs >> i & 1u); }
};
SavedUse savedUse(OpKind op);

/// The gradients of `op`'s inputs given the gradient of its output: `inputs` and `output`
/// are the forward values (real or traced), `gradOutput` has the output's shape, and
/// needsGrad[i] says whether input i wants one. Returns one Tensor per input: undefined
/// where not needed or not differentiable, otherwise of that input's shape and dtype
/// (broadcasting is undone here, once, with sumToShape). Throws rcjit::Error for an op
/// whose gradient is not implemented.
std::vector<Tensor> applyGradRule(OpKind op, const Attrs &attrs, const std::vector<Tensor> &inputs,
                                  const Tensor &output, const Tensor &gradOutput,
                                  const std::vector<bool> &needsGrad);

/// Sums `grad` over the dims that broadcasting added or expanded so it has `shape`.
Tensor sumToShape(const Tensor &grad, const Shape &shape);

} // namespace rcjit::autograd
