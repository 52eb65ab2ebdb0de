// Library steps as batched GEMMs.
#include "targets/MatmulLayout.h"

namespace rcjit {

namespace {

// Collapses dims [0, end) of v into one (count, stride) when its strides allow (size-1
// dims are skipped); false otherwise.
bool collapse(const Value &v, size_t end, int64_t &count, int64_t &stride) {
  count = 1;
  stride = 0;
  int64_t expected = -1;
  for (size_t i = end; i-- > 0;) {
    if (v.shape[i] == 1) continue;
    if (expected >= 0 && v.strides[i] != expected) return false;
    if (expected < 0) stride = v.strides[i];
    expected = v.strides[i] * v.shape[i];
    count *= v.shape[i];
  }
  if (count == 1) stride = 0;
  return true;
}

// x [..., K] as the [M, K] operand A: its leading dims must collapse into equally spaced rows.
bool rowsOf(const Value &x, MatmulLayout &out) {
  int64_t rows = 0;
  if (!collapse(x, x.shape.size() - 1, out.m, rows)) return false;
  out.a = {0, out.m > 1 ? rows : out.k * x.strides.back(), x.strides.back()};
  return true;
}

} // namespace

bool matmulLayout(const Program &p, const Step &s, MatmulLayout &out) {
  out = MatmulLayout{};
  if (s.op == OpKind::linear) {
    const Value &x = p.values[s.operands[0]];
    const Value &w = p.values[s.operands[1]];
    if (w.shape.size() != 2 || x.shape.empty()) return false;
    out.k = w.shape[1];
    out.n = w.shape[0];
    if (!rowsOf(x, out)) return false;
    out.b = {0, w.strides[1], w.strides[0]}; // B = W^T
    out.bias = s.operands.size() == 3;
  } else if (s.op == OpKind::matmul && p.values[s.operands[1]].shape.size() == 2 &&
             p.values[s.operands[0]].shape.size() >= 3) {
    // x [..., M, K] @ w [K, N] (a projection, as exporters write linear layers): the leading
    // dims of x as the rows of one GEMM, like linear's
    const Value &x = p.values[s.operands[0]];
    const Value &w = p.values[s.operands[1]];
    out.k = w.shape[0];
    out.n = w.shape[1];
    if (!rowsOf(x, out)) return false;
    out.b = {0, w.strides[0], w.strides[1]};
  } else if (s.op == OpKind::matmul) {
    const Value &a = p.values[s.operands[0]];
    const Value &b = p.values[s.operands[1]];
    size_t r = a.shape.size();
    if (r < 2 || b.shape.size() != r) return false;
    for (size_t i = 0; i + 2 < r; ++i) {
      if (a.shape[i] != b.shape[i]) return false; // broadcast batches
    }
    int64_t ba = 0, bb = 0;
    if (!collapse(a, r - 2, ba, out.a.batch) || !collapse(b, r - 2, bb, out.b.batch)) return false;
    out.batch = ba;
    out.m = a.shape[r - 2];
    out.k = a.shape[r - 1];
    out.n = b.shape[r - 1];
    out.a.row = a.strides[r - 2];
    out.a.col = a.strides[r - 1];
    out.b.row = b.strides[r - 2];
    out.b.col = b.strides[r - 1];
  } else {
    return false;
  }
  out.c = {out.m * out.n, out.n, 1};
  return true;
}

} // namespace rcjit
