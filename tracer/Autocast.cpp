// rcjit::Autocast: a per-thread reduced dtype, and the cast policy applyOp consults.
#include "tracer/Autocast.h"

#include <string>

#include <rcjit/Error.h>

#include "tracer/OpsInternal.h"

namespace rcjit {

namespace {
thread_local int tlsAutocast = -1; // -1: off; else the DType's value

std::optional<DType> fromCode(int code) {
  if (code < 0) return std::nullopt;
  return static_cast<DType>(code);
}

int checkedCode(DType dtype) {
  if (dtype != DType::bf16 && dtype != DType::f16) {
    throw Error("Autocast: dtype " + std::string(dtypeName(dtype)) +
                " is not a reduced-precision float (use bf16 or f16)");
  }
  return static_cast<int>(dtype);
}

enum class Rule { none, lower, f32 };

Rule ruleOf(OpKind op) {
  switch (op) {
  case OpKind::matmul:
  case OpKind::linear:
  case OpKind::conv2d:
  case OpKind::sdpa:
    return Rule::lower;
  case OpKind::softmax:
  case OpKind::log_softmax:
  case OpKind::layer_norm:
  case OpKind::rms_norm:
  case OpKind::sum:
  case OpKind::mean:
    return Rule::f32;
  default:
    return Rule::none;
  }
}

bool reduced(DType t) { return t == DType::bf16 || t == DType::f16; }
} // namespace

Autocast::Autocast(DType dtype) : Autocast(dtype, true) {}

Autocast::Autocast(DType dtype, bool enabled) : prev_(fromCode(tlsAutocast)) {
  const int code = checkedCode(dtype); // validated even when disabled
  tlsAutocast = enabled ? code : -1;
}

Autocast::~Autocast() { tlsAutocast = prev_ ? static_cast<int>(*prev_) : -1; }

std::optional<DType> autocast_dtype() { return fromCode(tlsAutocast); }

namespace detail {

int autocastCode() { return tlsAutocast; }

bool autocastInputs(OpKind op, std::vector<Tensor> &in) {
  if (tlsAutocast < 0) return false;
  const Rule rule = ruleOf(op);
  if (rule == Rule::none) return false;
  const DType low = static_cast<DType>(tlsAutocast);
  bool changed = false;
  for (Tensor &t : in) {
    if (!t.defined() || !isFloating(t.dtype())) continue;
    DType want = rule == Rule::lower ? low : DType::f32;
    if (rule == Rule::f32 && !reduced(t.dtype())) continue; // f64 stays f64
    if (t.dtype() == want) continue;
    t = castTo(t, want);
    changed = true;
  }
  return changed;
}

Tensor autocastToF32(const Tensor &x) {
  if (tlsAutocast < 0 || !x.defined() || !reduced(x.dtype())) return x;
  return castTo(x, DType::f32);
}

NoAutocast::NoAutocast() : prev_(tlsAutocast) { tlsAutocast = -1; }
NoAutocast::~NoAutocast() { tlsAutocast = prev_; }

} // namespace detail
} // namespace rcjit
