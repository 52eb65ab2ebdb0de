// StaticRunner: an entry that runs one compiled program (static or symbolic sizes); the
// whole step's runner builds on it.
#pragma once
#include <memory>

#include "jit/runners/EntryRunner.h"

namespace rcjit::detail {

/// Runs one compiled program on the guarded inputs. Owns its share of the program;
/// immutable, run() thread-safe.
class StaticRunner : public EntryRunner {
public:
  explicit StaticRunner(std::shared_ptr<Executable> program) : program_(std::move(program)) {}
  std::vector<Tensor> run(const std::vector<const Tensor *> &inputs,
                          const std::vector<Tensor> &args, const TracedFn &fn) const override;
  int64_t compiles() const override { return 1; }
  int64_t cacheHits() const override { return program_->cacheHits(); }
  std::string printPrograms() const override;
  std::optional<std::string> llvmIr(const std::string &) const override {
    return program_->llvmIr();
  }
  int64_t kernels() const override {
    return static_cast<int64_t>(program_->program().kernels.size());
  }

protected:
  std::shared_ptr<Executable> program_;
};

} // namespace rcjit::detail
