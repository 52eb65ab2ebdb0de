// LoopKernel helpers: size evaluation, the readable text form and the invariant checker.
#include "targets/LoopKernel.h"

#include <cctype>
#include <sstream>

#include <rcjit/Error.h>

#include "tracer/OpCases.h"

namespace rcjit {

int64_t evalSize(const SizeExpr &e, const int64_t *syms) {
  int64_t v = e.c;
  for (int32_t s : e.syms) v *= syms[s];
  return v + e.add;
}

int64_t LoopKernel::outerSize(const int64_t *syms) const {
  int64_t n = 1;
  for (int d = 0; d < numOuter; ++d) n *= evalSize(domain[d], syms);
  return n;
}

namespace {

std::string sizeStr(const SizeExpr &e) {
  std::string out;
  if (e.c != 1 || e.syms.empty()) out = std::to_string(e.c);
  for (int32_t s : e.syms) out += (out.empty() ? "s" : "*s") + std::to_string(s);
  if (e.add != 0) out += (e.add > 0 ? "+" : "") + std::to_string(e.add);
  return out;
}

std::string sizesStr(const std::vector<SizeExpr> &v, size_t split) {
  std::string out = "[";
  for (size_t i = 0; i < v.size(); ++i) {
    if (i == split)
      out += i ? " | " : "| ";
    else if (i)
      out += ", ";
    out += sizeStr(v[i]);
  }
  return out + "]";
}

void printStmt(std::ostringstream &os, const KernelStmt &s, size_t i) {
  using K = KernelStmt::Kind;
  os << "  ";
  if (s.kind != K::store && s.kind != K::scatterAdd) os << "%" << i << " = ";
  if (s.kind == K::load)
    os << "load t" << s.tensor;
  else if (s.kind == K::gather)
    os << "gather t" << s.tensor << ",";
  else if (s.kind == K::scatterAdd)
    os << "scatter_add t" << s.tensor << ",";
  else if (s.kind == K::constant)
    os << "constant " << s.value;
  else if (s.kind == K::store)
    os << "store t" << s.tensor << ",";
  else if (s.kind == K::count)
    os << "count";
  else
    os << opName(s.op);
  for (size_t a = 0; a < s.args.size(); ++a) os << (a ? ", %" : " %") << s.args[a];
  os << " : " << dtypeName(s.dtype) << "\n";
}

[[noreturn]] void fail(const LoopKernel &k, const std::string &what) {
  throw Error("invalid loop kernel '" + k.name + "': " + what);
}

bool isSymbolName(const std::string &n) {
  if (n.empty() || std::isdigit(static_cast<unsigned char>(n[0]))) return false;
  for (char c : n) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '.') return false;
  }
  return true;
}

bool hasInnerStride(const LoopKernel &k, const KernelTensor &t) {
  for (size_t d = k.numOuter; d < k.domain.size(); ++d) {
    if (t.strides[d] != SizeExpr::constant(0)) return true;
  }
  return false;
}

void verifyTensors(const LoopKernel &k) {
  for (size_t i = 0; i < k.tensors.size(); ++i) {
    if (k.tensors[i].strides.size() != k.domain.size()) {
      fail(k, "tensor t" + std::to_string(i) + " has " +
                  std::to_string(k.tensors[i].strides.size()) + " strides for a domain of rank " +
                  std::to_string(k.domain.size()));
    }
  }
}

void verifyArgs(const LoopKernel &k, const KernelStmt &s, size_t i) {
  using K = KernelStmt::Kind;
  size_t want = 0;
  if (s.kind == K::store || s.kind == K::reduce || s.kind == K::gather) want = 1;
  if (s.kind == K::scatterAdd) want = 2;
  if (s.kind == K::compute) {
    OpCategory c = opInfo(s.op).category;
    if (c != OpCategory::Unary && c != OpCategory::Binary && c != OpCategory::Compare &&
        c != OpCategory::Where) {
      fail(k, "statement %" + std::to_string(i) + ": op " + std::string(opName(s.op)) +
                  " is not elementwise");
    }
    want = static_cast<size_t>(opInfo(s.op).arity);
  }
  if (s.args.size() != want) {
    fail(k, "statement %" + std::to_string(i) + " has " + std::to_string(s.args.size()) +
                " args, expected " + std::to_string(want));
  }
  for (int a : s.args) {
    if (a < 0 || static_cast<size_t>(a) >= i) {
      fail(k, "statement %" + std::to_string(i) + " uses %" + std::to_string(a) +
                  ", which is not an earlier statement");
    }
    if (k.stmts[a].kind == K::store || k.stmts[a].kind == K::scatterAdd) {
      fail(k, "statement %" + std::to_string(i) + " uses the store %" + std::to_string(a));
    }
  }
}

