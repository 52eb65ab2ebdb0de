// Custom graph passes: user functions Graph -> Graph added to every compile's pipeline.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <rcjit/Tensor.h>
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

/// A parameter whose values live sharded over the ranks (ZeRO-3, dist::ZeroOptimizer): the
/// parameters of one unit are flattened in order to `unit_numel` elements, padded to
/// world_size * shard.numel(), and rank r holds elements [r * S, (r + 1) * S) of it (S =
/// shard.numel()) in `shard`. The parameter tensor itself has its full shape but need not
/// hold data.
struct ShardedParameter {
  std::string name;       // for messages and logs ("h.0.attn.c_attn.weight")
  int unit = 0;           // which unit: parameters of one unit share `shard`
  int64_t offset = 0;     // its first element in the unit's flat layout
  int64_t unit_numel = 0; // elements of the unit before padding
  Shape shape;            // its full shape
  Tensor shard;           // this rank's slice of the unit: f32 [S], a leaf that requires grad
  int world_size = 1;
  int rank = 0;
  int stage = 3;
};

/// Declares `param` sharded: a compiled function that captures it binds `info.shard` in its
/// place, and its graphs must read the shard (the zero3 scheduled pass rewrites them so; a
/// compiled graph still reading the full parameter is an Error naming it). A parameter's
/// gradient then flows into the shard's grad() as this rank's slice of the mean gradient.
/// Throws for a shard that is not an f32 1-D tensor. Process-wide; thread-safe.
void shard_parameter(const Tensor &param, ShardedParameter info);
/// Forgets `param`'s sharding (no-op when it had none).
void unshard_parameter(const Tensor &param);
/// Whether `param` is sharded, and how (false: `out` untouched).
bool sharded_parameter(const Tensor &param, ShardedParameter &out);

/// One program input (or gradient output) of the graph a pass receives that is a sharded
/// parameter.
struct ShardedInput {
  int input = -1;       // its program input (args, then captured), -1: not an input here
  int grad_output = -1; // a backward graph: the output that is its gradient, or -1
  ShardedParameter param;
};

/// What is sharded in the graph a pass receives (PassContext::sharding): empty when no
/// input is. The runtime binds each sharded input to its shard (f32 [S]), so a pass that
/// replaces the input's uses by gathered values must also set the input node's shape to
/// [S] (the zero3 pass does); in a backward graph, the first gradient output of each unit
/// (in output order) must become the unit's shard gradient (f32 [S], the mean over the
/// ranks); the runtime ignores the unit's other gradient outputs.
struct ShardingState {
  int world_size = 1;
  int rank = 0;
  int stage = 0; // 0: nothing sharded
  std::vector<ShardedInput> inputs;
  bool empty() const { return inputs.empty(); }
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
  /// The sharded parameters among the graph's inputs and gradients (ZeRO-3); the profile
  /// binds each sharded input to its shard.
  ShardingState sharding;
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
