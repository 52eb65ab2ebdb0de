// The fuse step of lowering: place each node's value (inputs, views, library and eager
// results) and group elementwise, broadcast and reduction nodes into loop kernels,
// recording why each group was opened.
#include <algorithm>
#include <cassert>
#include <sstream>
#include <tuple>

#include <rcjit/Error.h>

#include "targets/MatmulLayout.h"
#include "targets/lower/Lowering.h"
#include "tracer/GraphIO.h"
#include "tracer/OpCases.h"
#include "tracer/OpKind.h"
#include "tracer/TensorImpl.h"

namespace rcjit::lowering {

std::string nodeRef(const Graph &g, int node) {
  return std::string(opName(g.nodes[node].op)) + " %" + std::to_string(node);
}

int64_t numelOf(const Shape &shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

namespace {

// Ops a oneDNN library call can apply to its result as an eltwise post-op (Ops.def's props).
bool isPostOp(OpKind op) { return opHas(op, kPostOp); }

constexpr int64_t kTinyDomain = 16;
// At most this many nodes in one loop kernel: LLVM's O3 time grows faster than a function's
// size (one fused kernel of a 30 k-op function took 5.7 s, of a 100 k-op one 61 s), so a
// longer chain is cut into kernels of this size, and compile time grows linearly with the
// graph (docs/first-call.md). Ordinary kernels have tens of nodes.
constexpr size_t kMaxGroupNodes = 256;
// A value of at least this many bytes that kernels of other groups read is computed again
// by each of them when cheap (recomputeForReaders), from at most this many nodes.
constexpr int64_t kRecomputeMinBytes = 1 << 20;
constexpr size_t kMaxRecomputedNodes = 8;

} // namespace

Shape keepShape(const Shape &x, const Dims &r) {
  Shape s = x;
  for (int64_t d : r) s[d] = 1;
  return s;
}

Shape dropShape(const Shape &x, const Dims &r) {
  Shape s;
  for (int64_t d = 0; d < static_cast<int64_t>(x.size()); ++d) {
    if (std::find(r.begin(), r.end(), d) == r.end()) s.push_back(x[d]);
  }
  return s;
}

Lowering::Lowering(const Graph &graph, const std::vector<Shape> &strides, const LowerOptions &o)
    : g(graph), inputStrides(strides), opts(o) {
  size_t n = g.nodes.size();
  value.assign(n, -1);
  groupOf.assign(n, -1);
  level.assign(n, Level::full);
  users.assign(n, {});
  isOutput.assign(n, false);
  needsStore.assign(n, false);
  for (size_t i = 0; i < n; ++i) {
    for (int in : g.nodes[i].inputs) users[in].push_back(static_cast<int>(i));
  }
  for (int out : g.outputs) isOutput[out] = true;
  programIndex.assign(n, -1);
  std::vector<int> order = g.programInputs();
  for (size_t i = 0; i < order.size(); ++i) programIndex[order[i]] = static_cast<int>(i);
}

int Lowering::addValue(Value v, int order) {
  p.values.push_back(std::move(v));
  stepOrderOfValue.push_back(order);
  libraryLastNode.push_back(-1);
  return static_cast<int>(p.values.size()) - 1;
}

int Lowering::newBufferValue(const Shape &shape, DType dtype, int order, Buffer::Kind kind) {
  Buffer b;
  b.kind = kind;
  b.dtype = dtype;
  b.shape = shape;
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  b.bytes = n * static_cast<int64_t>(dtypeSize(dtype));
  p.buffers.push_back(b);
  Value v;
  v.buffer = static_cast<int>(p.buffers.size()) - 1;
  v.shape = shape;
  v.strides = detail::contiguousStrides(shape);
  v.dtype = dtype;
  return addValue(v, order);
}

void Lowering::fuse() {
  // sources that read nothing (arange) run first: a group that starts before their place in
  // node order can then read them (cross_entropy's one-hot compare fuses into the softmax
  // kernel instead of storing the log-probabilities between them).
  // So do scalars computed from inputs and constants alone (an optimizer's bias corrections,
  // a chain per parameter): every kernel that reads them then comes after them. In node
  // order a parameter's update could start before its scalars' tiny group, once the one
  // before it was full (kMaxGroupNodes), and was cut there, storing its intermediates.
  std::vector<bool> early(g.nodes.size(), false);
  const int64_t tiny = opts.symbolic ? 1 : kTinyDomain;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node &n = g.nodes[i];
    bool scalar = isElementwise(n.op) && numelOf(shapeOf(static_cast<int>(i))) <= tiny;
    for (int in : n.inputs) {
      const OpKind op = g.nodes[in].op;
      scalar = scalar && (early[in] || op == OpKind::input || op == OpKind::full);
    }
    if (!scalar && n.op != OpKind::arange) continue;
    for (int in : n.inputs) {
      if (g.nodes[in].op == OpKind::input && !early[in]) {
        placeNode(in);
        early[in] = true;
      }
    }
    placeNode(static_cast<int>(i));
    early[i] = true;
  }
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    if (!early[i]) placeNode(static_cast<int>(i));
  }
  for (int o : g.outputs) materialize(o);
  // values used by steps outside their group must be stored by it, unless each such step
  // is a kernel that can compute them again from what it reads anyway
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    if (groupOf[i] < 0 || value[i] >= 0) continue;
    bool outside = false;
    for (int u : users[i]) outside = outside || groupOf[u] != groupOf[i];
    if (outside && !recomputeForReaders(static_cast<int>(i))) materialize(static_cast<int>(i));
  }
}

