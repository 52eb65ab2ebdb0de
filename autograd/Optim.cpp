// SGD, AdamW and clip_grad_norm_: in-place parameter updates written with the public ops
// (AdamW on dense CPU f32 parameters: one fused pass).
#include <rcjit/Optim.h>

#include <cmath>
#include <sstream>
#include <string>
#include <unordered_map>

#include <rcjit/Autograd.h>
#include <rcjit/Ops.h>

#include "autograd/Autograd.h"
#include "autograd/OptimOptions.h"
#include "support/ParallelFor.h"
#include "tracer/AutogradHook.h"
#include "tracer/TensorImpl.h"
#include "tracer/Tracer.h"

namespace rcjit::optim {

namespace {

void checkParams(const std::vector<Tensor> &params, const char *who) {
  std::unordered_map<const detail::TensorImpl *, size_t> seen;
  for (size_t i = 0; i < params.size(); ++i) {
    const Tensor &p = params[i];
    if (!p.defined()) {
      throw Error(std::string(who) + ": parameter " + std::to_string(i) + " is undefined");
    }
    if (!p.is_leaf() || !p.requires_grad()) {
      throw Error(std::string(who) + ": parameter " + std::to_string(i) + " (" +
                  std::string(dtypeName(p.dtype())) + shapeStr(p.shape()) +
                  ") must be a leaf that requires grad (requires_grad_(), or module.parameters())");
    }
    auto [it, fresh] = seen.emplace(p.impl().get(), i);
    if (!fresh) { // PyTorch: "some parameters appear in more than one parameter group"
      throw Error(std::string(who) + ": parameter " + std::to_string(i) + " (" +
                  std::string(dtypeName(p.dtype())) + shapeStr(p.shape()) +
                  ") is the same tensor as parameter " + std::to_string(it->second) +
                  ": list each parameter once (it would be updated twice per step)");
    }
  }
}

std::string valueStr(double v) {
  std::ostringstream s;
  s << v;
  return s.str();
}

[[noreturn]] void badOption(const char *who, const char *name, double v, const char *rule) {
  throw Error(std::string(who) + ": invalid " + name + " " + valueStr(v) + " (" + rule + ")");
}

void checkNonNegative(const char *who, const char *name, double v) {
  if (!(std::isfinite(v) && v >= 0)) badOption(who, name, v, "must be a finite number >= 0");
}

void checkBeta(const char *who, const char *name, double v) {
  if (!(v >= 0 && v < 1)) badOption(who, name, v, "must be in [0, 1)");
}

void clearGrads(const std::vector<Tensor> &params) {
  for (const Tensor &p : params) autograd::setGrad(p, Tensor());
}

DType stateDtype(const Tensor &p) { return p.dtype() == DType::f64 ? DType::f64 : DType::f32; }

// A CPU f32 parameter whose gradient and states are dense f32 too: the fused path applies.
bool fusable(const Tensor &p, const Tensor &g) {
  return p.device().is_cpu() && p.dtype() == DType::f32 && g.dtype() == DType::f32 &&
         g.device().is_cpu() && p.is_contiguous() && g.is_contiguous() && g.shape() == p.shape();
}

// Elements of the fused update per range of the work pool: a parameter below twice this
// (~32 K floats read or written, 7 per element) is updated on the calling thread alone.
constexpr int64_t kAdamWGrain = 2340;

// AdamW's update of one dense f32 parameter in one pass, with no temporaries (what
// PyTorch's fused AdamW does): the op-by-op formula below, element by element.
void adamwFused(float *w, const float *g, float *m, float *v, int64_t n, const AdamWOptions &o,
                double bc1, double bc2) {
  const float b1 = static_cast<float>(o.beta1), b2 = static_cast<float>(o.beta2);
  const float c1 = static_cast<float>(1 - o.beta1), c2 = static_cast<float>(1 - o.beta2);
  const float decay = static_cast<float>(1 - o.lr * o.weight_decay);
  const float stepSize = static_cast<float>(o.lr / bc1);
  const float sqrtBc2 = static_cast<float>(std::sqrt(bc2)), eps = static_cast<float>(o.eps);
  parallelForRanges(n, kAdamWGrain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const float mi = b1 * m[i] + c1 * g[i];
      const float vi = b2 * v[i] + c2 * (g[i] * g[i]);
      m[i] = mi;
      v[i] = vi;
      w[i] = w[i] * decay - stepSize * mi / (std::sqrt(vi) / sqrtBc2 + eps);
    }
  });
}

