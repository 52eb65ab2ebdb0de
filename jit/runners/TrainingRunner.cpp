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
  explicit TrainingRunner(std::shared_ptr<TrainingPlan> plan) : plan_(std::move(plan)) {}

  std::vector<Tensor> run(const std::vector<const Tensor *> &inputs, const std::vector<Tensor> &,
                          const TracedFn &) const override {
    return plan_->run(inputs.data(), inputs.size());
  }
  int64_t compiles() const override { return 2; }
  int64_t cacheHits() const override {
    return plan_->forward().cacheHits() + plan_->backward().cacheHits();
  }
  std::string printPrograms() const override {
    return plan_->print() + "forward " + printProgram(plan_->forward().program()) + "backward " +
           printProgram(plan_->backward().program());
  }
  std::string graphLog() const override {
    return "backward graph:\n" + printGraph(plan_->backwardGraph()) + plan_->print();
  }
  std::optional<std::string> llvmIr(const std::string &entry) const override {
    return "; " + entry + " forward\n" + plan_->forward().llvmIr() + "; " + entry + " backward\n" +
           plan_->backward().llvmIr();
  }

private:
  std::shared_ptr<TrainingPlan> plan_;
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