int64_t Lowering::bytesOf(int node) const {
  return numelOf(shapeOf(node)) * static_cast<int64_t>(dtypeSize(g.nodes[node].dtype));
}

// Whether group `gid` can compute `node` (a full-domain value of an earlier group that is
// not stored) again from what it may read: constants, values in memory before its step,
// small values of earlier groups (stored for it), and further such nodes. `chain` gets the
// nodes to compute, operands first; `leaves` the nodes it would read from memory.
bool Lowering::recomputable(int node, int gid, std::vector<int> &chain,
                            std::vector<int> &leaves) const {
  if (std::find(chain.begin(), chain.end(), node) != chain.end()) return true;
  const FusionGroup &grp = plan.groups[gid];
  const int home = groupOf[node];
  if (!isElementwise(g.nodes[node].op) || home < 0 || home == gid ||
      plan.groups[home].order >= grp.order || value[node] >= 0 || level[node] != Level::full ||
      shapeOf(node) != grp.domain || chain.size() >= kMaxRecomputedNodes)
    return false;
  for (int in : g.nodes[node].inputs) {
    if (isConstant(in)) continue;
    if (value[in] >= 0) {
      if (stepOrderOfValue[value[in]] >= grp.order) return false;
      leaves.push_back(in);
      continue;
    }
    const int from = groupOf[in];
    if (from < 0 || from == gid || plan.groups[from].order >= grp.order) return false;
    if (bytesOf(in) * 16 <= bytesOf(node)) { // a row statistic: its group stores it
      leaves.push_back(in);
      continue;
    }
    if (!recomputable(in, gid, chain, leaves)) return false;
  }
  chain.push_back(node);
  return true;
}