// A real (untraced) tensor, even when called inside a trace: optimizer state made on
// the first step, which a compiled step then reads and writes back.
Tensor realZeros(const Shape &shape, DType dtype, Device device) {
  TracerPause pause;
  NoGradGuard noGrad;
  return Tensor::zeros(shape, dtype, device);
}

Tensor scalarTensor(double v, Device device = Device::cpu()) {
  TracerPause pause;
  return Tensor::full({}, v, DType::f32, device);
}

void setScalar(Tensor &t, double v) {
  TracerPause pause;
  t.copy_(Tensor::full({}, v, t.dtype(), t.device()));
}

void setScalars(std::vector<Tensor> &ts, double v) {
  for (Tensor &t : ts) setScalar(t, v);
}

// The learning rate's scalar on `device`, made (a real tensor, even inside a trace) on
// first use: the update's ops take operands of one device. When a compiled set_lr(Tensor)
// writes the rates (inGraph), a new one inside a trace copies the CPU scalar's traced value.
const Tensor &lrOn(std::vector<Tensor> &lrs, Device device, double lr, bool inGraph) {
  for (const Tensor &t : lrs) {
    if (t.device() == device) return t;
  }
  lrs.push_back(scalarTensor(lr, device));
  if (inGraph && Tracer::current()) {
    NoGradGuard noGrad;
    lrs.back().copy_(lrs.front().to(device));
  }
  return lrs.back();
}

// What set_lr(Tensor) and clip_grads_with_norm_ take as a scalar: a one-element floating
// tensor.
bool oneFloating(const Tensor &t) { return t.defined() && t.numel() == 1 && isFloating(t.dtype()); }

// set_lr(double) while tracing: the compiled program would keep the number the trace saw.
void refuseHostLrInTrace(const char *who, double lr) {
  if (!Tracer::current()) return;
  throw Error(std::string(who) + "(" + valueStr(lr) +
              ") inside a compiled function: the compiled program would keep the rate the "
              "trace saw on every later call; call set_lr before the compiled function (its "
              "step reads the new rate without recompiling), or set the rate from a tensor "
              "inside it: set_lr(Tensor)");
}

// A one-element floating tensor as the learning rate: its value (eager), or, while tracing,
// the rate scalars' traced copy of it. Returns whether it was traced.
bool setLrFromTensor(std::vector<Tensor> &lrs, const Tensor &lr, const char *who) {
  if (!lr.defined()) throw Error(std::string(who) + ": the learning rate tensor is undefined");
  if (!oneFloating(lr)) {
    throw Error(std::string(who) +
                ": the learning rate must be a one-element floating tensor, got " +
                std::string(dtypeName(lr.dtype())) + shapeStr(lr.shape()));
  }
  if (!Tracer::current()) return false;
  NoGradGuard noGrad;
  Tensor value = lr.reshape({});
  for (Tensor &t : lrs) t.copy_(value.to(t.device()).to(t.dtype()));
  return true;
}

// set_lr(Tensor) of SGD and AdamW: traced into their rate scalars (from then on lr() reads
// them: inGraph), or, eagerly, the value read and given to set_lr(double).
void setLrTensor(Optimizer &o, std::vector<Tensor> &lrs, bool &inGraph, const Tensor &lr,
                 const char *who) {
  if (setLrFromTensor(lrs, lr, who)) {
    inGraph = true;
  } else {
    o.set_lr(lr.item());
  }
}

// The rate a compiled set_lr(Tensor) last wrote (the CPU scalar; a host read).
double readLr(const std::vector<Tensor> &lrs) {
  TracerPause pause;
  return lrs.front().item();
}

} // namespace

