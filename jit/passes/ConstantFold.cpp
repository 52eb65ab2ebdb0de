// constantFold: evaluates elementwise ops of one-element constants with eager::run.
#include "jit/passes/ConstantFold.h"

#include "targets/eager/Eager.h"
#include "tracer/OpKind.h"

namespace rcjit {

bool isScalarConstant(const Node &n) {
  if (n.op != OpKind::full) return false;
  for (const Dim &d : n.shape) {
    if (d.isSymbolic() || d.value != 1) return false;
  }
  return true;
}

namespace {

bool foldable(const Graph &g, const Node &n) {
  if (!isElementwise(n.op) || n.inputs.empty()) return false;
  for (int i : n.inputs) {
    if (!isScalarConstant(g.nodes[i])) return false;
  }
  return true;
}

TensorMeta metaOf(const Node &n) { return {n.dtype, concreteShape(n.shape)}; }

/// The value of foldable node `n` over the (already folded) constants of `g`.
double evaluate(const Graph &g, const Node &n) {
  std::vector<Tensor> in;
  for (int i : n.inputs) {
    const Node &c = g.nodes[i];
    in.push_back(eager::run(OpKind::full, {}, c.attrs, metaOf(c)));
  }
  return eager::run(n.op, in, n.attrs, metaOf(n)).item();
}

} // namespace

Graph constantFold(const Graph &g) {
  Graph out = g;
  bool changed = false;
  for (Node &n : out.nodes) {
    if (!foldable(out, n)) continue;
    double v = evaluate(out, n);
    n.op = OpKind::full;
    n.inputs.clear();
    n.attrs = Attrs{};
    n.attrs.value = v;
    changed = true;
  }
  return changed ? out : g;
}

} // namespace rcjit