// Instead of storing `node` for the kernels of other groups that read it, has each of them
// compute it again (FusionGroup::recomputed), when every reader can and the values each
// reads for it hold no more bytes than `node` (so their longer lives cost no more memory
// than storing it would): a whole training step's loss kernel then stores neither the
// log-probabilities nor the softmax its backward reads, only two row statistics. Not for
// samples of a symbolic program (the choice depends on sizes) or small values.
bool Lowering::recomputeForReaders(int node) {
  if (opts.symbolic || isOutput[node] || bytesOf(node) < kRecomputeMinBytes) return false;
  struct Reader {
    int gid;
    std::vector<int> chain, leaves;
  };
  std::vector<Reader> readers;
  for (int u : users[node]) {
    const int gid = groupOf[u];
    if (gid == groupOf[node]) continue;
    if (gid < 0) return false; // a library or eager step reads it from memory
    bool seen = false;
    for (const Reader &r : readers) seen = seen || r.gid == gid;
    if (seen) continue;
    Reader r{gid, {}, {}};
    if (!recomputable(node, gid, r.chain, r.leaves)) return false;
    std::sort(r.leaves.begin(), r.leaves.end());
    r.leaves.erase(std::unique(r.leaves.begin(), r.leaves.end()), r.leaves.end());
    int64_t bytes = 0; // that the leaves keep alive longer (row statistics do not count)
    for (int leaf : r.leaves) {
      int64_t held = 0;
      if (value[leaf] < 0) {
        held = bytesOf(leaf);
      } else if (const Buffer &b = p.buffers[p.values[value[leaf]].buffer];
                 b.kind != Buffer::Kind::input) {
        held = b.bytes; // a view's whole buffer
      }
      if (held * 16 > bytesOf(node)) bytes += held;
    }
    if (bytes > bytesOf(node)) return false;
    readers.push_back(std::move(r));
  }
  for (const Reader &r : readers) {
    for (int leaf : r.leaves) materialize(leaf);
    std::vector<int> &again = plan.groups[r.gid].recomputed;
    for (int c : r.chain) {
      if (std::find(again.begin(), again.end(), c) == again.end()) again.push_back(c);
    }
    std::sort(again.begin(), again.end());
  }
  return true;
}

void Lowering::placeNode(int node) {
  const Node &n = g.nodes[node];
  switch (opInfo(n.op).category) {
  case OpCategory::Source:
    switch (n.op) {
    case OpKind::input:
      return placeInput(node);
    case OpKind::arange:
      return placeLibraryOrEager(node, Step::Kind::eager);
    case OpKind::full:
      return; // a constant until a step needs it materialized
      RCJIT_OP_CASES(Unary, Binary, Compare, Where, Reduce, Normalize, Matmul, Nn, View, Copy,
                     Collective)
      break;
    }
    return;
  case OpCategory::View:
    placeView(node);
    return;
  case OpCategory::Unary:
    if (foldPostOp(node) || foldCast(node)) return;
    fuseElementwise(node);
    return;
  case OpCategory::Binary:
  case OpCategory::Compare:
  case OpCategory::Where:
    fuseElementwise(node);
    return;
  case OpCategory::Reduce:
    fuseReduce(node);
    return;
  case OpCategory::Matmul:
    placeLibraryOrEager(node, Step::Kind::library);
    return;
  case OpCategory::Copy:
    switch (n.op) {
    case OpKind::contiguous: {
      int src = materialize(n.inputs[0]);
      const Value &v = p.values[src];
      value[node] = detail::isContiguous(v.shape, v.strides) ? src : copyContiguous(src);
      return;
    }
    case OpKind::cat:
      return placeCat(node);
      RCJIT_OP_CASES(Source, Unary, Binary, Compare, Where, Reduce, Normalize, Matmul, Nn, View,
                     Collective)
      break;
    }
    return;
  case OpCategory::Normalize:
  case OpCategory::Nn:
    if (opts.indexKernels && (n.op == OpKind::embedding || n.op == OpKind::embedding_backward))
      return placeIndexed(node);
    placeLibraryOrEager(node, Step::Kind::eager);
    return;
  case OpCategory::Collective:
    placeCollective(node);
    return;
  }
}

// ---- values and views -------------------------------------------------------------------

void Lowering::placeInput(int node) {
  const Node &n = g.nodes[node];
  int index = programIndex[node];
  Buffer b;
  b.kind = Buffer::Kind::input;
  b.index = index;
  b.dtype = n.dtype;
  p.buffers.push_back(b);
  Value v;
  v.buffer = static_cast<int>(p.buffers.size()) - 1;
  v.shape = shapeOf(node);
  // strides of another rank than the node's shape: a ZeRO-3 shard ([S]) bound where the
  // graph still reads the whole parameter (no zero3 pass), which the caller rejects after the
  // compile (checkShardedInputs); until then the program stays consistent (row-major)
  const bool given =
      index < static_cast<int>(inputStrides.size()) && inputStrides[index].size() == v.shape.size();
  v.strides = given ? inputStrides[index] : detail::contiguousStrides(v.shape);
  v.dtype = n.dtype;
  value[node] = addValue(v, -1);
  p.numInputs = std::max(p.numInputs, index + 1);
}

