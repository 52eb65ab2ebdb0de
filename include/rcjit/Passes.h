// Custom graph passes: user functions Graph -> Graph added to every compile's pipeline.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <rcjit/ir/Graph.h>

namespace rcjit {

/// A pass: returns a graph computing the same outputs from the same inputs (or its input
/// unchanged when it did nothing). Node ids are positions; inputs refer to earlier nodes.
using GraphPassFn = std::function<Graph(const Graph &)>;

/// Adds `fn` to the pipeline of every compile from now on, after rcjit's decompose,
/// constant-fold and CSE passes and before dead-code elimination (so nodes a pass leaves
/// unused are removed). Passes run in registration order; an rcjit::Error thrown by one is
/// reported as "pass NAME: ...". Process-wide; thread-safe.
void register_graph_pass(std::string name, GraphPassFn fn);
/// Removes every registered pass.
void clear_graph_passes();

/// One node's share of a profiling run (PassContext::profile).
struct NodeProfile {
  double ms = 0;          // the node run alone on the eager target
  int64_t bytes = 0;      // the memory its value takes (0: a view, or an input)
  int64_t live_bytes = 0; // the values held after it ran (inputs excluded)
};

/// What a scheduled pass is told about the graph it receives (DeepCompile's pass context).
struct PassContext {
  std::string function;  // the compiled function: "function 3 (step, train.cpp:40)"
  std::string graph;     // which of its graphs: "function 3 entry 0 backward", a stage, ...
  bool backward = false; // the backward half of a training entry (or a stage's)
  int64_t step = 0;      // the function's call (training step) this compile happens at, from 0
  std::vector<std::string> passes; // the pass list the schedule has in force at `step`
  int64_t memory_budget = 0;       // CompileOptions::memory_budget in bytes; 0: none set
  /// Set where the graph takes the compiling call's inputs (a full-mode entry, a whole
  /// step, a training entry's forward; not a backward or a regional stage): runs the graph
  /// it is given once, node by node on the eager target, on those inputs, and returns per
  /// node its time and memory (DeepCompile's profiling run; values computed are dropped,
  /// nothing is written back). Costs about one eager call, so it runs only when asked.
  std::function<std::vector<NodeProfile>(const Graph &)> profile;
};

/// A pass run only where a compile's pass schedule names it (CompileOptions::schedule).
using ScheduledPassFn = std::function<Graph(const Graph &, const PassContext &)>;

/// Registers `fn` under `name` for pass schedules. A name can be registered once; a
/// schedule naming a pass that is not registered is an Error at compile(). Process-wide;
/// thread-safe. Scheduled passes run after the registered graph passes, before
/// dead-code elimination, in the schedule's order.
void register_scheduled_pass(std::string name, ScheduledPassFn fn);
/// Whether `name` is a registered scheduled pass.
bool has_scheduled_pass(const std::string &name);
/// Removes every registered scheduled pass (functions compiled with a schedule naming one
/// fail at their next scheduled compile).
void clear_scheduled_passes();

/// The readable text form of a graph (what `RCJIT_LOGS=graph` prints).
std::string print_graph(const Graph &g);

} // namespace rcjit
