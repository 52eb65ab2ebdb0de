// Custom graph passes: user functions Graph -> Graph added to every compile's pipeline.
#pragma once
#include <functional>
#include <string>

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

/// The readable text form of a graph (what `RCJIT_LOGS=graph` prints).
std::string print_graph(const Graph &g);

} // namespace rcjit