// The value of `node`, materializing it (a store from its group, or a constant kernel).
int Lowering::materialize(int node) {
  if (value[node] >= 0) return value[node];
  const Node &n = g.nodes[node];
  if (groupOf[node] < 0) { // a constant not yet in any group: its own kernel
    int gid = newGroup(false, shapeOf(node), {}, "a constant a step reads from memory");
    join(gid, node, Level::full);
  }
  FusionGroup &grp = plan.groups[groupOf[node]];
  needsStore[node] = true;
  value[node] = newBufferValue(shapeOf(node), n.dtype, grp.order, Buffer::Kind::arena);
  return value[node];
}

void Lowering::placeView(int node) {
  const Node &n = g.nodes[node];
  int src = materialize(n.inputs[0]);
  Value v = p.values[src];
  Shape out = shapeOf(node);
  switch (n.op) {
  case OpKind::reshape: {
    Shape strides;
    if (!detail::computeViewStrides(v.shape, v.strides, out, strides)) {
      src = copyContiguous(src);
      v = p.values[src];
      detail::computeViewStrides(v.shape, v.strides, out, strides);
    }
    v.strides = strides;
    break;
  }
  case OpKind::permute: {
    Shape strides;
    for (int64_t d : n.attrs.dims) strides.push_back(v.strides[d]);
    v.strides = strides;
    break;
  }
  case OpKind::expand: {
    size_t lead = out.size() - v.shape.size();
    Shape strides(out.size(), 0);
    for (size_t i = 0; i < v.shape.size(); ++i) {
      strides[lead + i] = v.shape[i] == out[lead + i] ? v.strides[i] : 0;
    }
    v.strides = strides;
    break;
  }
  case OpKind::slice:
    v.offset += n.attrs.start * v.strides[n.attrs.dim];
    break;
    RCJIT_OP_CASES(Source, Unary, Binary, Compare, Where, Reduce, Normalize, Matmul, Nn, Copy,
                   Collective)
    assert(false && "placeView: not a view op");
    throw Error("lower: " + std::string(opName(n.op)) + " is not a view op");
  }
  v.shape = out;
  value[node] = addValue(v, stepOrderOfValue[src]);
  plan.views.push_back(node);
}

// A contiguous copy of value `src` (a one-load, one-store kernel).
int Lowering::copyContiguous(int src) {
  const Value &v = p.values[src];
  int gid = newGroup(false, v.shape, {}, "a copy into contiguous memory (a view that needs it)");
  int out = newBufferValue(v.shape, v.dtype, plan.groups[gid].order, Buffer::Kind::arena);
  copyKernels.push_back({gid, src, out});
  return out;
}

// cat: one copy kernel per input into its slice of one contiguous buffer.
void Lowering::placeCat(int node) {
  const Node &n = g.nodes[node];
  Shape shape = shapeOf(node);
  int result = newBufferValue(shape, n.dtype, -1, Buffer::Kind::arena);
  Value whole = p.values[result];
  int64_t at = 0, lastOrder = -1;
  for (int in : n.inputs) {
    int src = materialize(in);
    Value slice = whole;
    slice.shape = p.values[src].shape;
    slice.offset = at * whole.strides[n.attrs.dim];
    at += slice.shape[n.attrs.dim];
    int64_t count = 1;
    for (int64_t d : slice.shape) count *= d;
    if (count == 0) continue;
    int gid = newGroup(false, slice.shape, {}, "a copy of one input of " + nodeRef(g, node));
    copyKernels.push_back({gid, src, addValue(slice, plan.groups[gid].order)});
    lastOrder = plan.groups[gid].order;
  }
  stepOrderOfValue[result] = static_cast<int>(lastOrder); // complete after the last copy
  value[node] = result;
}

// ---- fusion -------------------------------------------------------------------------------

int Lowering::newGroup(bool reduce, const Shape &domain, const Dims &reduced, std::string why) {
  FusionGroup grp;
  grp.reduce = reduce;
  grp.domain = domain;
  grp.reduced = reduced;
  grp.order = nextOrder++;
  grp.opened = std::move(why);
  plan.groups.push_back(grp);
  return static_cast<int>(plan.groups.size()) - 1;
}

