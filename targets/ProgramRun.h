// What every target's executor does the same way around its steps: read the symbolic sizes
// from the inputs, keep one specialization per size assignment, and hand out the outputs.
#pragma once
#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include <rcjit/Tensor.h>

#include "targets/Program.h"

namespace rcjit {

/// The symbol values of a call: dim `dim` of input `input` for each symbol (0 for a symbol
/// the program does not use). A few live inline; nullptr for a static program.
class CallSymbols {
public:
  CallSymbols(const Program &p, const Tensor *const *inputs, size_t n);
  const int64_t *data() const { return p_; }

private:
  int64_t inline_[8] = {};
  std::vector<int64_t> heap_;
  const int64_t *p_ = nullptr;
};

/// Specializations of a program per symbol assignment (a static program has one, made at
/// creation); the newest `kMax` are kept. Spec must have a `syms` vector. Thread-safe.
template <class Spec> class SpecTable {
public:
  static constexpr size_t kMax = 32;
  using Make = std::function<std::shared_ptr<const Spec>(const int64_t *syms)>;

  /// `make` builds the specialization for an assignment (nullptr syms: the static one).
  SpecTable(const Program &p, Make make)
      : numSyms_(p.symbols.ranges.size()), make_(std::move(make)) {
    if (p.symbols.empty()) static_ = make_(nullptr);
  }
  std::shared_ptr<const Spec> get(const int64_t *syms) const {
    if (static_) return static_;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (auto it = specs_.rbegin(); it != specs_.rend(); ++it) {
        if (std::equal(syms, syms + numSyms_, (*it)->syms.begin())) return *it;
      }
    }
    std::shared_ptr<const Spec> spec = make_(syms); // outside the lock: may be slow
    std::lock_guard<std::mutex> lock(mu_);
    if (specs_.size() >= kMax) specs_.erase(specs_.begin());
    specs_.push_back(spec);
    return spec;
  }

private:
  size_t numSyms_;
  Make make_;
  std::shared_ptr<const Spec> static_;
  mutable std::mutex mu_;
  mutable std::vector<std::shared_ptr<const Spec>> specs_;
};

/// The program's outputs as tensors: views of the input, dynamic or output buffer each
/// output value lives in (`dynamic` and `outBuffers` indexed by buffer). A value returned
/// twice gets separate storage the second time (`clone`).
std::vector<Tensor> collectOutputs(const Program &layout, const Tensor *const *inputs,
                                   const std::vector<Tensor> &dynamic,
                                   const std::vector<Tensor> &outBuffers);

} // namespace rcjit
