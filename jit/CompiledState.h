// The state behind a compiled function: its cache entries (guards -> compiled program),
// options, stats and recompile history.
#pragma once
#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <rcjit/Compile.h>

#include "guards/GuardSet.h"
#include "jit/Dynamic.h"
#include "jit/Regional.h"
#include "jit/Segments.h"
#include "jit/autograd/CompiledTraining.h"
#include "support/Events.h"
#include "targets/Executable.h"
#include "tracer/Graph.h"
#include "tracer/Tracer.h"

namespace rcjit::detail {

/// One compiled variant. Immutable once published in CompiledState::entries.
struct Entry {
  int id = 0;
  GuardSet guards;
  std::vector<Tensor> captured;        // held: keeps identity-guarded tensors alive
  std::vector<Tensor *> slots;         // where each captured tensor's current value lives, or null
  std::shared_ptr<Executable> program; // full mode
  std::shared_ptr<RegionalPlan> regional; // regional mode (its stages train when training)
  std::shared_ptr<SegmentTable> segments; // graph breaks: compiled pieces between them
  std::shared_ptr<TrainingPlan> training; // full mode, grad mode on, an input requires grad
  bool compiled() const { return program || regional || training; } // else runs eagerly
  Graph graph;        // the graph after the pass pipeline
  std::string fusion; // full mode: the printed fusion plan
  std::string reason; // why it was compiled
  double compileSeconds = 0;
  int graphBreaks = 0;
  std::vector<DynSymbol> symbols; // symbolic dims (symbol i = SizeExpr sym i)
  // A whole step (the function wrote tensors it did not create: backward(), opt.step(),
  // copy_): the program's outputs past `userOutputs` are written back after each call.
  struct WriteBack {
    Mutation::Kind kind = Mutation::Kind::data;
    Tensor target;        // as traced
    int captured = -1;    // the captured input it is (its current value is written), or -1
    int output = -1;      // program output; -1: grad() becomes undefined
    bool inPlace = false; // grad: written into the current grad() (the trace read it)
  };
  std::vector<WriteBack> writes;
  std::vector<std::pair<int, int>> into; // (program output, program input) written in place
  std::vector<GradGuard> gradGuards;
  // sharded parameters (shard_parameter) among the program inputs: (input, its shard), bound
  // in the parameter's place after the guards passed
  std::vector<std::pair<int, Tensor>> shardBinds;
  size_t userOutputs = 0;
  bool wholeStep = false;
  // candidate dims that stayed static, and why
  std::vector<logging::StaticDimEvent> dynamicNotes;
  mutable std::atomic<int64_t> calls{0}; // calls that hit it, counted while tracing (CallEvent)
};

class CompiledState {
public:
  explicit CompiledState(const CompileOptions &o, const void *fnObject = nullptr,
                         size_t fnBytes = 0,
                         const std::source_location &where = std::source_location::current());
  const CompileOptions opts;
  const void *const fnObject; // the callable, where captured variables are found; may be null
  const size_t fnBytes;
  const int id;           // process-unique, for module names and logs
  const std::string name; // for logs: CompileOptions::name and/or the compile() call's file:line
  /// "function 3 (model.cpp:42)": how logs, errors and explain() name this function.
  std::string label() const { return logging::functionLabel(id, name); }
  mutable std::mutex mu; // entries, stats, history
  std::mutex compileMu;  // one trace+compile at a time per function
  std::vector<std::shared_ptr<const Entry>> entries;
  CompileStats stats;
  std::vector<std::string> history;
  // the pass schedule (opts.schedule): calls so far, the schedule step in force (-1: none),
  // and, after a step dropped the entries, the reason the next compile gives
  int64_t calls = 0;
  int scheduleAt = -1;
  std::string scheduleReason;
};

} // namespace rcjit::detail