void Lowering::join(int gid, int node, Level lv) {
  plan.groups[gid].members.push_back(node);
  groupOf[node] = gid;
  level[node] = lv;
}

// Not only while it is in no group: an early group of scalars (fuse()) inlines a constant
// that a view later has stored by a group of its own at a later step, and a kernel that
// then loaded it would read it before that step wrote it (AdamW's `1 - b1^t` shared the
// constant 1 with the loss gradient's seed: NaN parameters after a whole step's first call).
bool Lowering::isConstant(int node) const { return g.nodes[node].op == OpKind::full; }

// Order of the step that makes `node`'s value available.
int Lowering::availableAt(int node) const {
  if (groupOf[node] >= 0 && value[node] < 0) return plan.groups[groupOf[node]].order;
  if (value[node] >= 0) return stepOrderOfValue[value[node]];
  return -1; // constants
}

// Can `node` join group `gid` at level `lv`? Every operand must be in the group at a
// compatible level, a constant, or available from an earlier step.
bool Lowering::canJoin(int gid, int node, Level lv, std::string *why) const {
  const FusionGroup &grp = plan.groups[gid];
  if (grp.members.size() >= kMaxGroupNodes) {
    if (why)
      *why = "k" + std::to_string(gid) + " has " + std::to_string(kMaxGroupNodes) +
             " nodes, the most one kernel takes (compile time)";
    return false;
  }
  for (int in : g.nodes[node].inputs) {
    if (groupOf[in] == gid && value[in] < 0) {
      Level l = level[in];
      bool ok = !(lv == Level::full && l == Level::drop) && !(lv != Level::full && l != lv);
      if (!ok) {
        if (why) *why = nodeRef(g, in) + " is at another level of the reduction";
        return false;
      }
      continue;
    }
    if (groupOf[in] == gid) continue; // stored by this group: read in-group
    if (isConstant(in)) continue;
    if (availableAt(in) >= grp.order) {
      if (why) *why = "operand " + nodeRef(g, in) + " is computed after the group starts";
      return false;
    }
  }
  return true;
}

// The level `shape` would have in group gid, if any.
bool Lowering::levelFor(int gid, const Shape &shape, Level &lv) const {
  const FusionGroup &grp = plan.groups[gid];
  if (shape == grp.domain) {
    lv = Level::full;
    return true;
  }
  if (!grp.reduce) return false;
  if (shape == keepShape(grp.domain, grp.reduced)) {
    lv = Level::keep;
    return true;
  }
  if (shape == dropShape(grp.domain, grp.reduced)) {
    lv = Level::drop;
    return true;
  }
  return false;
}

void Lowering::fuseElementwise(int node) {
  Shape shape = shapeOf(node);
  mergeOperandGroups(node, shape);
  std::string why;
  for (int in : g.nodes[node].inputs) {
    int gid = groupOf[in];
    if (gid < 0 || value[in] >= 0) continue;
    Level lv;
    std::string cut;
    if (!levelFor(gid, shape, lv)) {
      cut = "its shape " + shapeStr(shape) + " is not in the iteration domain " +
            shapeStr(plan.groups[gid].domain) + " of k" + std::to_string(gid);
    } else if (canJoin(gid, node, lv, &cut)) {
      join(gid, node, lv);
      return;
    }
    why += (why.empty() ? "" : "; ") + cut;
  }
  // a few elements (a step count, a learning rate, a bias correction): join the latest
  // group over the same tiny domain rather than adding a kernel, so that the scalars a
  // step needs are ready before the big kernels that read them (a symbolic sample: only a
  // single element, whose dims cannot be symbolic, or the samples would fuse differently)
  if (numelOf(shape) <= (opts.symbolic ? 1 : kTinyDomain)) {
    for (size_t gid = plan.groups.size(); gid-- > 0;) {
      const FusionGroup &grp = plan.groups[gid];
      if (grp.reduce || grp.domain != shape || grp.mergedInto >= 0 ||
          hasCopy(static_cast<int>(gid)) || !canJoin(static_cast<int>(gid), node, Level::full))
        continue;
      join(static_cast<int>(gid), node, Level::full);
      return;
    }
  }
  if (why.empty()) why = "no operand is in an open group (inputs, library or stored results)";
  join(newGroup(false, shape, {}, why), node, Level::full);
}

