// The graph-break entry: the function's C++ runs on every call, and the traced work between
// its host reads runs as compiled segments, looked up by structural hash and input layouts.
#include "jit/CompiledState.h"
#include "jit/Segments.h"
#include "jit/runners/EntryRunner.h"

namespace rcjit::detail {

namespace {

// Runs the function through its segment table. Shares the table, which is thread-safe and
// grows as calls reach new segments; run() thread-safe.
class SegmentRunner final : public EntryRunner {
public:
  SegmentRunner(std::shared_ptr<SegmentTable> table, int graphBreaks)
      : table_(std::move(table)), graphBreaks_(graphBreaks) {}

  std::vector<Tensor> run(const std::vector<const Tensor *> &, const std::vector<Tensor> &args,
                          const TracedFn &fn) const override {
    SegmentTable &table = *table_;
    return runSegmented(fn, args, [&table](Segment &seg) { table.run(seg); });
  }
  bool compiled() const override { return false; }
  // the trace's outputs were computed under the tracer, which records no autograd nodes: a
  // training call runs again through its segments, so that its outputs have gradients
  bool runsAgainAfterTrace() const override { return table_->training(); }
  int64_t compiles() const override { return 0; }
  int64_t cacheHits() const override { return 0; }
  void addLaterStats(CompileStats &st) const override {
    st.compiles += table_->compiled();
    st.cache_hits += table_->reused();
  }
  std::string explainNote() const override {
    auto count = [](int64_t n, const std::string &one, const std::string &many) {
      return std::to_string(n) + " " + (n == 1 ? one : many);
    };
    return " has " + count(graphBreaks_, "graph break", "graph breaks") +
           ": its C++ runs on every call; " + std::to_string(table_->compiled()) +
           " segment programs compiled, " + std::to_string(table_->reused()) + " reused" +
           (table_->training() ? " (a forward and a backward per segment)" : "");
  }
  std::string printPrograms() const override { return ""; }
  std::optional<std::string> llvmIr(const std::string &) const override { return std::nullopt; }

private:
  std::shared_ptr<SegmentTable> table_;
  int graphBreaks_;
};

} // namespace

std::unique_ptr<EntryRunner> makeSegmentRunner(EntryBuild &b) {
  // training: each segment compiles a forward and a backward, so the backward splits at the
  // breaks too
  b.e.graph = b.t.graph;
  if (!b.dynamic.empty()) {
    b.e.dynamicNotes.push_back({.why = "a function with graph breaks compiles its segments "
                                       "for static shapes"});
  }
  auto table =
      std::make_shared<SegmentTable>(static_cast<size_t>(4 * b.s.opts.recompile_limit), b.training);
  return std::make_unique<SegmentRunner>(std::move(table), static_cast<int>(b.t.breaks.size()));
}

} // namespace rcjit::detail
