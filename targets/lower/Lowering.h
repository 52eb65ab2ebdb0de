// The state lowering carries from one step to the next: fuse (Fuse.cpp), build kernels
// (BuildKernels.cpp), plan buffers (PlanBuffers.cpp). Internal to targets/lower.
//
// Per graph node it records where the node's value lives (a Value of the Program, once
// materialized), and the fusion group computing it with the node's level in that group:
// `full` (one value per point of the group's domain), `keep` (reduced dims kept as size 1)
// or `drop` (reduced dims removed).
#pragma once
#include <map>
#include <vector>

#include "targets/Fuse.h"
#include "targets/Lower.h"
#include "targets/Program.h"
#include "tracer/Graph.h"

namespace rcjit::lowering {

enum class Level : uint8_t { full, keep, drop };

/// "op %node", how plans and step notes name a node.
std::string nodeRef(const Graph &g, int node);
int64_t numelOf(const Shape &shape);

/// `x` with the reduced dims `r` kept as size 1, or dropped.
Shape keepShape(const Shape &x, const Dims &r);
Shape dropShape(const Shape &x, const Dims &r);

/// A copy of a value into another buffer, done by its own one-load one-store kernel.
struct CopyKernel {
  int group, src, dst;
};

struct Lowering {
  const Graph &g;
  std::vector<Shape> inputStrides;
  LowerOptions opts;
  Program p;
  FusionPlan plan;

  // per graph node
  std::vector<int> value;   // Value id, -1 while not materialized
  std::vector<int> groupOf; // fusion group, -1 when none
  std::vector<Level> level; // level within its group
  std::vector<std::vector<int>> users;
  std::vector<bool> isOutput;
  std::vector<int> programIndex; // input node -> program input index
  std::vector<bool> needsStore;  // its group must store it

  // per Value
  std::vector<int> stepOrderOfValue; // order of the step that writes it (-1: an input)
  std::vector<int> libraryLastNode;  // last node folded into the library step writing it

  std::map<int, Step> otherSteps; // library, eager and indexing-kernel steps by order
  std::vector<CopyKernel> copyKernels;
  int nextOrder = 0;

  Lowering(const Graph &graph, const std::vector<Shape> &strides, const LowerOptions &o);

  Shape shapeOf(int node) const { return concreteShape(g.nodes[node].shape); }
  int addValue(Value v, int order);
  int newBufferValue(const Shape &shape, DType dtype, int order, Buffer::Kind kind);

  // fuse (Fuse.cpp): one walk over the nodes placing and grouping each
  void fuse();
  void placeNode(int node);
  void placeInput(int node);
  int materialize(int node);
  void placeView(int node);
  int copyContiguous(int src);
  void placeCat(int node);
  int newGroup(bool reduce, const Shape &domain, const Dims &reduced, std::string why);
  void join(int gid, int node, Level lv);
  /// A `full`: a kernel reading it computes the constant itself, even where the value is
  /// also stored for a view or a library step (materialize), possibly by a later step.
  bool isConstant(int node) const;
  int availableAt(int node) const;
  bool canJoin(int gid, int node, Level lv, std::string *why = nullptr) const;
  bool levelFor(int gid, const Shape &shape, Level &lv) const;
  void fuseElementwise(int node);
  void mergeOperandGroups(int node, const Shape &shape);
  int64_t bytesOf(int node) const;
  bool recomputable(int node, int gid, std::vector<int> &chain, std::vector<int> &leaves) const;
  bool recomputeForReaders(int node);
  void fuseReduce(int node);
  int foldableLibraryResult(int node) const;
  void joinLibraryStep(int node, int v);
  bool foldPostOp(int node);
  bool storedAnyway(int node) const;
  bool foldCast(int node);
  void placeLibraryOrEager(int node, Step::Kind kind);
  void placeCollective(int node);
  // embedding and its gradient as gather/scatter kernels (IndexKernels.cpp)
  void placeIndexed(int node);
  void addKernelStep(int node, LoopKernel k, Step step);

  // build kernels (BuildKernels.cpp)
  void buildKernels();
  void buildKernel(int gid, Step &step);
  int reduceInvariant(LoopKernel &k, const KernelStmt &r);
  bool hasCopy(int gid) const;
  // Whether node's value shows an arange's result through views alone (same storage, no
  // offset): a kernel computes its elements instead of loading them (KernelTensor::iota).
  bool viewsArange(int node) const;
  void placeWaits();

  // plan buffers (PlanBuffers.cpp)
  Program planBuffers();
};

} // namespace rcjit::lowering
