// The build-kernels step of lowering: one LoopKernel per fusion group (its members as
// statements, loads and stores mapped onto the group's domain), and the steps in order.
#include <algorithm>
#include <functional>
#include <map>
#include <sstream>

#include "targets/lower/Lowering.h"

namespace rcjit::lowering {

namespace {

// Domain order: kept dims of X, then the reduced dims.
Dims domainOrder(const FusionGroup &grp) {
  Dims order;
  for (int64_t d = 0; d < static_cast<int64_t>(grp.domain.size()); ++d) {
    if (std::find(grp.reduced.begin(), grp.reduced.end(), d) == grp.reduced.end()) {
      order.push_back(d);
    }
  }
  for (int64_t d : grp.reduced) order.push_back(d);
  return order;
}

// Strides of value v seen at level lv of group grp, one per domain dim.
std::vector<SizeExpr> mapStrides(const FusionGroup &grp, const Value &v, Level lv) {
  const Shape &x = grp.domain;
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
bool dependsOnInner(const LoopKernel &k, int id) {
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
  case KernelStmt::Kind::count:
  case KernelStmt::Kind::reduce:
  case KernelStmt::Kind::store:
  case KernelStmt::Kind::gather: // only in the indexing kernels, which have no inner dims
  case KernelStmt::Kind::scatterAdd:
    return false;
  }
  return false;
}

int push(LoopKernel &k, KernelStmt st) {
  k.stmts.push_back(std::move(st));
  return static_cast<int>(k.stmts.size()) - 1;
}

} // namespace

void Lowering::buildKernels() {
  std::map<int, Step> ordered = std::move(otherSteps);
  for (size_t gid = 0; gid < plan.groups.size(); ++gid) {
    if (plan.groups[gid].members.empty() && !hasCopy(static_cast<int>(gid))) continue;
    Step s;
    buildKernel(static_cast<int>(gid), s);
    ordered[plan.groups[gid].order] = std::move(s);
  }
  for (auto &[order, s] : ordered) p.steps.push_back(std::move(s));
  placeWaits();
}

// Each collective step gets a wait step just before the first later step that reads its
// result's buffer (a view of the result reads it too), or at the end when none does.
void Lowering::placeWaits() {
  std::vector<Step> steps;
  steps.reserve(p.steps.size());
  struct Pending {
    int start;  // index in `steps` of the collective step
    int buffer; // its result's buffer
  };
  std::vector<Pending> pending;
  auto waitFor = [&](const Pending &c) {
    const Step &start = steps[static_cast<size_t>(c.start)];
    Step w;
    w.kind = Step::Kind::wait;
    w.kernel = c.start;
    w.op = start.op;
    w.attrs = start.attrs;
    w.operands = {start.operands.at(0), start.result};
    w.note = start.note;
    steps.push_back(std::move(w));
  };
  for (Step &s : p.steps) {
    for (size_t i = 0; i < pending.size();) {
      bool reads = false;
      for (int v : s.operands) reads = reads || p.values[v].buffer == pending[i].buffer;
      if (reads) {
        waitFor(pending[i]);
        pending.erase(pending.begin() + static_cast<std::ptrdiff_t>(i));
      } else {
        ++i;
      }
    }
    const bool starts = s.kind == Step::Kind::collective;
    steps.push_back(std::move(s));
    if (starts) {
      pending.push_back({static_cast<int>(steps.size()) - 1, p.values[steps.back().result].buffer});
    }
  }
  for (const Pending &c : pending) waitFor(c);
  p.steps = std::move(steps);
}

bool Lowering::viewsArange(int node) const {
  int root = node;
  while (opInfo(g.nodes[root].op).category == OpCategory::View) root = g.nodes[root].inputs[0];
  if (g.nodes[root].op != OpKind::arange || value[node] < 0 || value[root] < 0) return false;
  const Value &v = p.values[value[node]], &a = p.values[value[root]];
  return v.buffer == a.buffer && v.offset == a.offset && v.dtype == a.dtype &&
         a.strides == Shape{1};
}

bool Lowering::hasCopy(int gid) const {
  for (const CopyKernel &c : copyKernels) {
    if (c.group == gid) return true;
  }
  return false;
}

// A reduction of a value that is the same at every inner point (size-1 or broadcast
// reduced dims, a 0-dim input): sum = v * count, mean = amax = v, argmax = 0. The count is a
// `count` statement, not a literal, so that the kernel is the same at every size and a
// symbolic program's count follows its symbols (the ONNX importer's sizes are such sums).
int Lowering::reduceInvariant(LoopKernel &k, const KernelStmt &r) {
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
  // sum: v * count; mean, amax: the value itself (x * 1 keeps a fresh statement)
  if (r.op == OpKind::sum) {
    c.kind = KernelStmt::Kind::count;
  } else {
    c.value = 1.0;
  }
  out.op = OpKind::mul;
  out.args = {v, push(k, c)};
  return push(k, out);
}

void Lowering::buildKernel(int gid, Step &step) {
  const FusionGroup &grp = plan.groups[gid];
  LoopKernel k;
  k.name = "k" + std::to_string(gid);
  for (int64_t d : domainOrder(grp)) k.domain.push_back(SizeExpr::constant(grp.domain[d]));
  k.numOuter = static_cast<int>(grp.domain.size() - grp.reduced.size());
  std::map<int, int> stmtOf;                 // node -> stmt
  std::map<std::pair<int, int>, int> loadOf; // (value, level) -> stmt
  auto addTensor = [&](int v, Level lv, bool output, bool iota = false) {
    KernelTensor t;
    t.dtype = p.values[v].dtype;
    t.strides = mapStrides(grp, p.values[v], lv);
    t.output = output;
    t.iota = iota;
    k.tensors.push_back(t);
    step.operands.push_back(v);
    return static_cast<int>(k.tensors.size()) - 1;
  };
  // a node of another group this kernel computes again (its operands first), at full level
  std::function<int(int, Level)> operand;
  auto recompute = [&](int in) {
    const Node &n = g.nodes[in];
    KernelStmt s;
    s.kind = KernelStmt::Kind::compute;
    s.op = n.op;
    s.dtype = n.dtype;
    for (int a : n.inputs) s.args.push_back(operand(a, Level::full));
    return stmtOf[in] = push(k, s);
  };
  operand = [&](int in, Level lv) {
    auto it = stmtOf.find(in);
    if (it != stmtOf.end()) return it->second;
    if (value[in] < 0 && groupOf[in] != gid &&
        std::binary_search(grp.recomputed.begin(), grp.recomputed.end(), in))
      return recompute(in);
    KernelStmt s;
    if (isConstant(in)) {
      s.kind = KernelStmt::Kind::constant;
      s.dtype = g.nodes[in].dtype;
      s.value = g.nodes[in].attrs.value;
      return stmtOf[in] = push(k, s);
    }
    int v = value[in];
    auto key = std::make_pair(v, static_cast<int>(lv));
    auto lit = loadOf.find(key);
    if (lit != loadOf.end()) return lit->second;
    s.kind = KernelStmt::Kind::load;
    s.dtype = p.values[v].dtype;
    s.tensor = addTensor(v, lv, false, viewsArange(in));
    return loadOf[key] = push(k, s);
  };
  for (int node : grp.members) {
    const Node &n = g.nodes[node];
    KernelStmt s;
    s.dtype = n.dtype;
    s.op = n.op;
    bool isReduce = opInfo(n.op).category == OpCategory::Reduce;
    if (n.op == OpKind::full) {
      s.kind = KernelStmt::Kind::constant;
      s.value = n.attrs.value;
    } else {
      Level opLevel = isReduce ? Level::full : level[node];
      for (int in : n.inputs) {
        bool inGroup = groupOf[in] == gid && stmtOf.count(in);
        s.args.push_back(inGroup ? stmtOf[in] : operand(in, opLevel));
      }
      s.kind = isReduce ? KernelStmt::Kind::reduce : KernelStmt::Kind::compute;
    }
    int id = s.kind == KernelStmt::Kind::reduce && !dependsOnInner(k, s.args[0])
                 ? reduceInvariant(k, s)
                 : push(k, s);
    stmtOf[node] = id;
    if (needsStore[node]) {
      KernelStmt st;
      st.kind = KernelStmt::Kind::store;
      st.args = {id};
      st.dtype = n.dtype;
      st.tensor = addTensor(value[node], level[node], true);
      push(k, st);
    }
  }
  for (const CopyKernel &c : copyKernels) {
    if (c.group != gid) continue;
    KernelStmt ld;
    ld.kind = KernelStmt::Kind::load;
    ld.dtype = p.values[c.src].dtype;
    ld.tensor = addTensor(c.src, Level::full, false);
    int loaded = push(k, ld);
    KernelStmt st;
    st.kind = KernelStmt::Kind::store;
    st.args = {loaded};
    st.dtype = ld.dtype;
    st.tensor = addTensor(c.dst, Level::full, true);
    push(k, st);
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

} // namespace rcjit::lowering
