// Guard construction from example inputs, the fast check, and failure explanations.
#include "guards/GuardSet.h"

#include <sstream>

#include "tracer/TensorImpl.h"

namespace rcjit {

GuardSet GuardSet::fromInputs(const std::vector<Tensor> &inputs,
                              const std::vector<std::string> &labels, size_t identityFrom) {
  GuardSet g;
  g.tensors_.reserve(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor &t = inputs[i];
    TensorGuard tg;
    tg.label = i < labels.size() ? labels[i] : "input " + std::to_string(i);
    tg.impl = i >= identityFrom ? t.impl().get() : nullptr;
    tg.dtype = t.dtype();
    tg.device = t.device();
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

namespace {

// Returns "" when t passes g, else the reason (built only when `explain`).
template <bool explain> std::string checkOne(const TensorGuard &g, const Tensor &t) {
  const detail::TensorImpl *impl = t.impl().get();
  if (!impl) {
    if constexpr (explain) return g.label + ": expected a tensor, got an undefined Tensor";
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
                                      : "a size in [" + std::to_string(dg.min) + ", " +
                                            std::to_string(dg.max) + "]";
        return g.label + " dim " + std::to_string(d) + ": expected " + want + ", got " +
               std::to_string(size);
      }
      return "x";
    }
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

bool GuardSet::check(const Tensor *const *inputs, size_t n) const {
  if (n != tensors_.size()) return false;
  for (size_t i = 0; i < n; ++i) {
    if (!checkOne<false>(tensors_[i], *inputs[i]).empty()) return false;
  }
  return true;
}

std::string GuardSet::firstFailure(const Tensor *const *inputs, size_t n) const {
  if (n != tensors_.size()) {
    return "number of inputs: expected " + std::to_string(tensors_.size()) + ", got " +
           std::to_string(n);
  }
  for (size_t i = 0; i < n; ++i) {
    std::string why = checkOne<true>(tensors_[i], *inputs[i]);
    if (!why.empty()) return why;
  }
  return {};
}

std::string GuardSet::allFailures(const Tensor *const *inputs, size_t n) const {
  std::string out;
  if (n != tensors_.size()) return firstFailure(inputs, n);
  for (size_t i = 0; i < n; ++i) {
    std::string why = checkOne<true>(tensors_[i], *inputs[i]);
    if (!why.empty()) out += why + "\n";
  }
  return out;
}

std::string GuardSet::print() const {
  std::ostringstream os;
  for (const TensorGuard &g : tensors_) {
    os << g.label << ": " << dtypeName(g.dtype) << " " << g.device.str() << " [";
    for (size_t d = 0; d < g.dims.size(); ++d) {
      const DimGuard &dg = g.dims[d];
      if (d) os << ", ";
      if (dg.sym >= 0) {
        os << "s" << dg.sym << " in [" << dg.min << ", " << dg.max << "]";
      } else {
        os << dg.size;
      }
    }
    os << "] strides [";
    for (size_t d = 0; d < g.dims.size(); ++d) {
      os << (d ? ", " : "") << (g.dims[d].checkStride ? std::to_string(g.dims[d].stride) : "*");
    }
    os << "]\n";
  }
  return os.str();
}

} // namespace rcjit
