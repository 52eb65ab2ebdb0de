// Lowering: place values, fuse elementwise/reduction groups, library and eager steps,
// then plan buffers. See Lower.h for the order of the steps.
#include "targets/Lower.h"

#include <algorithm>
#include <cassert>
#include <map>
#include <set>
#include <sstream>

#include <rcjit/Error.h>

#include "tracer/OpCases.h"
#include "tracer/TensorImpl.h"

namespace rcjit {

namespace {

// How a group member's value relates to the group's iteration domain.
enum class Level : uint8_t { full, keep, drop };

struct Group {
  bool reduce = false;
  Shape domainShape; // X: the full iteration shape
  Dims reduced;      // reduced dims of X (sorted); empty for elementwise groups
  std::vector<int> members;
  int order = 0; // position among steps
};

struct Lowering {
  const Graph &g;
  const std::vector<Shape> &inputStrides;
  LowerOptions opts;
  Program p;

  std::vector<int> value;   // node -> Value id, -1 while not materialized
  std::vector<int> groupOf; // node -> group id or -1
  std::vector<Level> level; // node -> level within its group
  std::vector<std::vector<int>> users;
  std::vector<bool> isOutput;
  std::vector<int> programIndex; // input node -> program input index
  std::vector<Group> groups;
  std::vector<int> stepOrderOfValue; // value -> order of the step that writes it (-1: input)
  std::vector<bool> needsStore;      // node -> its group must store it
  // steps other than kernels, keyed by order; kernels are built from groups at the end
  std::map<int, Step> otherSteps;
  std::vector<int> libraryLastNode; // value -> last node folded into its library step
  int nextOrder = 0;

  Lowering(const Graph &graph, const std::vector<Shape> &strides, const LowerOptions &o)
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
    for (int o : g.outputs) isOutput[o] = true;
    programIndex.assign(n, -1);
    std::vector<int> order = g.programInputs();
    for (size_t i = 0; i < order.size(); ++i) programIndex[order[i]] = static_cast<int>(i);
  }

  Shape shapeOf(int node) const { return concreteShape(g.nodes[node].shape); }

  int addValue(Value v, int order) {
    p.values.push_back(std::move(v));
    stepOrderOfValue.push_back(order);
    libraryLastNode.push_back(-1);
    return static_cast<int>(p.values.size()) - 1;
  }

  // A new contiguous arena buffer and its value, written by the step of `order`.
  int newBufferValue(const Shape &shape, DType dtype, int order, Buffer::Kind kind) {
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

  // ---- step 1: values and views ------------------------------------------------------

  void placeInput(int node) {
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
    v.strides = index < static_cast<int>(inputStrides.size()) ? inputStrides[index]
                                                              : detail::contiguousStrides(v.shape);
    v.dtype = n.dtype;
    value[node] = addValue(v, -1);
    p.numInputs = std::max(p.numInputs, index + 1);
  }

  // The value of `node`, materializing it (a store from its group, or a constant kernel).
  int materialize(int node) {
    if (value[node] >= 0) return value[node];
    const Node &n = g.nodes[node];
    if (groupOf[node] < 0) { // a constant not yet in any group: its own kernel
      int gid = newGroup(false, shapeOf(node), {});
      join(gid, node, Level::full);
    }
    Group &grp = groups[groupOf[node]];
    Shape shape = shapeOf(node);
    needsStore[node] = true;
    value[node] = newBufferValue(shape, n.dtype, grp.order, Buffer::Kind::arena);
    return value[node];
  }

  void placeView(int node) {
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
      RCJIT_OP_CASES(Source, Unary, Binary, Compare, Where, Reduce, Normalize, Matmul, Nn, Copy)
      assert(false && "placeView: not a view op");
      throw Error("lower: " + std::string(opName(n.op)) + " is not a view op");
    }
    v.shape = out;
    value[node] = addValue(v, stepOrderOfValue[src]);
  }

  // A contiguous copy of value `src` (a one-load, one-store kernel).
  int copyContiguous(int src) {
    const Value &v = p.values[src];
    int gid = newGroup(false, v.shape, {});
    int out = newBufferValue(v.shape, v.dtype, groups[gid].order, Buffer::Kind::arena);
    copyKernels.push_back({gid, src, out});
    return out;
  }
  struct CopyKernel {
    int group, src, dst;
  };
  std::vector<CopyKernel> copyKernels;

