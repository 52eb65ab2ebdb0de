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
#include "jit/runners/EntryRunner.h"
#include "support/Events.h"
#include "targets/Executable.h"
#include "tracer/Graph.h"
#include "tracer/Tracer.h"

namespace rcjit::detail {

/// One compiled variant: the guards a call must pass, and the runner of its kind that runs
/// it (jit/runners/). Immutable once published in CompiledState::entries.
struct Entry {
  int id = 0;
  GuardSet guards;
  std::vector<Tensor> captured; // held: keeps identity-guarded tensors alive
  std::vector<Tensor *> slots;  // where each captured tensor's current value lives, or null
  // a whole step: each leaf's grad() must be defined (or not) as when it was traced
  std::vector<GradGuard> gradGuards;
  std::shared_ptr<const EntryRunner> runner;           // how a call runs; shared by no other entry
  bool compiled() const { return runner->compiled(); } // else the C++ runs (graph breaks)
  Graph graph;                                         // the graph after the pass pipeline
  std::string fusion;                                  // full mode: the printed fusion plan
  std::string reason;                                  // why it was compiled
  double compileSeconds = 0;
  int graphBreaks = 0;
  std::vector<DynSymbol> symbols; // symbolic dims (symbol i = SizeExpr sym i)
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
