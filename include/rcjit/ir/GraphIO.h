// The graph IR's text form: print a Graph, parse it back (public, like the IR itself).
#pragma once
#include <string>
#include <string_view>

#include <rcjit/ir/Graph.h>

namespace rcjit {

/// A readable text form that parseGraph reads back: parseGraph(printGraph(g)) == g.
/// Thread-safe (reads `g` only).
std::string printGraph(const Graph &g);

/// Parses printGraph's form into a new Graph. Throws rcjit::Error naming line and column
/// when the text is malformed or describes an invalid graph: a negative dim, a symbol
/// range [min, max] with min > max or min < 0, a symbolic dim outside its range, or a
/// node whose dtype or shape is not what its op gives for its inputs (shape inference is
/// re-run on every node). A graph that parses is safe to walk. Thread-safe.
Graph parseGraph(std::string_view text);

} // namespace rcjit