  // cat: one copy kernel per input into its slice of one contiguous buffer.
  void placeCat(int node) {
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
      int gid = newGroup(false, slice.shape, {});
      copyKernels.push_back({gid, src, addValue(slice, groups[gid].order)});
      lastOrder = groups[gid].order;
    }
    stepOrderOfValue[result] = static_cast<int>(lastOrder); // complete after the last copy
    value[node] = result;
  }

  // ---- step 2: fusion ----------------------------------------------------------------

  int newGroup(bool reduce, const Shape &domain, const Dims &reduced) {
    Group grp;
    grp.reduce = reduce;
    grp.domainShape = domain;
    grp.reduced = reduced;
    grp.order = nextOrder++;
    groups.push_back(grp);
    return static_cast<int>(groups.size()) - 1;
  }

  void join(int gid, int node, Level lv) {
    groups[gid].members.push_back(node);
    groupOf[node] = gid;
    level[node] = lv;
  }

  static Shape keepShape(const Shape &x, const Dims &r) {
    Shape s = x;
    for (int64_t d : r) s[d] = 1;
    return s;
  }
  static Shape dropShape(const Shape &x, const Dims &r) {
    Shape s;
    for (int64_t d = 0; d < static_cast<int64_t>(x.size()); ++d) {
      if (std::find(r.begin(), r.end(), d) == r.end()) s.push_back(x[d]);
    }
    return s;
  }

  bool isConstant(int node) const {
    return g.nodes[node].op == OpKind::full && value[node] < 0 && groupOf[node] < 0;
  }

  // Order of the step that makes `node`'s value available.
  int availableAt(int node) const {
    if (groupOf[node] >= 0 && value[node] < 0) return groups[groupOf[node]].order;
    if (value[node] >= 0) return stepOrderOfValue[value[node]];
    return -1; // constants
  }

  // Can `node` join group `gid` at level `lv`? Every operand must be in the group at a
  // compatible level, a constant, or available from an earlier step.
  bool canJoin(int gid, int node, Level lv) const {
    const Group &grp = groups[gid];
    for (int in : g.nodes[node].inputs) {
      if (groupOf[in] == gid && value[in] < 0) {
        Level l = level[in];
        if (lv == Level::full && l == Level::drop) return false;
        if (lv != Level::full && l != lv) return false;
        continue;
      }
      if (groupOf[in] == gid) continue; // stored by this group: read in-group
      if (isConstant(in)) continue;
      if (availableAt(in) >= grp.order) return false;
    }
    return true;
  }

  // The level `shape` would have in group gid, if any.
  bool levelFor(int gid, const Shape &shape, Level &lv) const {
    const Group &grp = groups[gid];
    if (shape == grp.domainShape) {
      lv = Level::full;
      return true;
    }
    if (!grp.reduce) return false;
    if (shape == keepShape(grp.domainShape, grp.reduced)) {
      lv = Level::keep;
      return true;
    }
    if (shape == dropShape(grp.domainShape, grp.reduced)) {
      lv = Level::drop;
      return true;
    }
    return false;
  }

  void fuseElementwise(int node) {
    Shape shape = shapeOf(node);
    for (int in : g.nodes[node].inputs) {
      int gid = groupOf[in];
      if (gid < 0 || value[in] >= 0) continue;
      Level lv;
      if (levelFor(gid, shape, lv) && canJoin(gid, node, lv)) {
        join(gid, node, lv);
        return;
      }
    }
    join(newGroup(false, shape, {}), node, Level::full);
  }

  void fuseReduce(int node) {
    const Node &n = g.nodes[node];
    int in = n.inputs[0];
    Shape x = shapeOf(in);
    Dims r = n.op == OpKind::argmax ? Dims{n.attrs.dim} : n.attrs.dims;
    if (x.empty()) r.clear();
    bool keep = n.attrs.keepdim || r.empty();
    Level out = keep ? Level::keep : Level::drop;
    int gid = groupOf[in];
    if (gid >= 0 && value[in] < 0 && level[in] == Level::full) {
      Group &grp = groups[gid];
      bool fits = grp.domainShape == x && (grp.reduce ? grp.reduced == r : true);
      if (fits) {
        bool wasReduce = grp.reduce;
        grp.reduce = true;
        grp.reduced = r;
        if (canJoin(gid, node, Level::full)) {
          join(gid, node, out);
          return;
        }
        grp.reduce = wasReduce;
        if (!wasReduce) grp.reduced.clear();
      }
    }
    int ng = newGroup(true, x, r);
    join(ng, node, out);
  }

