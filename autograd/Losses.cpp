// Losses composed of public ops (so they fuse when compiled and differentiate by the rules).
#include <cmath>
#include <string>
#include <vector>

#include <rcjit/Ops.h>

#include "support/Env.h"
#include "tracer/Autocast.h"
#include "tracer/OpsInternal.h"
#include "tracer/Tracer.h"

namespace rcjit {

namespace {

// Every target a class index or ignore_index, else an Error: the check_target op, so that a
// compiled loss checks the real data on every call (a host step; on targets without host
// steps the op is dropped and an out-of-range target makes the loss NaN, below).
Tensor checkedTarget(const Tensor &target, int64_t classes, int64_t ignoreIndex) {
  Attrs a;
  a.dims = {classes, ignoreIndex};
  return detail::applyOp(OpKind::check_target, {target}, a);
}

// Classes from which a traced cross_entropy over linear(x, w)'s f32 logits computes
// log_softmax(logits)[target] with linear_ce_pick (row chunks, no [rows, classes] logits
// or their gradient held), when turned on: RCJIT_FUSED_LINEAR_CE=1 or
// detail::setFusedLinearCe(true). Off by default: it saves memory, but measured no faster
// (docs/performance.md, "The fused LM head").
constexpr int64_t kFusedLinearCeMinClasses = 4096;

int &fusedLinearCeSetting() { // -1: not set, read the environment
  static int setting = -1;
  return setting;
}

bool fusedLinearCeEnabled() {
  if (fusedLinearCeSetting() >= 0) return fusedLinearCeSetting() == 1;
  return envFlag("RCJIT_FUSED_LINEAR_CE", false);
}

// log_softmax(logits)[target] per row through linear_ce_pick when `logits` is a traced
// linear(x, w) (no bias) of f32 CPU tensors over a large class count; undefined otherwise.
// The linear itself stays in the graph and is dropped as dead code when nothing else reads
// the logits.
Tensor fusedPick(const Tensor &logits, const Tensor &t, int64_t classes) {
  Tracer *tr = Tracer::current();
  if (!tr || classes < kFusedLinearCeMinClasses || logits.dtype() != DType::f32 ||
      !logits.device().is_cpu() || !fusedLinearCeEnabled()) {
    return Tensor();
  }
  OpKind op = OpKind::input;
  std::vector<Tensor> in;
  if (!tr->producer(logits, op, in) || op != OpKind::linear || in.size() != 2 ||
      in[0].dtype() != DType::f32 || in[1].dtype() != DType::f32) {
    return Tensor();
  }
  return detail::linearCePick(in[0], in[1], t);
}

} // namespace

namespace detail {
bool setFusedLinearCe(bool on) {
  const bool was = fusedLinearCeEnabled();
  fusedLinearCeSetting() = on ? 1 : 0;
  return was;
}
} // namespace detail

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
  const Tensor t = checkedTarget(target, classes, ignore_index);
  Tensor picked = fusedPick(logitsIn, t, classes);
  if (!picked.defined()) {
    Tensor logp = log_softmax(logits, -1);
    Tensor oneHot = eq(Tensor::arange(classes, DType::i64, logits.device()), unsqueeze(t, -1));
    picked = sum(where(oneHot, logp, 0.0), {-1});
  }
  Tensor valid = ne(t, ignore_index);
  // where (not a multiply by the mask): ignored targets get an exact 0 gradient, even when
  // every target is ignored and the loss is 0/0. A target the check let through out of
  // range (a target without host steps) makes the loss NaN instead of a silent 0.
  Tensor inRange = where(ge(t, 0), lt(t, classes), ge(t, 0));
  Tensor nll = where(valid, where(inRange, -picked, std::nan("")), 0.0);
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
