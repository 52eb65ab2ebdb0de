// Eager autograd: grad mode, NoGradGuard and rcjit::grad (Tensor holds the per-tensor API).
//
// Every op run with grad mode on and an input that requires grad records a node (op,
// attributes, the values its gradient rule reads) on its result; backward() and grad()
// run the rules of autograd/GradRules.h over those nodes in reverse order. Grad mode is
// per thread and on by default. Inside a traced (compiled) function nothing is recorded.
#pragma once
#include <vector>

#include <rcjit/Tensor.h>

namespace rcjit {

/// Whether ops on this thread record gradients now.
bool is_grad_enabled();

/// RAII: nothing run on this thread while it lives records a gradient (inference, optimizer
/// updates). Nests; restores the previous mode on destruction.
struct NoGradGuard {
  NoGradGuard();
  ~NoGradGuard();
  NoGradGuard(const NoGradGuard &) = delete;
  NoGradGuard &operator=(const NoGradGuard &) = delete;

private:
  bool prev_;
};

/// Gradients of sum(outputs[i] * grad_outputs[i]) with respect to each of `inputs` (leaves
/// or intermediate results), without touching any tensor's grad(). grad_outputs may be
/// empty when every output has one element. An input the outputs do not depend on gets an
/// undefined Tensor. The graph's saved values are freed unless retain_graph is true.
std::vector<Tensor> grad(const std::vector<Tensor> &outputs, const std::vector<Tensor> &inputs,
                         const std::vector<Tensor> &grad_outputs = {}, bool retain_graph = false);

} // namespace rcjit
