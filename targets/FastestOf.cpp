// fastestOf: time whole candidate executables on the first call, keep the fastest.
#include "targets/FastestOf.h"

#include <atomic>
#include <cassert>
#include <chrono>
#include <cstdio>
#include <limits>
#include <mutex>

#include "support/Events.h"

namespace rcjit {

namespace {

class FastestOfCandidates final : public Executable {
public:
  FastestOfCandidates(std::vector<std::shared_ptr<Executable>> c, std::vector<std::string> names,
                      std::string moduleId, std::function<void(int)> onChosen)
      : candidates_(std::move(c)), names_(std::move(names)), moduleId_(std::move(moduleId)),
        onChosen_(std::move(onChosen)) {
    assert(!candidates_.empty() && names_.size() == candidates_.size());
  }

  std::vector<Tensor> run(const Tensor *const *inputs, size_t n) const override {
    return pick(inputs, n).run(inputs, n);
  }
  std::vector<Tensor> runConsuming(std::vector<Tensor> &inputs) const override {
    std::vector<const Tensor *> ptrs;
    for (const Tensor &t : inputs) ptrs.push_back(&t);
    return pick(ptrs.data(), ptrs.size()).runConsuming(inputs);
  }
  using Executable::runInto;
  void runInto(const Tensor *const *inputs, size_t n, const std::vector<std::pair<int, int>> &into,
               std::vector<Tensor> &outs) const override {
    pick(inputs, n).runInto(inputs, n, into, outs);
  }
  const Program &program() const override { return current().program(); }
  const std::string &llvmIr() const override { return current().llvmIr(); }
  int cacheHits() const override { return current().cacheHits(); }
  std::string libraryNotes() const override { return current().libraryNotes(); }

private:
  const Executable &current() const {
    const int k = chosen_.load(std::memory_order_acquire);
    return *candidates_[k < 0 ? 0 : static_cast<size_t>(k)];
  }

  // the best of three runs after a first (which may tune or fault pages in)
  static double bestSeconds(const Executable &e, const Tensor *const *inputs, size_t n) {
    e.run(inputs, n);
    double best = std::numeric_limits<double>::infinity();
    for (int r = 0; r < 3; ++r) {
      auto t0 = std::chrono::steady_clock::now();
      e.run(inputs, n);
      best = std::min(best,
                      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    return best;
  }

  const Executable &pick(const Tensor *const *inputs, size_t n) const {
    if (chosen_.load(std::memory_order_acquire) >= 0) return current();
    std::unique_lock<std::mutex> lock(mu_, std::try_to_lock);
    if (!lock.owns_lock() || chosen_.load(std::memory_order_relaxed) >= 0) return current();
    auto t0 = std::chrono::steady_clock::now();
    std::string summary;
    double best = std::numeric_limits<double>::infinity();
    int k = 0;
    for (size_t i = 0; i < candidates_.size(); ++i) {
      const double s = bestSeconds(*candidates_[i], inputs, n);
      char line[200];
      std::snprintf(line, sizeof line, "\n  %s: %.3f ms", names_[i].c_str(), s * 1e3);
      summary += line;
      if (s < best) {
        best = s;
        k = static_cast<int>(i);
      }
    }
    chosen_.store(k, std::memory_order_release);
    if (onChosen_) onChosen_(k);
    logging::emit(logging::CompileStepEvent{
        .graph = moduleId_,
        .step = "autotune",
        .seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
        .result = "lowering: kept " + names_[static_cast<size_t>(k)] + summary});
    return current();
  }

  std::vector<std::shared_ptr<Executable>> candidates_;
  std::vector<std::string> names_;
  std::string moduleId_;
  std::function<void(int)> onChosen_;
  mutable std::mutex mu_;
  mutable std::atomic<int> chosen_{-1};
};

} // namespace

std::shared_ptr<Executable> fastestOf(std::vector<std::shared_ptr<Executable>> candidates,
                                      std::vector<std::string> names, std::string moduleId,
                                      std::function<void(int)> onChosen) {
  if (candidates.size() == 1) return std::move(candidates[0]);
  return std::make_shared<FastestOfCandidates>(std::move(candidates), std::move(names),
                                               std::move(moduleId), std::move(onChosen));
}

} // namespace rcjit
