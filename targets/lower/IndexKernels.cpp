// The embedding lookup and its gradient as loop kernels, for targets that run no eager step
// (cuda; LowerOptions::indexKernels). The lookup is one kernel over ids x dim whose `gather`
// reads the row each id picks. The gradient is a kernel that starts the table (zeros, or the
// base it accumulates into), one over the gradient's rows that adds each into its id's row
// with an atomic `scatterAdd`, and for an f16/bf16 gradient a last kernel that rounds the f32
// sums: the CPU's eager op also sums in f32 and rounds once.
#include <algorithm>

#include <rcjit/Error.h>

#include "targets/lower/Lowering.h"

namespace rcjit::lowering {

namespace {

// Value `v`'s strides over a domain whose leading dims are v's dims (0 along the rest and
// along v's size-1 dims).
std::vector<SizeExpr> leading(const Value &v, size_t rank) {
  std::vector<SizeExpr> out(rank, SizeExpr::constant(0));
  for (size_t i = 0; i < v.shape.size(); ++i) {
    if (v.shape[i] != 1) out[i] = SizeExpr::constant(v.strides[i]);
  }
  return out;
}

// A kernel under construction with the step that runs it.
struct IndexKernel {
  LoopKernel k;
  Step step;

  IndexKernel(const std::string &name, const Shape &domain) {
    k.name = name;
    for (int64_t d : domain) k.domain.push_back(SizeExpr::constant(d));
    k.numOuter = static_cast<int>(domain.size());
  }
  int tensor(int value, DType dtype, std::vector<SizeExpr> strides, bool output) {
    KernelTensor t;
    t.dtype = dtype;
    t.strides = std::move(strides);
    t.output = output;
    k.tensors.push_back(std::move(t));
    step.operands.push_back(value);
    return static_cast<int>(k.tensors.size()) - 1;
  }
  // a table whose rows the index picks: `rowStride` apart, `rows` of them
  int table(int value, DType dtype, std::vector<SizeExpr> strides, bool output, int64_t rowStride,
            int64_t rows) {
    int t = tensor(value, dtype, std::move(strides), output);
    k.tensors[t].indexed = true;
    k.tensors[t].rowStride = SizeExpr::constant(rowStride);
    k.tensors[t].rows = SizeExpr::constant(rows);
    return t;
  }
  int stmt(KernelStmt::Kind kind, DType dtype, std::vector<int> args, int tensor = -1,
           OpKind op = OpKind::add, double value = 0) {
    KernelStmt s;
    s.kind = kind;
    s.dtype = dtype;
    s.args = std::move(args);
    s.tensor = tensor;
    s.op = op;
    s.value = value;
    k.stmts.push_back(std::move(s));
    return static_cast<int>(k.stmts.size()) - 1;
  }
  int load(int t) { return stmt(KernelStmt::Kind::load, k.tensors[t].dtype, {}, t); }
  void store(int t, int arg) { stmt(KernelStmt::Kind::store, k.tensors[t].dtype, {arg}, t); }
  // ids (i32 or i64) over the leading dims, as the i64 row index
  int rowIndex(const Program &p, int ids) {
    const Value &v = p.values[ids];
    int id = load(tensor(ids, v.dtype, leading(v, k.domain.size()), false));
    if (v.dtype == DType::i64) return id;
    return stmt(KernelStmt::Kind::compute, DType::i64, {id}, -1, OpKind::cast);
  }
};

} // namespace

void Lowering::addKernelStep(int node, LoopKernel k, Step step) {
  verifyKernel(k);
  const int order = nextOrder++;
  step.kind = Step::Kind::kernel;
  step.kernel = static_cast<int>(p.kernels.size());
  step.note = "kernel " + k.name + " {" + nodeRef(g, node) + "}";
  p.kernels.push_back(std::move(k));
  otherSteps[order] = std::move(step);
  FusionCall c;
  c.node = node;
  c.library = false;
  c.kernel = true;
  c.order = order;
  plan.calls.push_back(c);
}

void Lowering::placeIndexed(int node) {
  const Node &n = g.nodes[node];
  const std::string tag = "x" + std::to_string(node);
  if (n.op == OpKind::embedding) {
    const int w = materialize(n.inputs[0]), ids = materialize(n.inputs[1]);
    const Value wv = p.values[w];
    const Shape out = shapeOf(node);
    const int64_t rows = wv.shape[0];
    if (rows == 0 && numelOf(out) > 0) {
      throw Error("embedding (" + nodeRef(g, node) +
                  "): the weight has no rows, so every id is out of range");
    }
    IndexKernel ik(tag, out);
    int row = ik.rowIndex(p, ids);
    std::vector<SizeExpr> ws(out.size(), SizeExpr::constant(0));
    if (wv.shape[1] != 1) ws.back() = SizeExpr::constant(wv.strides[1]);
    int t = ik.table(w, wv.dtype, ws, false, wv.strides[0], std::max<int64_t>(rows, 1));
    int got = ik.stmt(KernelStmt::Kind::gather, wv.dtype, {row}, t);
    value[node] = newBufferValue(out, n.dtype, nextOrder, Buffer::Kind::arena);
    ik.store(ik.tensor(value[node], n.dtype, leading(p.values[value[node]], out.size()), true),
             got);
    addKernelStep(node, std::move(ik.k), std::move(ik.step));
    return;
  }
  // embedding_backward(grad [..., dim], ids [...], base [num, dim]?) -> [num, dim]
  const int grad = materialize(n.inputs[0]), ids = materialize(n.inputs[1]);
  const int base = n.inputs.size() > 2 ? materialize(n.inputs[2]) : -1;
  const Shape table = shapeOf(node);
  const Shape rowsShape = p.values[grad].shape;
  const bool narrow = n.dtype != DType::f32 && n.dtype != DType::f64;
  const DType acc = narrow ? DType::f32 : n.dtype;
  const int sums = newBufferValue(table, acc, nextOrder, Buffer::Kind::arena);
  {
    IndexKernel start(tag + "_start", table);
    const int in = base >= 0 ? start.load(start.tensor(base, p.values[base].dtype,
                                                       leading(p.values[base], 2), false))
                             : start.stmt(KernelStmt::Kind::constant, acc, {});
    start.store(start.tensor(sums, acc, leading(p.values[sums], 2), true), in);
    addKernelStep(node, std::move(start.k), std::move(start.step));
  }
  if (numelOf(table) > 0) {
    IndexKernel add(tag + "_add", rowsShape);
    int row = add.rowIndex(p, ids);
    int g = add.load(
        add.tensor(grad, p.values[grad].dtype, leading(p.values[grad], rowsShape.size()), false));
    std::vector<SizeExpr> ts(rowsShape.size(), SizeExpr::constant(0));
    if (table[1] != 1) ts.back() = SizeExpr::constant(1);
    int t = add.table(sums, acc, ts, true, table[1], table[0]);
    add.stmt(KernelStmt::Kind::scatterAdd, acc, {row, g}, t);
    addKernelStep(node, std::move(add.k), std::move(add.step));
  }
  if (!narrow) {
    value[node] = sums;
    return;
  }
  value[node] = newBufferValue(table, n.dtype, nextOrder, Buffer::Kind::arena);
  IndexKernel round(tag + "_round", table);
  int s = round.load(round.tensor(sums, acc, leading(p.values[sums], 2), false));
  round.store(round.tensor(value[node], n.dtype, leading(p.values[value[node]], 2), true), s);
  addKernelStep(node, std::move(round.k), std::move(round.step));
}

} // namespace rcjit::lowering