void checkLr(double lr, const char *who) { checkNonNegative(who, "lr", lr); }

void Optimizer::set_lr(const Tensor &lr) {
  if (!oneFloating(lr)) {
    throw Error(
        "Optimizer::set_lr: the learning rate must be a defined one-element floating tensor");
  }
  if (Tracer::current()) {
    throw Error("Optimizer::set_lr(Tensor) inside a compiled function: this optimizer does not "
                "trace its learning rate (SGD and AdamW do); set it before the compiled function");
  }
  set_lr(lr.item());
}

void checkOptions(const SGDOptions &o, const char *who) {
  checkLr(o.lr, who);
  checkNonNegative(who, "momentum", o.momentum);
  checkNonNegative(who, "weight_decay", o.weight_decay);
}

void checkOptions(const AdamWOptions &o, const char *who) {
  checkLr(o.lr, who);
  checkBeta(who, "beta1", o.beta1);
  checkBeta(who, "beta2", o.beta2);
  if (!(std::isfinite(o.eps) && o.eps > 0)) {
    badOption(who, "eps", o.eps, "must be a finite number > 0");
  }
  checkNonNegative(who, "weight_decay", o.weight_decay);
}

SGD::SGD(std::vector<Tensor> params, SGDOptions options)
    : params_(std::move(params)), momentum_(params_.size()),
      options_(options), lr_{scalarTensor(options.lr)} {
  checkOptions(options_, "SGD");
  checkParams(params_, "SGD");
}

void SGD::set_lr(double lr) {
  checkLr(lr, "SGD::set_lr");
  refuseHostLrInTrace("SGD::set_lr", lr);
  options_.lr = lr;
  setScalars(lr_, lr);
}

void SGD::set_lr(const Tensor &lr) { setLrTensor(*this, lr_, lrInGraph_, lr, "SGD::set_lr"); }

double SGD::lr() const { return lrInGraph_ ? readLr(lr_) : options_.lr; }

// The update written with the public ops on traced values: buffers and parameters are
// written in place (copy_), which the trace records as writes back.
void SGD::tracedStep() {
  NoGradGuard noGrad;
  for (size_t i = 0; i < params_.size(); ++i) {
    Tensor &p = params_[i];
    Tensor g = p.grad();
    if (!g.defined()) continue;
    if (options_.weight_decay != 0) g = g + options_.weight_decay * p;
    if (options_.momentum != 0) {
      Tensor &buf = momentum_[i];
      if (!buf.defined()) { // the first step's buffer is g: momentum * 0 + g
        buf = realZeros(p.shape(), g.dtype(), p.device());
      }
      Tensor next = options_.momentum * buf + g;
      buf.copy_(next);
      g = next;
    }
    p.copy_(p - lrOn(lr_, p.device(), options_.lr, lrInGraph_).to(p.dtype()) * g);
  }
}

void SGD::step() {
  if (Tracer::current()) return tracedStep();
  NoGradGuard noGrad;
  const double lr = this->lr(); // a compiled set_lr(Tensor) may have written it
  for (size_t i = 0; i < params_.size(); ++i) {
    Tensor &p = params_[i];
    Tensor g = p.grad();
    if (!g.defined()) continue;
    if (options_.weight_decay != 0) g = g + options_.weight_decay * p;
    if (options_.momentum != 0) {
      Tensor &buf = momentum_[i];
      if (buf.defined()) {
        buf.copy_(options_.momentum * buf + g); // in place: compiled steps hold buf
      } else {
        buf = g.clone();
      }
      g = buf;
    }
    p.copy_(p - lr * g);
  }
}

void SGD::zero_grad() { clearGrads(params_); }

AdamW::AdamW(std::vector<Tensor> params, AdamWOptions options)
    : params_(std::move(params)), state_(params_.size()),
      options_(options), lr_{scalarTensor(options.lr)} {
  checkOptions(options_, "AdamW");
  checkParams(params_, "AdamW");
}

void AdamW::set_lr(double lr) {
  checkLr(lr, "AdamW::set_lr");
  refuseHostLrInTrace("AdamW::set_lr", lr);
  options_.lr = lr;
  setScalars(lr_, lr);
}

