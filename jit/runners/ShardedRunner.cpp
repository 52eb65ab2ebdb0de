// The sharded entry (ZeRO-3): the compiled code takes each sharded parameter's shard in the
// parameter's place; the guards check the parameter, the call binds its shard.
#include "jit/runners/EntryRunner.h"

namespace rcjit::detail {

namespace {

// Binds the shards, then runs the entry's program or training plan. Owns `inner` and holds
// each shard; immutable, run() thread-safe.
class ShardedRunner final : public EntryRunner {
public:
  ShardedRunner(std::unique_ptr<EntryRunner> inner, std::vector<std::pair<int, Tensor>> binds)
      : inner_(std::move(inner)), binds_(std::move(binds)) {}

  std::vector<Tensor> run(const std::vector<const Tensor *> &guarded,
                          const std::vector<Tensor> &args, const TracedFn &fn) const override {
    std::vector<const Tensor *> bound = guarded; // the shards in the parameters' place
    for (const auto &[i, shard] : binds_) bound[static_cast<size_t>(i)] = &shard;
    return inner_->run(bound, args, fn);
  }
  bool compiled() const override { return inner_->compiled(); }
  bool runsAgainAfterTrace() const override { return inner_->runsAgainAfterTrace(); }
  int64_t compiles() const override { return inner_->compiles(); }
  int64_t cacheHits() const override { return inner_->cacheHits(); }
  void addLaterStats(CompileStats &st) const override { inner_->addLaterStats(st); }
  std::string explainNote() const override { return inner_->explainNote(); }
  std::string printPrograms() const override { return inner_->printPrograms(); }
  std::string graphLog() const override { return inner_->graphLog(); }
  std::optional<std::string> llvmIr(const std::string &entry) const override {
    return inner_->llvmIr(entry);
  }
  int64_t kernels() const override { return inner_->kernels(); }
  std::pair<int64_t, int64_t> regions() const override { return inner_->regions(); }

private:
  std::unique_ptr<EntryRunner> inner_;
  std::vector<std::pair<int, Tensor>> binds_; // (program input, its shard)
};

} // namespace

std::unique_ptr<EntryRunner> makeShardedRunner(const EntryBuild &b,
                                               std::unique_ptr<EntryRunner> inner) {
  std::vector<std::pair<int, Tensor>> binds;
  for (const ShardedInput &in : b.sharding.inputs) binds.push_back({in.input, in.param.shard});
  return std::make_unique<ShardedRunner>(std::move(inner), std::move(binds));
}

} // namespace rcjit::detail
