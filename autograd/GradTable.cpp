// Which ops have a gradient and which forward values each rule reads (GradRules.h): switches
// over OpKind without default, so a new op must be classified in both.
#include <string>

#include <rcjit/Error.h>

#include "autograd/GradRules.h"

namespace rcjit::autograd {

GradKind gradKind(OpKind op) {
  switch (op) {
  case OpKind::input:
  case OpKind::full:
  case OpKind::arange:
  case OpKind::eq:
  case OpKind::ne:
  case OpKind::lt:
  case OpKind::le:
  case OpKind::gt:
  case OpKind::ge:
  case OpKind::argmax:
  case OpKind::check_target:
    return GradKind::none;
  case OpKind::linear_ce_pick_backward: // no higher-order gradients
    return GradKind::notImplemented;
  case OpKind::neg:
  case OpKind::abs:
  case OpKind::exp:
  case OpKind::log:
  case OpKind::sqrt:
  case OpKind::rsqrt:
  case OpKind::reciprocal:
  case OpKind::tanh:
  case OpKind::sigmoid:
  case OpKind::relu:
  case OpKind::gelu:
  case OpKind::silu:
  case OpKind::erf:
  case OpKind::sin:
  case OpKind::cos:
  case OpKind::cast:
  case OpKind::add:
  case OpKind::sub:
  case OpKind::mul:
  case OpKind::div:
  case OpKind::pow:
  case OpKind::maximum:
  case OpKind::minimum:
  case OpKind::where:
  case OpKind::sum:
  case OpKind::mean:
  case OpKind::amax:
  case OpKind::softmax:
  case OpKind::log_softmax:
  case OpKind::matmul:
  case OpKind::linear:
  case OpKind::layer_norm:
  case OpKind::rms_norm:
  case OpKind::embedding:
  case OpKind::conv2d:
  case OpKind::conv2d_backward_input:
  case OpKind::conv2d_backward_weight:
  case OpKind::embedding_backward:
  case OpKind::sdpa:
  case OpKind::linear_ce_pick:
  case OpKind::reshape:
  case OpKind::permute:
  case OpKind::expand:
  case OpKind::slice:
  case OpKind::cat:
  case OpKind::contiguous:
  case OpKind::all_reduce:
  case OpKind::all_gather:
  case OpKind::reduce_scatter:
  case OpKind::broadcast:
    return GradKind::differentiable;
  }
  throw Error("internal: unknown op in gradKind");
}

SavedUse savedUse(OpKind op) {
  constexpr uint32_t kAll = ~0u;
  switch (op) {
  case OpKind::input: // never recorded (sources, boolean and integer results)
  case OpKind::full:
  case OpKind::arange:
  case OpKind::eq:
  case OpKind::ne:
  case OpKind::lt:
  case OpKind::le:
  case OpKind::gt:
  case OpKind::ge:
  case OpKind::argmax:
  case OpKind::check_target:
  case OpKind::neg: // shapes only
  case OpKind::cast:
  case OpKind::add:
  case OpKind::sub:
  case OpKind::sum:
  case OpKind::mean:
  case OpKind::reshape:
  case OpKind::permute:
  case OpKind::expand:
  case OpKind::slice:
  case OpKind::cat:
  case OpKind::contiguous:
  case OpKind::all_gather: // collectives of the gradient
  case OpKind::reduce_scatter:
  case OpKind::broadcast:
    return {false, 0};
  case OpKind::all_reduce: // max reads where the maximum was (sum and mean need neither)
    return {true, 1u};
  case OpKind::exp: // the output only
  case OpKind::sqrt:
  case OpKind::rsqrt:
  case OpKind::reciprocal:
  case OpKind::tanh:
  case OpKind::sigmoid:
  case OpKind::softmax:
  case OpKind::log_softmax:
    return {true, 0};
  case OpKind::abs: // the first input only
  case OpKind::log:
  case OpKind::relu:
  case OpKind::gelu:
  case OpKind::silu:
  case OpKind::erf:
  case OpKind::sin:
  case OpKind::cos:
    return {false, 1u};
  case OpKind::where: // the condition
    return {false, 1u};
  case OpKind::embedding: // the ids
  case OpKind::embedding_backward:
    return {false, 2u};
  case OpKind::div: // b and the output
    return {true, 2u};
  case OpKind::pow:
  case OpKind::amax:
    return {true, kAll};
  case OpKind::linear: // x and w, not the bias
  case OpKind::layer_norm:
    return {false, 3u};
  case OpKind::mul:
  case OpKind::maximum:
  case OpKind::minimum:
  case OpKind::matmul:
  case OpKind::conv2d:
  case OpKind::conv2d_backward_input:
  case OpKind::conv2d_backward_weight:
  case OpKind::rms_norm:
  case OpKind::sdpa:
  case OpKind::linear_ce_pick: // x, w and the target: the backward recomputes the logits
  case OpKind::linear_ce_pick_backward:
    return {false, kAll};
  }
  throw Error("internal: unknown op in savedUse");
}

} // namespace rcjit::autograd