void AdamW::set_lr(const Tensor &lr) { setLrTensor(*this, lr_, lrInGraph_, lr, "AdamW::set_lr"); }

double AdamW::lr() const { return lrInGraph_ ? readLr(lr_) : options_.lr; }

// A parameter's state before its first step: zero moments and a zero count, real tensors
// even inside a trace (a compiled step reads and writes them back).
void AdamW::initState(State &s, const Tensor &p) {
  if (!s.m.defined()) {
    s.m = realZeros(p.shape(), stateDtype(p), p.device());
    s.v = realZeros(p.shape(), stateDtype(p), p.device());
  }
  if (!s.steps.defined()) s.steps = scalarTensor(0);
}

// The update written with the public ops on traced values, with the step count and the
// learning rate as tensors (so a compiled step serves every step): m, v, the count and
// the parameter are written in place (copy_), which the trace records as writes back.
void AdamW::tracedStep() {
  NoGradGuard noGrad;
  const AdamWOptions &o = options_;
  for (size_t i = 0; i < params_.size(); ++i) {
    Tensor &p = params_[i];
    Tensor grad = p.grad();
    if (!grad.defined()) continue;
    State &s = state_[i];
    const DType dt = stateDtype(p);
    initState(s, p);
    if (s.steps.device() != p.device()) { // the count on the parameter's device, for its ops
      TracerPause pause;
      s.steps = s.steps.to(p.device());
    }
    Tensor t = s.steps + 1.0;
    Tensor g = grad.to(dt), w = p.to(dt), lr = lrOn(lr_, p.device(), o.lr, lrInGraph_).to(dt);
    Tensor m = o.beta1 * s.m + (1 - o.beta1) * g;
    Tensor v = o.beta2 * s.v + (1 - o.beta2) * (g * g);
    Tensor bc1 = 1.0 - pow(o.beta1, t.to(dt)), bc2 = 1.0 - pow(o.beta2, t.to(dt));
    Tensor denom = sqrt(v) / sqrt(bc2) + o.eps;
    Tensor updated = w * (1.0 - lr * o.weight_decay) - (lr / bc1) * m / denom;
    s.m.copy_(m);
    s.v.copy_(v);
    s.steps.copy_(t);
    p.copy_(updated);
  }
}

void AdamW::step() {
  if (Tracer::current()) return tracedStep();
  NoGradGuard noGrad;
  AdamWOptions o = options_;
  o.lr = lr(); // a compiled set_lr(Tensor) may have written it
  for (size_t i = 0; i < params_.size(); ++i) {
    Tensor &p = params_[i];
    Tensor grad = p.grad();
    if (!grad.defined()) continue;
    State &s = state_[i];
    const DType dt = stateDtype(p);
    initState(s, p);
    const double t = s.steps.item() + 1;
    setScalar(s.steps, t);
    if (fusable(p, grad)) {
      const double bc1 = 1 - std::pow(o.beta1, t), bc2 = 1 - std::pow(o.beta2, t);
      adamwFused(static_cast<float *>(p.data_ptr()), static_cast<const float *>(grad.data_ptr()),
                 static_cast<float *>(s.m.data_ptr()), static_cast<float *>(s.v.data_ptr()),
                 p.numel(), o, bc1, bc2);
      p.impl()->storage->version.fetch_add(1, std::memory_order_relaxed); // as copy_ does
      continue;
    }
    Tensor g = grad.to(dt), w = p.to(dt);
    s.m.copy_(o.beta1 * s.m + (1 - o.beta1) * g); // in place: compiled steps hold s.m
    s.v.copy_(o.beta2 * s.v + (1 - o.beta2) * (g * g));
    const double bc1 = 1 - std::pow(o.beta1, t), bc2 = 1 - std::pow(o.beta2, t);
    Tensor denom = sqrt(s.v) / std::sqrt(bc2) + o.eps;
    Tensor updated = w * (1 - o.lr * o.weight_decay) - (o.lr / bc1) * s.m / denom;
    p.copy_(updated);
  }
}