  // ---- step 3 and 4: library and eager steps -------------------------------------------

  static bool isPostOp(OpKind op) {
    switch (op) {
    case OpKind::relu:
    case OpKind::sigmoid:
    case OpKind::tanh:
    case OpKind::gelu:
    case OpKind::silu:
    case OpKind::exp:
    case OpKind::abs:
    case OpKind::sqrt:
    case OpKind::log:
      return true;
    case OpKind::neg: // no oneDNN post-op (cpu/LibraryStep.cpp eltwiseFor)
    case OpKind::rsqrt:
    case OpKind::reciprocal:
    case OpKind::erf:
    case OpKind::sin:
    case OpKind::cos:
    case OpKind::cast:
      RCJIT_OP_CASES(Source, Binary, Compare, Where, Reduce, Normalize, Matmul, Nn, View, Copy)
      return false;
    }
    return false;
  }

  // Folds unary `node` into the library step that wrote its operand, if it may.
  bool foldPostOp(int node) {
    const Node &n = g.nodes[node];
    if (!opts.fuseLibraryEpilogues || !isPostOp(n.op) || n.dtype != DType::f32) return false;
    int in = n.inputs[0];
    int v = value[in];
    if (v < 0 || libraryLastNode[v] != in || users[in].size() != 1 || isOutput[in]) return false;
    otherSteps[stepOrderOfValue[v]].postOps.push_back({n.op});
    value[node] = v;
    libraryLastNode[v] = node;
    return true;
  }

  void placeLibraryOrEager(int node, Step::Kind kind) {
    const Node &n = g.nodes[node];
    Step s;
    s.kind = kind;
    s.op = n.op;
    s.attrs = n.attrs;
    for (int in : n.inputs) s.operands.push_back(materialize(in));
    int order = nextOrder++;
    s.result =
        newBufferValue(shapeOf(node), n.dtype, order,
                       kind == Step::Kind::eager ? Buffer::Kind::dynamic : Buffer::Kind::arena);
    s.note = std::string(opName(n.op)) + " %" + std::to_string(node);
    value[node] = s.result;
    if (kind == Step::Kind::library) libraryLastNode[s.result] = node;
    otherSteps[order] = std::move(s);
  }

  void placeNode(int node) {
    const Node &n = g.nodes[node];
    switch (opInfo(n.op).category) {
    case OpCategory::Source:
      if (n.op == OpKind::input)
        placeInput(node);
      else if (n.op == OpKind::arange)
        placeLibraryOrEager(node, Step::Kind::eager);
      return; // `full` stays a constant until a step needs it materialized
    case OpCategory::View:
      placeView(node);
      return;
    case OpCategory::Unary:
      if (foldPostOp(node)) return;
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
      if (n.op == OpKind::contiguous) {
        int src = materialize(n.inputs[0]);
        const Value &v = p.values[src];
        value[node] = detail::isContiguous(v.shape, v.strides) ? src : copyContiguous(src);
        return;
      }
      placeCat(node);
      return;
    case OpCategory::Normalize:
    case OpCategory::Nn:
      placeLibraryOrEager(node, Step::Kind::eager);
      return;
    }
  }

  // ---- building kernels from groups ----------------------------------------------------

  // Domain order: kept dims of X, then the reduced dims.
  static Dims domainOrder(const Group &grp) {
    Dims order;
    for (int64_t d = 0; d < static_cast<int64_t>(grp.domainShape.size()); ++d) {
      if (std::find(grp.reduced.begin(), grp.reduced.end(), d) == grp.reduced.end()) {
        order.push_back(d);
      }
    }
    for (int64_t d : grp.reduced) order.push_back(d);
    return order;
  }

