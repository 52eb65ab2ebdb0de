// Losses composed of public ops (so they fuse when compiled and differentiate by the rules).
#include <string>

#include <rcjit/Ops.h>

#include "tracer/Autocast.h"
#include "tracer/Tracer.h"

namespace rcjit {

namespace {

// Eagerly on the CPU: every target is a class index or ignore_index (a host read, so not
// while tracing, where it would break the graph).
void checkTargets(const Tensor &target, int64_t classes, int64_t ignoreIndex) {
  if (Tracer::current() || !target.device().is_cpu()) return;
  for (int64_t v : target.to_vector<int64_t>()) {
    if (v != ignoreIndex && (v < 0 || v >= classes)) {
      throw Error("cross_entropy: target " + std::to_string(v) + " is out of range for " +
                  std::to_string(classes) + " classes (expected [0, " +
                  std::to_string(classes - 1) + "] or ignore_index " + std::to_string(ignoreIndex) +
                  ")");
    }
  }
}

} // namespace

Tensor cross_entropy(const Tensor &logitsIn, const Tensor &target, int64_t ignore_index) {
  if (!logitsIn.defined() || !target.defined()) {
    throw Error("cross_entropy: logits and target must be defined Tensors");
  }
  const Tensor logits = detail::autocastToF32(logitsIn); // a loss is f32 under autocast
  if (logits.dim() < 1 || !isFloating(logits.dtype())) {
    throw Error("cross_entropy: logits must be floating [..., C], got " +
                std::string(dtypeName(logits.dtype())) + shapeStr(logits.shape()));
  }
  if (!isIntegral(target.dtype())) {
    throw Error("cross_entropy: target must hold class indices (i32 or i64), got " +
                std::string(dtypeName(target.dtype())) + shapeStr(target.shape()));
  }
  Shape batch(logits.shape().begin(), logits.shape().end() - 1);
  if (target.shape() != batch) {
    throw Error("cross_entropy: target shape " + shapeStr(target.shape()) +
                " must be the logits' shape without the class dim, " + shapeStr(batch) +
                " (logits " + shapeStr(logits.shape()) + ")");
  }
  const int64_t classes = logits.size(-1);
  checkTargets(target, classes, ignore_index);
  Tensor logp = log_softmax(logits, -1);
  Tensor oneHot = eq(Tensor::arange(classes, DType::i64, logits.device()), unsqueeze(target, -1));
  Tensor picked = sum(where(oneHot, logp, 0.0), {-1});
  Tensor valid = ne(target, ignore_index);
  // where (not a multiply by the mask): ignored targets get an exact 0 gradient, even when
  // every target is ignored and the loss is 0/0.
  Tensor nll = where(valid, -picked, 0.0);
  const DType acc = logits.dtype() == DType::f64 ? DType::f64 : DType::f32;
  Tensor loss = sum(nll.to(acc)) / sum(valid).to(acc);
  return loss.to(logits.dtype());
}

Tensor mse_loss(const Tensor &input, const Tensor &target) {
  if (!input.defined() || !target.defined()) {
    throw Error("mse_loss: input and target must be defined Tensors");
  }
  // a loss is f32 under autocast
  Tensor d = detail::autocastToF32(input) - detail::autocastToF32(target);
  return mean(d * d);
}

} // namespace rcjit