// When `node` reads unstored full-domain values of several open groups over its own
// domain, the later elementwise groups merge into the earliest (which may reduce) (their members
// move to its step), so that the node joins one group and none of the values goes through memory:
// the update of a parameter, (1 - b1) * g + b1 * m and the rest, is one kernel rather than one per
// branch that starts from an input. A later group merges only when everything its members
// read from outside it is available before the earliest group's step and none of its
// values has been placed in memory yet.
void Lowering::mergeOperandGroups(int node, const Shape &shape) {
  std::vector<int> gids;
  for (int in : g.nodes[node].inputs) {
    int gid = groupOf[in];
    if (gid < 0 || value[in] >= 0 || level[in] != Level::full) continue;
    const FusionGroup &grp = plan.groups[gid];
    if (grp.domain != shape || hasCopy(gid)) continue;
    if (std::find(gids.begin(), gids.end(), gid) == gids.end()) gids.push_back(gid);
  }
  if (gids.size() < 2) return;
  std::sort(gids.begin(), gids.end(),
            [&](int a, int b) { return plan.groups[a].order < plan.groups[b].order; });
  const int into = gids[0];
  const int at = plan.groups[into].order;
  for (size_t i = 1; i < gids.size(); ++i) {
    FusionGroup &from = plan.groups[gids[i]];
    // its members join at full level (the earliest may reduce), up to the size cap
    bool ok =
        !from.reduce && plan.groups[into].members.size() + from.members.size() < kMaxGroupNodes;
    for (int m : from.members) {
      ok = ok && value[m] < 0;
      for (int in : g.nodes[m].inputs) {
        bool local = (groupOf[in] == gids[i] || groupOf[in] == into) && value[in] < 0;
        if (!local && !isConstant(in) && availableAt(in) >= at) ok = false;
      }
    }
    if (!ok) continue;
    FusionGroup &dst = plan.groups[into];
    for (int m : from.members) groupOf[m] = into;
    dst.members.insert(dst.members.end(), from.members.begin(), from.members.end());
    std::sort(dst.members.begin(), dst.members.end()); // node order is a topological order
    from.members.clear();
    from.mergedInto = into;
  }
}

void Lowering::fuseReduce(int node) {
  const Node &n = g.nodes[node];
  int in = n.inputs[0];
  Shape x = shapeOf(in);
  Dims r = n.op == OpKind::argmax ? Dims{n.attrs.dim} : n.attrs.dims;
  if (x.empty()) r.clear();
  bool keep = n.attrs.keepdim || r.empty();
  Level out = keep ? Level::keep : Level::drop;
  int gid = groupOf[in];
  std::string why;
  if (gid >= 0 && value[in] < 0 && level[in] == Level::full) {
    FusionGroup &grp = plan.groups[gid];
    bool fits = grp.domain == x && (grp.reduce ? grp.reduced == r : true);
    if (fits) {
      bool wasReduce = grp.reduce;
      grp.reduce = true;
      grp.reduced = r;
      if (canJoin(gid, node, Level::full, &why)) {
        join(gid, node, out);
        return;
      }
      grp.reduce = wasReduce;
      if (!wasReduce) grp.reduced.clear();
    } else {
      why = "k" + std::to_string(gid) + " iterates " + shapeStr(grp.domain) +
            (grp.reduce ? " reducing other dims" : "") + ", not " + shapeStr(x);
    }
  } else {
    why = "its input " + nodeRef(g, in) + " is not an open group's full-domain value";
  }
  int ng = newGroup(true, x, r, why);
  join(ng, node, out);
}

// ---- library and eager steps ----------------------------------------------------------------