  // Strides of value v seen at level lv of group grp, one per domain dim.
  static std::vector<SizeExpr> mapStrides(const Group &grp, const Value &v, Level lv) {
    const Shape &x = grp.domainShape;
    Shape perX(x.size(), 0);
    if (lv == Level::drop) {
      // right-align v to the reduced shape, whose dims are X's kept dims in order
      Dims kept;
      for (int64_t d = 0; d < static_cast<int64_t>(x.size()); ++d) {
        if (std::find(grp.reduced.begin(), grp.reduced.end(), d) == grp.reduced.end()) {
          kept.push_back(d);
        }
      }
      size_t lead = kept.size() - v.shape.size();
      for (size_t i = 0; i < v.shape.size(); ++i) {
        int64_t d = kept[lead + i];
        perX[d] = (v.shape[i] == x[d] && x[d] != 1) ? v.strides[i] : 0;
      }
    } else {
      Shape target = lv == Level::keep ? keepShape(x, grp.reduced) : x;
      size_t lead = target.size() - v.shape.size();
      for (size_t i = 0; i < v.shape.size(); ++i) {
        size_t d = lead + i;
        perX[d] = (v.shape[i] == target[d] && target[d] != 1) ? v.strides[i] : 0;
      }
    }
    std::vector<SizeExpr> out;
    for (int64_t d : domainOrder(grp)) out.push_back(SizeExpr::constant(perX[d]));
    return out;
  }

  // Whether statement `id` of k varies along an inner (reduced) dim.
  static bool dependsOnInner(const LoopKernel &k, int id) {
    const KernelStmt &st = k.stmts[id];
    switch (st.kind) {
    case KernelStmt::Kind::load: {
      const KernelTensor &t = k.tensors[st.tensor];
      for (size_t d = static_cast<size_t>(k.numOuter); d < t.strides.size(); ++d) {
        if (!(t.strides[d] == SizeExpr::constant(0))) return true;
      }
      return false;
    }
    case KernelStmt::Kind::compute:
      for (int a : st.args) {
        if (dependsOnInner(k, a)) return true;
      }
      return false;
    case KernelStmt::Kind::constant:
    case KernelStmt::Kind::reduce:
    case KernelStmt::Kind::store:
      return false;
    }
    return false;
  }

  int push(LoopKernel &k, KernelStmt st) {
    k.stmts.push_back(std::move(st));
    return static_cast<int>(k.stmts.size()) - 1;
  }

  // A reduction of a value that is the same at every inner point (size-1 or broadcast
  // reduced dims, a 0-dim input): sum = v * count, mean = amax = v, argmax = 0.
  int reduceInvariant(LoopKernel &k, const KernelStmt &r) {
    int64_t count = 1;
    for (size_t d = static_cast<size_t>(k.numOuter); d < k.domain.size(); ++d) {
      count *= k.domain[d].c;
    }
    KernelStmt c;
    c.kind = KernelStmt::Kind::constant;
    c.dtype = r.dtype;
    if (r.op == OpKind::argmax) return push(k, c); // value 0
    int v = r.args[0];
    if (k.stmts[v].dtype != r.dtype) {
      KernelStmt cast;
      cast.kind = KernelStmt::Kind::compute;
      cast.op = OpKind::cast;
      cast.dtype = r.dtype;
      cast.args = {v};
      v = push(k, cast);
    }
    KernelStmt out;
    out.kind = KernelStmt::Kind::compute;
    out.dtype = r.dtype;
    if (r.op == OpKind::sum) {
      c.value = static_cast<double>(count);
      out.op = OpKind::mul;
      out.args = {v, push(k, c)};
    } else { // mean, amax: the value itself (x * 1 keeps a fresh statement)
      c.value = 1.0;
      out.op = OpKind::mul;
      out.args = {v, push(k, c)};
    }
    return push(k, out);
  }

