// Rebuilding a graph node by node: the renumbering helper every pass shares.
//
// Why: passes remove, replace and insert nodes, and node ids are positions. Instead of
// patching ids in place, a pass walks the old graph in order and appends to a builder;
// the builder keeps the old-to-new id map, remaps inputs, outputs and region ranges, and
// computes every new node's dtype and shape with inferMeta.
#pragma once
#include <vector>

#include "tracer/Graph.h"
#include "tracer/ShapeInference.h"

namespace rcjit {

/// A graph under construction from `src`. Call begin(i) for every old node i in order
/// (even for nodes that are dropped), then copy/map/emit what stands for it; finish()
/// returns the new graph. Regions are kept, each mapped to the new ids emitted while its
/// old nodes were visited (a region may become empty). Not thread-safe; `src` must
/// outlive the builder.
class GraphBuilder {
public:
  explicit GraphBuilder(const Graph &src);

  /// Starts old node `old`: new nodes get its region until the next begin().
  void begin(int old);
  /// Old node `old` with its inputs remapped (not appended).
  Node remapped(int old) const;
  /// Appends remapped(old) and maps `old` to it.
  int copy(int old);
  /// Makes new node `id` stand for old node `old`.
  void map(int old, int id) { newId_[old] = id; }
  /// The new node standing for old node `old` (copied, emitted or mapped before).
  int at(int old) const { return newId_[old]; }
  const Node &node(int id) const { return g_.nodes[id]; }
  TensorMeta meta(int id) const;

  /// Appends `op` over new nodes `inputs`; dtype and shape from inferMeta (which throws
  /// rcjit::Error on a bad combination).
  int emit(OpKind op, std::vector<int> inputs, const Attrs &a = {});
  /// Appends a cast of `x` to `t`, or returns `x` when it already has dtype `t`.
  int cast(int x, DType t);
  /// Appends a `full` constant of shape [] and dtype `t`.
  int scalar(double value, DType t);
  /// Appends `arange` of `n` elements (i64).
  int arange(int64_t n);
  /// Appends a node exactly as given (inputs already new ids); for nodes built elsewhere.
  int append(Node n);

  Graph finish();

private:
  const Graph &src_;
  Graph g_;
  std::vector<int> newId_;
  std::vector<int> start_; // old id -> number of new nodes before its begin()
  int region_ = -1;
};

/// How many times each node of `g` is read: as an input of a node (once per operand) and as
/// a graph output (once per listing).
std::vector<int> useCounts(const Graph &g);

} // namespace rcjit
