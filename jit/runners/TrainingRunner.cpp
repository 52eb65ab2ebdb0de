// The training entry (full mode, grad mode on, an input requires grad): a joint
// forward+backward graph, partitioned and compiled in two programs, symbolic where the dims
// allow; a call runs the forward, and backward() the compiled backward.
#include "jit/CompiledState.h"
#include "jit/autograd/CompiledTraining.h"
#include "jit/runners/EntryRunner.h"
#include "tracer/GraphIO.h"

namespace rcjit::detail {

namespace {

// Runs a training plan. Shares the plan (its outputs' autograd nodes hold it too);
// immutable, run() thread-safe.
class TrainingRunner final : public EntryRunner {
public:
  explicit TrainingRunner(std::shared_ptr<TrainingPlan> plan)
      : plan_(std::move(plan)), backwardAtBuild_(plan_->backwardIfCompiled() != nullptr) {}

  std::vector<Tensor> run(const std::vector<const Tensor *> &inputs, const std::vector<Tensor> &,
                          const TracedFn &) const override {
    return plan_->run(inputs.data(), inputs.size());
  }
  // the backward counts once it exists: at the build (symbolic, sharded) or when a
  // backward() first reached it
  int64_t compiles() const override { return backwardAtBuild_ ? 2 : 1; }
  int64_t cacheHits() const override {
    return plan_->forward().cacheHits() +
           (backwardAtBuild_ ? plan_->backwardIfCompiled()->cacheHits() : 0);
  }
  void addLaterStats(CompileStats &st) const override {
    const Executable *b = plan_->backwardIfCompiled();
    if (backwardAtBuild_ || !b) return;
    st.compiles += 1;
    st.cache_hits += b->cacheHits();
    st.compile_seconds += plan_->backwardSeconds();
  }
  std::string printPrograms() const override {
    const Executable *b = plan_->backwardIfCompiled();
    return plan_->print() + "forward " + printProgram(plan_->forward().program()) +
           (b ? "backward " + printProgram(b->program()) : "");
  }
  std::string graphLog() const override {
    return "backward graph:\n" + printGraph(plan_->backwardGraph()) + plan_->print();
  }
  std::optional<std::string> llvmIr(const std::string &entry) const override {
    const Executable *b = plan_->backwardIfCompiled();
    return "; " + entry + " forward\n" + plan_->forward().llvmIr() +
           (b ? "; " + entry + " backward\n" + b->llvmIr() : "");
  }

private:
  std::shared_ptr<TrainingPlan> plan_;
  bool backwardAtBuild_;
};

} // namespace

std::unique_ptr<EntryRunner> makeTrainingRunner(EntryBuild &b) {
  Entry &e = b.e;
  TrainingRequest r{.samples = {{b.t.graph, b.strides, {}, b.inputs}},
                    .wantGrad = b.wantGrad,
                    .exec = b.exec,
                    .moduleId = b.moduleId,
                    .label = b.label,
                    .sharding = b.sharding};
  std::shared_ptr<TrainingPlan> plan;
  if (!b.dynamic.empty()) {
    SymbolicTraining sym = makeSymbolicTraining(b.fn, b.t, b.strides, b.dynamic, r);
    e.dynamicNotes = std::move(sym.notes);
    if (sym.plan) {
      plan = std::move(sym.plan);
      e.symbols = std::move(sym.symbols);
      applySymbolicGuards(e.guards, e.symbols);
    }
  }
  if (!plan) plan = TrainingPlan::create(std::move(r));
  e.graph = plan->forwardGraph();
  return std::make_unique<TrainingRunner>(std::move(plan));
}

} // namespace rcjit::detail