  void buildKernel(int gid, Step &step) {
    const Group &grp = groups[gid];
    LoopKernel k;
    k.name = "k" + std::to_string(gid);
    for (int64_t d : domainOrder(grp)) k.domain.push_back(SizeExpr::constant(grp.domainShape[d]));
    k.numOuter = static_cast<int>(grp.domainShape.size() - grp.reduced.size());
    std::map<int, int> stmtOf;                 // node -> stmt
    std::map<std::pair<int, int>, int> loadOf; // (value, level) -> stmt
    auto addTensor = [&](int v, Level lv, bool output) {
      KernelTensor t;
      t.dtype = p.values[v].dtype;
      t.strides = mapStrides(grp, p.values[v], lv);
      t.output = output;
      k.tensors.push_back(t);
      step.operands.push_back(v);
      return static_cast<int>(k.tensors.size()) - 1;
    };
    auto operand = [&](int in, Level lv) {
      auto it = stmtOf.find(in);
      if (it != stmtOf.end()) return it->second;
      KernelStmt s;
      if (isConstant(in)) {
        s.kind = KernelStmt::Kind::constant;
        s.dtype = g.nodes[in].dtype;
        s.value = g.nodes[in].attrs.value;
        k.stmts.push_back(s);
        return stmtOf[in] = static_cast<int>(k.stmts.size()) - 1;
      }
      int v = value[in];
      Level useLv = lv;
      auto key = std::make_pair(v, static_cast<int>(useLv));
      auto lit = loadOf.find(key);
      if (lit != loadOf.end()) return lit->second;
      s.kind = KernelStmt::Kind::load;
      s.dtype = p.values[v].dtype;
      s.tensor = addTensor(v, useLv, false);
      k.stmts.push_back(s);
      return loadOf[key] = static_cast<int>(k.stmts.size()) - 1;
    };
    for (int node : grp.members) {
      const Node &n = g.nodes[node];
      KernelStmt s;
      s.dtype = n.dtype;
      s.op = n.op;
      if (n.op == OpKind::full) {
        s.kind = KernelStmt::Kind::constant;
        s.value = n.attrs.value;
      } else {
        Level opLevel = opInfo(n.op).category == OpCategory::Reduce ? Level::full : level[node];
        for (int in : n.inputs) {
          bool inGroup = groupOf[in] == gid && stmtOf.count(in);
          s.args.push_back(inGroup ? stmtOf[in] : operand(in, opLevel));
        }
        s.kind = opInfo(n.op).category == OpCategory::Reduce ? KernelStmt::Kind::reduce
                                                             : KernelStmt::Kind::compute;
      }
      int id = s.kind == KernelStmt::Kind::reduce && !dependsOnInner(k, s.args[0])
                   ? reduceInvariant(k, s)
                   : (k.stmts.push_back(s), static_cast<int>(k.stmts.size()) - 1);
      stmtOf[node] = id;
      if (needsStore[node]) {
        KernelStmt st;
        st.kind = KernelStmt::Kind::store;
        st.args = {id};
        st.dtype = n.dtype;
        st.tensor = addTensor(value[node], level[node], true);
        k.stmts.push_back(st);
      }
    }
    for (const CopyKernel &c : copyKernels) {
      if (c.group != gid) continue;
      KernelStmt ld;
      ld.kind = KernelStmt::Kind::load;
      ld.dtype = p.values[c.src].dtype;
      ld.tensor = addTensor(c.src, Level::full, false);
      k.stmts.push_back(ld);
      KernelStmt st;
      st.kind = KernelStmt::Kind::store;
      st.args = {static_cast<int>(k.stmts.size()) - 1};
      st.dtype = ld.dtype;
      st.tensor = addTensor(c.dst, Level::full, true);
      k.stmts.push_back(st);
    }
    verifyKernel(k);
    step.kind = Step::Kind::kernel;
    step.kernel = static_cast<int>(p.kernels.size());
    std::ostringstream note;
    note << "kernel " << k.name << " {";
    for (size_t i = 0; i < grp.members.size(); ++i) {
      note << (i ? ", " : "") << opName(g.nodes[grp.members[i]].op) << " %" << grp.members[i];
    }
    note << "}";
    step.note = note.str();
    p.kernels.push_back(std::move(k));
  }

  // ---- step 5: buffers -----------------------------------------------------------------

  void planOutputs() {
    for (int o : g.outputs) {
      int v = materialize(o);
      Buffer &b = p.buffers[p.values[v].buffer];
      if (b.kind == Buffer::Kind::arena) b.kind = Buffer::Kind::output;
      p.outputs.push_back(v);
    }
  }

