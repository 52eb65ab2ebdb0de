// Weights kept reordered once into the layout a oneDNN matmul primitive reads (a packed
// copy per weight address and storage version), within a process-wide byte budget; and the
// library steps that run over such copies (PackingStep) or reorder on each call
// (RepackingStep).
#pragma once
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include <oneapi/dnnl/dnnl.hpp>

#include "targets/cpu/LibraryStep.h"

namespace rcjit::detail {
struct Storage;
}

namespace rcjit::cpu {

/// `d` ([B, R, C]) as [R, C] when B is 1; otherwise `d` itself. Library steps make a
/// product of one batch as a 2-D one (see MatmulStep in GemmSteps.h).
dnnl::memory::desc unbatched(const dnnl::memory::desc &d);

/// Whether library steps pack the weights that are program inputs: RCJIT_PACK_WEIGHTS
/// (default on), unless setPackWeightsOverride set it (-1 gives it back to the variable).
bool packWeightsSetting();
void setPackWeightsOverride(int on);

/// A weight kept reordered into a primitive's blocked layout: made on the second run at the
/// same version and again when the weight's address, storage or storage version changes (a
/// parameter updated in place: copy_, an optimizer step, a compiled training step's
/// write-back). Copies count against RCJIT_PACK_WEIGHTS_MAX_MB (default 1024) and in
/// detail::packedWeightBytes (memory_stats). Thread-safe.
class WeightPack {
public:
  struct Packed {
    dnnl::memory mem; // owns its buffer
    const char *data = nullptr;
    std::weak_ptr<detail::Storage> owner;
    uint32_t version = 0;
    int64_t bytes = 0;
    ~Packed();
  };
  /// Reorders from `plain` into `packed`; `plain` may have a leading batch dim of 1 that
  /// `packed` (a 2-D step's) lacks.
  WeightPack(const dnnl::memory::desc &plain, const dnnl::memory::desc &packed);

  /// The packed copy of the weight at `data` in `owner`, made the second time it is seen
  /// at the same version; null the first time, when the storage is not known, or when the
  /// process's packed copies would pass their budget (the caller then runs over the plain
  /// weight). One copy per weight address: a regional program runs the same step with
  /// every layer's weight.
  std::shared_ptr<const Packed> get(char *data,
                                    const std::shared_ptr<detail::Storage> *owner) const;
  /// The weight at `data` reordered now, for one call, into a buffer of the calling thread
  /// (eager::threadBuffer: grown to the largest weight it has held, valid until the thread's
  /// next such reorder). Nothing is kept or counted against the budget.
  char *reorderNow(char *data) const;

private:
  void reorder(char *data, dnnl::memory to) const;

  dnnl::memory::desc plain_, packed_;
  dnnl::reorder reorder_;
  mutable std::mutex mu_;
  mutable std::unordered_map<const char *, std::shared_ptr<const Packed>> copies_;
};

/// A step whose weight operand is passed packed (WeightPack) to `inner`, or, when no
/// packed copy can be had, as it is to `plain`; a null `plain`: `inner` over the weight
/// reordered for that call (WeightPack::reorderNow).
class PackingStep : public LibraryStep {
public:
  PackingStep(std::unique_ptr<LibraryStep> inner, std::unique_ptr<WeightPack> pack,
              std::unique_ptr<LibraryStep> plain)
      : inner_(std::move(inner)), pack_(std::move(pack)), plain_(std::move(plain)) {}
  double macs() const override { return inner_->macs(); }
  int blocks() const override { return inner_->blocks(); }
  bool packsWeights() const override { return true; }
  std::string describe() const override;
  void runWith(char *const *operands, char *result,
               const std::shared_ptr<detail::Storage> *weight) const override;

protected:
  std::unique_ptr<LibraryStep> inner_;
  std::unique_ptr<WeightPack> pack_;
  std::unique_ptr<LibraryStep> plain_;
};

/// A product whose weight operand (B) is not packed once (an activation or a gradient in a
/// backward; any weight under RCJIT_PACK_WEIGHTS=0): a PackingStep without a plain step
/// that never keeps a copy, so `inner` runs over the weight reordered on each call.
class RepackingStep : public PackingStep {
public:
  RepackingStep(std::unique_ptr<LibraryStep> inner, std::unique_ptr<WeightPack> pack)
      : PackingStep(std::move(inner), std::move(pack), nullptr) {}
  bool packsWeights() const override { return false; }
  std::string describe() const override;
  void runWith(char *const *operands, char *result,
               const std::shared_ptr<detail::Storage> *) const override {
    PackingStep::runWith(operands, result, nullptr); // no storage: no copy is kept
  }
};

} // namespace rcjit::cpu