void AdamW::zero_grad() { clearGrads(params_); }

} // namespace rcjit::optim

namespace rcjit {

namespace {

constexpr int64_t kClipChunk = int64_t{1} << 18; // elements per eager chunk (4 MiB in f64 squares)

// The sum of t's squares in f64, a scalar tensor. Eagerly in chunks of 256 K elements, so no
// f64 copy of a large gradient exists at once; traced as one reduction (the compiled kernel
// casts as it reads).
Tensor sumOfSquares(const Tensor &t) {
  if (Tracer::current() || t.numel() <= kClipChunk) {
    Tensor t64 = t.to(DType::f64);
    return sum(t64 * t64);
  }
  Tensor flat = reshape(t, {-1}), total;
  for (int64_t at = 0; at < t.numel(); at += kClipChunk) {
    Tensor c = slice(flat, 0, at, std::min(t.numel(), at + kClipChunk)).to(DType::f64);
    Tensor sq = sum(c * c);
    total = total.defined() ? total + sq : sq;
  }
  return total;
}

// p's gradient times `coef` (a scalar tensor): eagerly, where the gradient's block is its own
// (no one holds it), written there chunk by chunk, so clipping makes no second copy of a
// large gradient; else a new gradient (traced, or a gradient someone holds keeps its value).
void scaleGrad(const Tensor &p, const Tensor &coef) {
  const Tensor &slot = p.impl()->autograd->grad;
  const Tensor c = coef.to(slot.dtype()).to(slot.device());
  if (Tracer::current() || !slot.device().is_cpu() || !autograd::ownsItsBlock(slot)) {
    autograd::setGrad(p, slot * c);
    return;
  }
  Tensor flat = reshape(slot, {-1});
  for (int64_t at = 0; at < flat.numel(); at += kClipChunk) {
    Tensor chunk = slice(flat, 0, at, std::min(flat.numel(), at + kClipChunk));
    chunk.copy_(chunk * c);
  }
}

bool hasGrad(const Tensor &p) { return p.defined() && p.grad().defined(); }

} // namespace

Tensor get_total_norm(const std::vector<Tensor> &tensors) {
  NoGradGuard noGrad;
  Tensor total;
  for (const Tensor &t : tensors) {
    if (!t.defined()) continue;
    Tensor sq = sumOfSquares(t);
    total = total.defined() ? total + sq : sq;
  }
  return total.defined() ? sqrt(total) : Tensor::zeros({}, DType::f64);
}

std::vector<Tensor> grads_of(const std::vector<Tensor> &params) {
  std::vector<Tensor> out;
  for (const Tensor &p : params) {
    if (hasGrad(p)) out.push_back(p.grad());
  }
  return out;
}

void clip_grads_with_norm_(const std::vector<Tensor> &params, double max_norm,
                           const Tensor &total_norm) {
  if (!(std::isfinite(max_norm) && max_norm > 0)) {
    throw Error("clip_grads_with_norm_: max_norm " + optim::valueStr(max_norm) +
                " is not a finite number > 0");
  }
  if (!optim::oneFloating(total_norm)) {
    throw Error("clip_grads_with_norm_: total_norm must be a one-element floating tensor "
                "(get_total_norm's result)");
  }
  NoGradGuard noGrad;
  Tensor coef = minimum(max_norm / (total_norm.reshape({}).to(DType::f64) + 1e-6), 1.0);
  for (const Tensor &p : params) {
    if (hasGrad(p)) scaleGrad(p, coef);
  }
}

double clip_grad_norm_(const std::vector<Tensor> &params, double max_norm) {
  NoGradGuard noGrad;
  double total = 0;
  for (const Tensor &p : params) {
    if (hasGrad(p)) total += sumOfSquares(p.grad()).item();
  }
  total = std::sqrt(total);
  const double coef = max_norm / (total + 1e-6);
  if (coef < 1) {
    const Tensor c = Tensor::full({}, coef, DType::f64);
    for (const Tensor &p : params) {
      if (hasGrad(p)) scaleGrad(p, c);
    }
  }
  return total;
}

} // namespace rcjit
