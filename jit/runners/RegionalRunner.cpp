// The regional entry: the graph cut into glue and region stages, each distinct stage
// compiled once (a forward and a backward where it trains); a call runs the stages in order.
#include "jit/CompiledState.h"
#include "jit/Regional.h"
#include "jit/runners/EntryRunner.h"

namespace rcjit::detail {

namespace {

// Runs a regional plan. Shares the plan (its stages are shared with other entries);
// immutable, run() thread-safe.
class RegionalRunner final : public EntryRunner {
public:
  explicit RegionalRunner(std::shared_ptr<RegionalPlan> plan) : plan_(std::move(plan)) {}

  std::vector<Tensor> run(const std::vector<const Tensor *> &inputs, const std::vector<Tensor> &,
                          const TracedFn &) const override {
    return plan_->run(inputs.data(), inputs.size());
  }
  int64_t compiles() const override { return plan_->compiled; }
  int64_t cacheHits() const override { return plan_->reused; }
  // a training stage's backward compiled lazily, once a backward() reached it (a reused
  // stage's counts as reused)
  void addLaterStats(CompileStats &st) const override {
    for (const RegionalStage &s : plan_->stages) {
      if (!s.training || s.backwardAtBuild || !s.training->backwardIfCompiled()) continue;
      (s.reused ? st.cache_hits : st.compiles) += 1;
      if (!s.reused) st.compile_seconds += s.training->backwardSeconds();
    }
  }
  std::string printPrograms() const override { return plan_->print(); }
  std::pair<int64_t, int64_t> regions() const override { return {plan_->compiled, plan_->reused}; }

  // the stages compiled for this entry (a reused stage's code was logged)
  std::optional<std::string> llvmIr(const std::string &) const override {
    std::string ir;
    for (size_t i = 0; i < plan_->stages.size(); ++i) {
      const RegionalStage &st = plan_->stages[i];
      if (st.reused) continue;
      std::string code = st.program    ? st.program->llvmIr()
                         : st.training ? st.training->forward().llvmIr() +
                                             (st.training->backwardIfCompiled()
                                                  ? st.training->backwardIfCompiled()->llvmIr()
                                                  : std::string())
                                       : "";
      if (!code.empty()) ir += "; stage " + std::to_string(i) + " (" + st.name + ")\n" + code;
    }
    if (ir.empty()) return std::nullopt;
    return ir;
  }

private:
  std::shared_ptr<RegionalPlan> plan_;
};

} // namespace

std::unique_ptr<EntryRunner> makeRegionalRunner(EntryBuild &b) {
  Entry &e = b.e;
  e.graph = b.t.graph;
  // training: the stages whose inputs need a gradient compile a forward and a backward
  RegionalTraining regionalTraining{b.wantGrad, b.inputs, b.label};
  const RegionalTraining *rt = b.training ? &regionalTraining : nullptr;
  if (!b.dynamic.empty()) {
    SymbolicRegional r =
        makeSymbolicRegional(b.fn, b.t, b.strides, b.dynamic, b.moduleId, b.exec, rt);
    e.dynamicNotes = std::move(r.notes);
    if (r.plan) {
      e.symbols = std::move(r.symbols);
      applySymbolicGuards(e.guards, e.symbols);
      return std::make_unique<RegionalRunner>(std::move(r.plan));
    }
  }
  // ZeRO-3: each stage gathers its sharded inputs itself (bound as shards by the caller)
  const ShardingState *sharding = b.sharding.empty() ? nullptr : &b.sharding;
  return std::make_unique<RegionalRunner>(std::make_shared<RegionalPlan>(
      buildRegionalPlan(b.t.graph, b.strides, b.moduleId, b.exec, {}, {}, {}, rt, sharding)));
}

} // namespace rcjit::detail
