// The graph IR's text form (print and parse) and its canonical structural hash.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <rcjit/ir/GraphIO.h> // printGraph, parseGraph

#include "tracer/Graph.h"

namespace rcjit {

/// parseGraph without its semantic checks (dims, symbol ranges, shape inference): the
/// syntax and every index are still checked, so the result is safe to print and hash, but
/// it may be no graph a trace produces. For tests of the text form's fidelity only.
Graph parseGraphText(std::string_view text);
/// The text form's name of one Attrs field ("dims", "keepdim", ...), shared by printer and
/// parser; empty for a value that is not a single AttrBit.
std::string_view attrName(AttrBit bit);
/// The text form of Attrs::reduce: "sum", "mean", "max" (0, 1, 2); "?" for another number.
std::string_view collectiveReduceName(int64_t reduce);

/// The bytes of node `n`'s value at its traced sizes (every dim's traced value).
int64_t tracedBytes(const Node &n);

/// 128-bit structural hash of a graph.
struct GraphHash {
  uint64_t lo = 0, hi = 0;
  friend bool operator==(const GraphHash &, const GraphHash &) = default;
  std::string hex() const;
};
/// Canonical hash: equal for graphs that differ only in node numbering (any topological
/// order of the same DAG), in captured inputs' names and bindings, and in region
/// bookkeeping; different when an op, attr, dtype, shape, symbol range, input order or
/// output differs.
GraphHash hashGraph(const Graph &g);
/// The captured input nodes of `g` in the structural order hashGraph numbers them by (not
/// their inputIndex). Graphs with equal hashes take their captured tensors alike when each
/// lists them in this order, so a cache entry shared by such graphs must bind by it.
std::vector<int> canonicalCaptured(const Graph &g);

/// The sub-graph of region `r`: nodes of the region, with every value it uses from
/// outside (and every input node inside it) turned into an input node, numbered in order
/// of first use; outputs are the region's values used after it (or the graph's outputs).
/// `boundary` receives, for each input of the sub-graph, the id in `g` it stands for
/// (in the sub-graph's inputNodes() order); `outputsInG` the g ids of its outputs.
/// Policy details at the top of RegionExtract.cpp; throws rcjit::Error on a bad region.
Graph extractRegion(const Graph &g, int r, std::vector<int> *boundary = nullptr,
                    std::vector<int> *outputsInG = nullptr);

} // namespace rcjit