// The result of the library step that `node`'s operand ends (its product or last folded
// epilogue), when `node` alone reads that operand and it is no output: what `node` may fold
// into. -1 otherwise.
int Lowering::foldableLibraryResult(int node) const {
  const int in = g.nodes[node].inputs[0];
  const int v = value[in];
  if (v < 0 || libraryLastNode[v] != in || users[in].size() != 1 || isOutput[in]) return -1;
  return v;
}

// `node` folded into the library step whose result is `v`: its value from now on, and one
// of the step's epilogues in the fusion plan ("+relu %node").
void Lowering::joinLibraryStep(int node, int v) {
  for (FusionCall &c : plan.calls) {
    if (c.order == stepOrderOfValue[v]) c.postOps.push_back(node);
  }
  value[node] = v;
  libraryLastNode[v] = node;
}

// Folds unary `node` into the library step that wrote its operand, if it may.
bool Lowering::foldPostOp(int node) {
  const Node &n = g.nodes[node];
  if (!opts.fuseLibraryEpilogues || !isPostOp(n.op) || n.dtype != DType::f32) return false;
  const int v = foldableLibraryResult(node);
  if (v < 0) return false;
  otherSteps[stepOrderOfValue[v]].postOps.push_back({n.op});
  joinLibraryStep(node, v);
  return true;
}

// Whether `node`'s value (a contiguous one) is stored whatever the fusion does: it is a
// program output, or a step that takes its operands from memory reads it (a library or
// eager step, a gather or scatter), or a reshape or copy into contiguous memory of it (the
// same memory: a whole step returns a gradient as `contiguous(grad)`) is stored anyway.
// Otherwise only kernels read it, and they could compute it in registers.
bool Lowering::storedAnyway(int node) const {
  if (isOutput[node]) return true;
  for (int u : users[node]) {
    const OpKind op = g.nodes[u].op;
    if (op == OpKind::reshape || op == OpKind::contiguous) {
      if (storedAnyway(u)) return true;
      continue;
    }
    const OpCategory c = opInfo(op).category;
    if (c == OpCategory::Matmul || c == OpCategory::Nn || c == OpCategory::Collective) return true;
  }
  return false;
}

// Folds `node`, a cast of a bf16 product (matmul or linear) to f32 that is stored anyway
// (storedAnyway: autocast's weight gradients, outputs of the step), into the library step
// that computes the product: the step writes its f32 accumulator instead of rounding it to
// bf16 for a kernel to read and widen again, which saves that kernel's pass over memory, the
// bf16 block and the rounding. A cast that kernels read (a projection's output added to the
// f32 residual, the logits under the loss) stays with them: they widen the bf16 value in
// registers, and an f32 result would double what is stored and read.
bool Lowering::foldCast(int node) {
  const Node &n = g.nodes[node];
  if (!opts.fuseLibraryEpilogues || n.op != OpKind::cast || n.dtype != DType::f32 ||
      g.nodes[n.inputs[0]].dtype != DType::bf16)
    return false;
  const int v = foldableLibraryResult(node);
  if (v < 0) return false;
  const Step &s = otherSteps[stepOrderOfValue[v]];
  if ((s.op != OpKind::matmul && s.op != OpKind::linear) || !s.postOps.empty() ||
      !storedAnyway(node))
    return false;
  Value &val = p.values[v];
  Buffer &b = p.buffers[val.buffer];
  val.dtype = b.dtype = DType::f32;
  b.bytes = numelOf(b.shape) * static_cast<int64_t>(dtypeSize(DType::f32));
  joinLibraryStep(node, v); // the fusion plan prints "+cast %node"
  return true;
}

void Lowering::placeLibraryOrEager(int node, Step::Kind kind) {
  const Node &n = g.nodes[node];
  Step s;
  s.kind = kind;
  s.op = n.op;
  s.attrs = n.attrs;
  for (int in : n.inputs) s.operands.push_back(materialize(in));
  MatmulLayout layout;
  if (kind == Step::Kind::library && opts.batchedGemm && !matmulLayout(p, s, layout)) {
    // one batch stride per operand (cuBLAS): a view whose batch dims do not collapse into
    // one (heads split out of a row, then permuted) is copied contiguous first
    for (int &v : s.operands) {
      if (!detail::isContiguous(p.values[v].shape, p.values[v].strides)) v = copyContiguous(v);
    }
  }
  int order = nextOrder++;
  s.result =
      newBufferValue(shapeOf(node), n.dtype, order,
                     kind == Step::Kind::eager ? Buffer::Kind::dynamic : Buffer::Kind::arena);
  s.note = nodeRef(g, node);
  value[node] = s.result;
  if (kind == Step::Kind::library) libraryLastNode[s.result] = node;
  otherSteps[order] = std::move(s);
  plan.calls.push_back({node, kind == Step::Kind::library, false, {}, order});
}

