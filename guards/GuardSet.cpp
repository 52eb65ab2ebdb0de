// Guard construction from example inputs, the fast check, and failure explanations.
#include "guards/GuardSet.h"

#include <rcjit/Dist.h>

#include <rcjit/Autograd.h>

#include "autograd/Autograd.h"

#include <sstream>

#include "tracer/Autocast.h"
#include "tracer/TensorImpl.h"

namespace rcjit {

namespace {
// "bf16" inside an Autocast scope, "off" outside one.
std::string autocastText(int code) {
  return code < 0 ? "off" : std::string(dtypeName(static_cast<DType>(code)));
}
} // namespace

GuardSet GuardSet::fromInputs(const std::vector<Tensor> &inputs,
                              const std::vector<std::string> &labels, size_t identityFrom) {
  GuardSet g;
  g.autocast_ = detail::autocastCode();
  g.tensors_.reserve(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor &t = inputs[i];
    TensorGuard tg;
    tg.label = i < labels.size() ? labels[i] : "input " + std::to_string(i);
    tg.impl = i >= identityFrom ? t.impl().get() : nullptr;
    tg.dtype = t.dtype();
    tg.device = t.device();
    tg.requiresGrad = is_grad_enabled() && t.requires_grad();
    for (int d = 0; d < t.dim(); ++d) {
      DimGuard dg;
      dg.size = t.shape()[d];
      dg.stride = t.strides()[d];
      dg.checkStride = dg.size != 1;
      tg.dims.push_back(dg);
    }
    g.tensors_.push_back(std::move(tg));
  }
  return g;
}

void GuardSet::makeSymbolic(int input, int dim, int sym, int64_t min, int64_t max) {
  TensorGuard &tg = tensors_.at(static_cast<size_t>(input));
  DimGuard &dg = tg.dims.at(static_cast<size_t>(dim));
  dg.sym = sym;
  dg.min = min;
  dg.max = max;
  tg.contiguous = true;
  tg.impl = nullptr;
  for (DimGuard &d : tg.dims) d.checkStride = false;
  if (static_cast<size_t>(sym) >= symbolAt_.size()) symbolAt_.resize(static_cast<size_t>(sym) + 1);
  if (symbolAt_[sym].empty()) symbolAt_[sym] = tg.label + " dim " + std::to_string(dim);
}

std::string rangeString(int64_t min, int64_t max) {
  return "[" + std::to_string(min) + ", " + (max == INT64_MAX ? "inf" : std::to_string(max)) + "]";
}

namespace {

// Returns "" when t passes g, else the reason (built only when `explain`). `symVals` holds
// the size of each symbol seen so far (-1: not yet), shared across one guard-set check.
template <bool explain>
std::string checkOne(const TensorGuard &g, const Tensor &t, int64_t *symVals,
                     const std::vector<std::string> &symbolAt, bool gradOn) {
  const detail::TensorImpl *impl = t.impl().get();
  if (!impl) {
    if constexpr (explain) return g.label + ": expected a tensor, got an undefined Tensor";
    return "x";
  }
  // before the identity shortcut: requires_grad_() changes a tensor in place
  const autograd::AutogradMeta *ag = impl->autograd.get();
  if ((gradOn && ag && ag->requiresGrad) != g.requiresGrad) {
    if constexpr (explain) {
      return g.label + " requires_grad (with grad mode " + (gradOn ? "on" : "off") +
             "): expected " + (g.requiresGrad ? "true" : "false") + ", got " +
             (g.requiresGrad ? "false" : "true");
    }
    return "x";
  }
  if (impl == g.impl) return {}; // shape, dtype and strides of an impl never change
  if (impl->dtype != g.dtype) {
    if constexpr (explain) {
      return g.label + " dtype: expected " + std::string(dtypeName(g.dtype)) + ", got " +
             std::string(dtypeName(impl->dtype));
    }
    return "x";
  }
  if (impl->storage->device != g.device) {
    if constexpr (explain) {
      return g.label + " device: expected " + g.device.str() + ", got " +
             impl->storage->device.str();
    }
    return "x";
  }
  if (impl->shape.size() != g.dims.size()) {
    if constexpr (explain) {
      return g.label + " rank: expected " + std::to_string(g.dims.size()) + ", got " +
             std::to_string(impl->shape.size()) + " (shape " + shapeStr(impl->shape) + ")";
    }
    return "x";
  }
  for (size_t d = 0; d < g.dims.size(); ++d) {
    const DimGuard &dg = g.dims[d];
    int64_t size = impl->shape[d];
    bool ok = dg.sym < 0 ? size == dg.size : size >= dg.min && size <= dg.max;
    if (!ok) {
      if constexpr (explain) {
        std::string want = dg.sym < 0 ? std::to_string(dg.size)
                                      : "a size in " + rangeString(dg.min, dg.max) + " (symbol s" +
                                            std::to_string(dg.sym) + ")";
        return g.label + " dim " + std::to_string(d) + ": expected " + want + ", got " +
               std::to_string(size);
      }
      return "x";
    }
    if (dg.sym >= 0) {
      int64_t &seen = symVals[dg.sym];
      if (seen >= 0 && seen != size) {
        if constexpr (explain) {
          return g.label + " dim " + std::to_string(d) + ": expected " + std::to_string(seen) +
                 " (symbol s" + std::to_string(dg.sym) + ", the size of " + symbolAt[dg.sym] +
                 "), got " + std::to_string(size);
        }
        return "x";
      }
      seen = size;
    }
  }
  if (g.contiguous) {
    int64_t expected = 1;
    for (size_t d = g.dims.size(); d-- > 0;) {
      int64_t size = impl->shape[d];
      if (size != 1 && impl->strides[d] != expected) {
        if constexpr (explain) {
          return g.label + " stride of dim " + std::to_string(d) + ": expected " +
                 std::to_string(expected) + " (row-major, as its symbolic sizes need), got " +
                 std::to_string(impl->strides[d]);
        }
        return "x";
      }
      expected *= size;
    }
    return {};
  }
  for (size_t d = 0; d < g.dims.size(); ++d) { // sizes first: they explain more
    const DimGuard &dg = g.dims[d];
    if (dg.checkStride && impl->shape[d] != 1 && impl->strides[d] != dg.stride) {
      if constexpr (explain) {
        return g.label + " stride of dim " + std::to_string(d) + ": expected " +
               std::to_string(dg.stride) + ", got " + std::to_string(impl->strides[d]) +
               " (contiguity changed)";
      }
      return "x";
    }
  }
  return {};
}

} // namespace

template <bool explain>
std::string GuardSet::checkAll(const Tensor *const *inputs, size_t n, bool all) const {
  if (const int now = detail::autocastCode(); now != autocast_) {
    if constexpr (explain) {
      return "autocast: expected " + autocastText(autocast_) + ", got " + autocastText(now);
    }
    return "x";
  }
  if (world_ > 0) {
    if (const int now = dist::world_size(); now != world_) {
      if constexpr (explain) {
        return "world size: expected " + std::to_string(world_) + " ranks, got " +
               std::to_string(now);
      }
      return "x";
    }
  }
  if (n != tensors_.size()) {
    if constexpr (explain) {
      return "number of inputs: expected " + std::to_string(tensors_.size()) + ", got " +
             std::to_string(n);
    }
    return "x";
  }
  int64_t symStore[16];
  std::vector<int64_t> symHeap;
  int64_t *symVals = symStore;
  if (symbolAt_.size() > 16) {
    symHeap.resize(symbolAt_.size());
    symVals = symHeap.data();
  }
  std::fill(symVals, symVals + symbolAt_.size(), int64_t{-1});
  std::string out;
  const bool gradOn = is_grad_enabled();
  for (size_t i = 0; i < n; ++i) {
    std::string why = checkOne<explain>(tensors_[i], *inputs[i], symVals, symbolAt_, gradOn);
    if (why.empty()) continue;
    if (!explain || !all) return why;
    out += why + "\n";
  }
  return out;
}

bool GuardSet::check(const Tensor *const *inputs, size_t n) const {
  return checkAll<false>(inputs, n, false).empty();
}

std::string GuardSet::firstFailure(const Tensor *const *inputs, size_t n) const {
  return checkAll<true>(inputs, n, false);
}

std::string GuardSet::allFailures(const Tensor *const *inputs, size_t n) const {
  return checkAll<true>(inputs, n, true);
}

std::string GuardSet::print() const {
  std::ostringstream os;
  if (autocast_ >= 0) os << "autocast: " << autocastText(autocast_) << "\n";
  if (world_ > 0) os << "world size: " << world_ << " ranks (collectives)\n";
  for (const TensorGuard &g : tensors_) {
    os << g.label << ": " << dtypeName(g.dtype) << " " << g.device.str() << " [";
    for (size_t d = 0; d < g.dims.size(); ++d) {
      const DimGuard &dg = g.dims[d];
      if (d) os << ", ";
      if (dg.sym >= 0) {
        os << "s" << dg.sym << " in " << rangeString(dg.min, dg.max);
      } else {
        os << dg.size;
      }
    }
    os << "] strides ";
    if (g.contiguous) {
      os << "row-major" << (g.requiresGrad ? " requires_grad" : "") << "\n";
      continue;
    }
    os << "[";
    for (size_t d = 0; d < g.dims.size(); ++d) {
      os << (d ? ", " : "") << (g.dims[d].checkStride ? std::to_string(g.dims[d].stride) : "*");
    }
    os << "]" << (g.requiresGrad ? " requires_grad" : "") << "\n";
  }
  for (size_t s = 0; s < symbolAt_.size(); ++s) {
    os << "s" << s << " = size of " << symbolAt_[s] << "\n";
  }
  return os.str();
}

} // namespace rcjit
