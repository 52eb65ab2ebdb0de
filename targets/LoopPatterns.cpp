// The loop shapes whose loops a target may emit itself instead of the generic passes
// (KernelBody::contraction: a small product, the CPU's register-blocked loop;
// KernelBody::columnSum: a sum over the rows, the CPU's column loop): recognized here,
// target-neutrally, from the kernel's statements and strides.
#include <optional>

#include "targets/LoopCodegen.h"

namespace rcjit::codegen {

using K = KernelStmt::Kind;

namespace {

// Whether a load under statement `s` varies along domain dim `d` (pred: its stride there).
template <class Pred> bool anyLoadUnder(const LoopKernel &k, int s, Pred &&pred) {
  const KernelStmt &st = k.stmts[s];
  if (st.kind == K::load) return pred(k.tensors[st.tensor]);
  for (int a : st.args) {
    if (anyLoadUnder(k, a, pred)) return true;
  }
  return false;
}

} // namespace

std::optional<KernelBody::Contraction> KernelBody::contraction() const {
  const LoopKernel &k = k_;
  const int outer = k.numOuter;
  if (split_ || outer < 1 || static_cast<int>(k.domain.size()) != outer + 1 || numPasses_ != 1)
    return std::nullopt;
  const SizeExpr &n = k.domain[outer - 1], &depth = k.domain[outer];
  if (!n.isConstant() || !depth.isConstant()) return std::nullopt;
  Contraction c;
  for (size_t s = 0; s < k.stmts.size(); ++s) {
    const KernelStmt &st = k.stmts[s];
    if (st.kind == K::store && inner_[s]) return std::nullopt;
    if (st.kind != K::reduce) continue;
    if (c.reduce >= 0) return std::nullopt;
    c.reduce = static_cast<int>(s);
  }
  if (c.reduce < 0) return std::nullopt;
  const KernelStmt &r = k.stmts[c.reduce];
  if (r.op != OpKind::sum || r.dtype != DType::f32) return std::nullopt;
  const KernelStmt &m = k.stmts[r.args[0]];
  if (m.kind != K::compute || m.op != OpKind::mul || m.dtype != DType::f32 || m.args.size() != 2)
    return std::nullopt;
  for (int a : m.args) {
    if (k.stmts[a].dtype != DType::f32) return std::nullopt;
  }
  const size_t j = static_cast<size_t>(outer - 1);
  auto alongJ = [j](const KernelTensor &t) { return t.strides[j] != SizeExpr::constant(0); };
  const bool xj = anyLoadUnder(k, m.args[0], alongJ), yj = anyLoadUnder(k, m.args[1], alongJ);
  if (xj == yj) return std::nullopt;
  c.row = xj ? m.args[1] : m.args[0];
  c.col = xj ? m.args[0] : m.args[1];
  c.n = n.c;
  c.k = depth.c;
  const KernelStmt &col = k.stmts[c.col];
  c.colUnitLoad = col.kind == K::load && col.dtype == DType::f32 && !k.tensors[col.tensor].iota &&
                  k.tensors[col.tensor].strides[j] == SizeExpr::constant(1);
  c.colRowFree = !anyLoadUnder(k, c.col, [j](const KernelTensor &t) {
    for (size_t d = 0; d < j; ++d) {
      if (t.strides[d] != SizeExpr::constant(0)) return true;
    }
    return false;
  });
  return c;
}

std::optional<KernelBody::ColumnSum> KernelBody::columnSum() const {
  const LoopKernel &k = k_;
  const int outer = k.numOuter;
  if (split_ || outer < 1 || static_cast<int>(k.domain.size()) != outer + 1 || numPasses_ != 1)
    return std::nullopt;
  ColumnSum c;
  for (size_t s = 0; s < k.stmts.size(); ++s) {
    const KernelStmt &st = k.stmts[s];
    if ((st.kind == K::store && inner_[s]) || st.kind == K::gather || st.kind == K::scatterAdd)
      return std::nullopt;
    if (st.kind != K::reduce) continue;
    if (c.reduce >= 0) return std::nullopt;
    c.reduce = static_cast<int>(s);
  }
  if (c.reduce < 0) return std::nullopt;
  const KernelStmt &r = k.stmts[c.reduce];
  if (r.op != OpKind::sum || r.dtype != DType::f32 || k.stmts[r.args[0]].dtype != DType::f32)
    return std::nullopt;
  c.value = r.args[0];
  const size_t j = static_cast<size_t>(outer - 1), inner = static_cast<size_t>(outer);
  const SizeExpr zero = SizeExpr::constant(0), one = SizeExpr::constant(1);
  bool alongJ = true, column = false;
  anyLoadUnder(k, c.value, [&](const KernelTensor &t) {
    alongJ = alongJ && (t.strides[j] == zero || t.strides[j] == one);
    column = column || (t.strides[j] == one && t.strides[inner] != zero);
    return false; // every load
  });
  if (!alongJ || !column) return std::nullopt;
  return c;
}

} // namespace rcjit::codegen