  Program run() {
    for (size_t i = 0; i < g.nodes.size(); ++i) placeNode(static_cast<int>(i));
    planOutputs();
    // values used by steps outside their group must be stored by it
    for (size_t i = 0; i < g.nodes.size(); ++i) {
      if (groupOf[i] < 0 || value[i] >= 0) continue;
      for (int u : users[i]) {
        if (groupOf[u] != groupOf[i]) materialize(static_cast<int>(i));
      }
    }
    std::map<int, Step> ordered = std::move(otherSteps);
    for (size_t gid = 0; gid < groups.size(); ++gid) {
      if (groups[gid].members.empty() && !hasCopy(static_cast<int>(gid))) continue;
      Step s;
      buildKernel(static_cast<int>(gid), s);
      ordered[groups[gid].order] = std::move(s);
    }
    for (auto &[order, s] : ordered) p.steps.push_back(std::move(s));
    planArena(p);
    return std::move(p);
  }

  bool hasCopy(int gid) const {
    for (const CopyKernel &c : copyKernels) {
      if (c.group == gid) return true;
    }
    return false;
  }
};

} // namespace

void planArena(Program &p) {
  size_t nb = p.buffers.size();
  std::vector<int> first(nb, INT32_MAX), last(nb, -1);
  for (size_t s = 0; s < p.steps.size(); ++s) {
    const Step &st = p.steps[s];
    std::vector<int> vs = st.operands;
    if (st.result >= 0) vs.push_back(st.result);
    for (int v : vs) {
      int b = p.values[v].buffer;
      first[b] = std::min(first[b], static_cast<int>(s));
      last[b] = std::max(last[b], static_cast<int>(s));
    }
  }
  // Greedy first fit over step positions: a block is free after its last use.
  struct Block {
    int64_t offset, bytes;
    int freeAfter;
  };
  std::vector<Block> blocks;
  std::vector<int> byFirst;
  for (size_t b = 0; b < nb; ++b) {
    if (p.buffers[b].kind == Buffer::Kind::arena && last[b] >= 0)
      byFirst.push_back(static_cast<int>(b));
  }
  std::sort(byFirst.begin(), byFirst.end(), [&](int a, int b) { return first[a] < first[b]; });
  int64_t top = 0;
  for (int b : byFirst) {
    int64_t bytes = (p.buffers[b].bytes + 63) / 64 * 64;
    bool placed = false;
    for (Block &blk : blocks) {
      if (blk.freeAfter < first[b] && blk.bytes >= bytes) {
        p.buffers[b].offset = blk.offset;
        blk.freeAfter = last[b];
        placed = true;
        break;
      }
    }
    if (!placed) {
      p.buffers[b].offset = top;
      blocks.push_back({top, bytes, last[b]});
      top += bytes;
    }
  }
  p.arenaBytes = top;
}

LowerOptions lowerOptionsFor(Target t) {
  LowerOptions o;
  o.fuseLibraryEpilogues = t == Target::cpu;
  return o;
}

Program lower(const Graph &g, const std::vector<Shape> &inputStrides, const LowerOptions &opts) {
  for (const Node &n : g.nodes) {
    for (const Dim &d : n.shape) {
      if (d.isSymbolic()) {
        throw Error("lower: symbolic shapes are not supported by this lowering yet");
      }
    }
  }
  Lowering l(g, inputStrides, opts);
  return l.run();
}

std::string printProgram(const Program &p) {
  std::ostringstream os;
  os << "program: " << p.numInputs << " inputs, " << p.steps.size() << " steps, "
     << p.kernels.size() << " kernels, arena " << p.arenaBytes << " bytes\n";
  for (size_t i = 0; i < p.steps.size(); ++i) {
    const Step &s = p.steps[i];
    os << "  step " << i << ": ";
    switch (s.kind) {
    case Step::Kind::kernel:
      os << s.note;
      break;
    case Step::Kind::library:
      os << "library " << s.note;
      for (const PostOp &po : s.postOps) os << " +" << opName(po.op);
      break;
    case Step::Kind::eager:
      os << "eager " << s.note;
      break;
    }
    os << "\n";
  }
  return os.str();
}

} // namespace rcjit