// A collective: its own start step where the node stands, its result a dynamic buffer that
// the wait step (placeWaits) fills before the first step reading it.
void Lowering::placeCollective(int node) {
  const Node &n = g.nodes[node];
  Step s;
  s.kind = Step::Kind::collective;
  s.op = n.op;
  s.attrs = n.attrs;
  s.operands.push_back(materialize(n.inputs.at(0)));
  int order = nextOrder++;
  s.result = newBufferValue(shapeOf(node), n.dtype, order, Buffer::Kind::dynamic);
  s.note = nodeRef(g, node);
  value[node] = s.result;
  otherSteps[order] = std::move(s);
  plan.calls.push_back({node, false, true, {}, order});
}

} // namespace rcjit::lowering

namespace rcjit {

std::string printFusionPlan(const FusionPlan &plan, const Graph &g) {
  struct Line {
    int order;
    size_t index; // ties keep the order of creation
    std::string text;
  };
  std::vector<Line> lines;
  auto list = [&g](const std::vector<int> &nodes) { // "op %n, op %m"
    std::string out;
    for (size_t m = 0; m < nodes.size(); ++m)
      out += (m ? ", " : "") + lowering::nodeRef(g, nodes[m]);
    return out;
  };
  size_t kernels = 0;
  for (size_t i = 0; i < plan.groups.size(); ++i) {
    const FusionGroup &grp = plan.groups[i];
    if (grp.mergedInto >= 0) continue; // listed with the group it joined
    std::ostringstream os;
    os << "  k" << i << " ";
    if (grp.reduce) {
      os << "reduce " << shapeStr(grp.domain) << " over dims " << shapeStr(grp.reduced);
    } else {
      os << "elementwise " << shapeStr(grp.domain);
    }
    os << ": {" << list(grp.members) << "}\n    opened: " << grp.opened << "\n";
    if (!grp.recomputed.empty()) {
      os << "    recomputes {" << list(grp.recomputed)
         << "} of other groups from what it reads (they do not store them)\n";
    }
    for (size_t j = i + 1; j < plan.groups.size(); ++j) {
      if (plan.groups[j].mergedInto == static_cast<int>(i))
        os << "    merged k" << j << " (its values meet this group's in one node)\n";
    }
    kernels += 1;
    lines.push_back({grp.order, lines.size(), os.str()});
  }
  for (const FusionCall &c : plan.calls) {
    std::ostringstream os;
    os << "  "
       << (c.collective ? "collective "
           : c.library  ? "library "
           : c.kernel   ? "kernel "
                        : "eager ")
       << opName(g.nodes[c.node].op) << " %" << c.node;
    for (int po : c.postOps) os << " +" << opName(g.nodes[po].op) << " %" << po;
    os << (c.collective ? " (started here over MPI, waited for before its first use)"
           : c.library  ? " (a library call: oneDNN on the CPU, cuBLAS on cuda)"
           : c.kernel   ? " (its own gather or scatter kernel)"
                        : " (no kernel covers it: runs as an eager op)")
       << "\n";
    lines.push_back({c.order, lines.size(), os.str()});
  }
  std::sort(lines.begin(), lines.end(), [](const Line &a, const Line &b) {
    return std::tie(a.order, a.index) < std::tie(b.order, b.index);
  });
  std::ostringstream os;
  os << "fusion: " << kernels << " groups, " << plan.calls.size() << " calls, " << plan.views.size()
     << " views\n";
  for (const Line &l : lines) os << l.text;
  return os.str();
}

} // namespace rcjit