void verifyTensorUse(const LoopKernel &k, const KernelStmt &s, size_t i) {
  using K = KernelStmt::Kind;
  if (s.kind != K::load && s.kind != K::store && s.kind != K::gather && s.kind != K::scatterAdd)
    return;
  if (s.tensor < 0 || static_cast<size_t>(s.tensor) >= k.tensors.size()) {
    fail(k, "statement %" + std::to_string(i) + " names tensor t" + std::to_string(s.tensor) +
                " of " + std::to_string(k.tensors.size()));
  }
  const KernelTensor &t = k.tensors[s.tensor];
  const bool writes = s.kind == K::store || s.kind == K::scatterAdd;
  if (t.output != writes) {
    fail(k, "statement %" + std::to_string(i) +
                (writes ? " stores to input t" : " loads from output t") +
                std::to_string(s.tensor));
  }
  const bool indexed = s.kind == K::gather || s.kind == K::scatterAdd;
  if (t.iota && s.kind != K::load)
    fail(k, "statement %" + std::to_string(i) + " writes or indexes t" + std::to_string(s.tensor) +
                ", an arange's values (iota)");
  if (t.indexed != indexed) {
    fail(k, "statement %" + std::to_string(i) + (indexed ? " indexes t" : " addresses t") +
                std::to_string(s.tensor) +
                (indexed ? ", which has no rows" : " by the domain alone, but it has rows"));
  }
  if (indexed) {
    if (t.rows.isConstant() && t.rows.c + t.rows.add < 1)
      fail(k, "statement %" + std::to_string(i) + " indexes t" + std::to_string(s.tensor) +
                  ", a table without rows");
    if (k.numOuter != static_cast<int>(k.domain.size()))
      fail(k, "statement %" + std::to_string(i) + " indexes a table in a reducing kernel");
    if (k.stmts[s.args[0]].dtype != DType::i64)
      fail(k, "statement %" + std::to_string(i) + ": the row index must be i64");
    if (s.kind == K::scatterAdd && t.dtype != DType::f32 && t.dtype != DType::f64)
      fail(k, "statement %" + std::to_string(i) + ": scatter_add takes an f32 or f64 table");
  }
  if (s.dtype != t.dtype) {
    fail(k, "statement %" + std::to_string(i) + " has dtype " + std::string(dtypeName(s.dtype)) +
                " but t" + std::to_string(s.tensor) + " is " + std::string(dtypeName(t.dtype)));
  }
}

// The reductions a loop kernel computes; each has its accumulator in LoopCodegen.cpp
// (Reduction) and its invariant form in Lower.cpp (reduceInvariant).
bool isLoopReduction(OpKind op) {
  switch (op) {
  case OpKind::sum:
  case OpKind::mean:
  case OpKind::amax:
  case OpKind::argmax:
    return true;
    RCJIT_OP_CASES(Source, Unary, Binary, Compare, Where, Normalize, Matmul, Nn, View, Copy,
                   Collective)
    return false;
  }
  return false;
}

void verifyOp(const LoopKernel &k, const KernelStmt &s, size_t i) {
  using K = KernelStmt::Kind;
  std::string at = "statement %" + std::to_string(i) + ": ";
  if (s.kind == K::reduce) {
    if (!isLoopReduction(s.op)) fail(k, at + std::string(opName(s.op)) + " is not a reduction");
    if (s.op == OpKind::argmax && s.dtype != DType::i64) fail(k, at + "argmax must yield i64");
  }
  if (s.kind == K::compute && opInfo(s.op).category == OpCategory::Compare &&
      s.dtype != DType::boolean) {
    fail(k, at + "a comparison must yield bool");
  }
  if (s.kind == K::compute && s.op == OpKind::where && k.stmts[s.args[0]].dtype != DType::boolean) {
    fail(k, at + "the condition of where must be bool");
  }
}

} // namespace

std::string printKernel(const LoopKernel &k) {
  std::ostringstream os;
  os << "kernel " << k.name << " domain " << sizesStr(k.domain, k.numOuter) << "\n";
  for (size_t i = 0; i < k.tensors.size(); ++i) {
    const KernelTensor &t = k.tensors[i];
    os << "  t" << i << ": " << dtypeName(t.dtype) << (t.output ? " out" : " in") << " strides "
       << sizesStr(t.strides, k.numOuter);
    if (t.indexed) os << " rows " << sizeStr(t.rows) << " of stride " << sizeStr(t.rowStride);
    if (t.iota) os << " iota";
    os << "\n";
  }
  for (size_t i = 0; i < k.stmts.size(); ++i) printStmt(os, k.stmts[i], i);
  return os.str();
}

void verifyKernel(const LoopKernel &k) {
  using K = KernelStmt::Kind;
  if (!isSymbolName(k.name)) fail(k, "the name is not a valid symbol");
  if (k.numOuter < 0 || static_cast<size_t>(k.numOuter) > k.domain.size()) {
    fail(k, "numOuter " + std::to_string(k.numOuter) + " is outside [0, " +
                std::to_string(k.domain.size()) + "]");
  }
  verifyTensors(k);
  std::vector<bool> inner(k.stmts.size(), false);
  for (size_t i = 0; i < k.stmts.size(); ++i) {
    const KernelStmt &s = k.stmts[i];
    verifyArgs(k, s, i);
    verifyTensorUse(k, s, i);
    verifyOp(k, s, i);
    for (int a : s.args) inner[i] = inner[i] || inner[a];
    if (s.kind == K::load || s.kind == K::gather)
      inner[i] = inner[i] || hasInnerStride(k, k.tensors[s.tensor]);
    if (s.kind == K::reduce) {
      if (!inner[s.args[0]]) {
        fail(k, "statement %" + std::to_string(i) + " reduces %" + std::to_string(s.args[0]) +
                    ", which does not depend on an inner dim");
      }
      inner[i] = false;
    }
  }
}

} // namespace rcjit
