// The eager target's linear_ce_pick (log_softmax(x @ w^T)[target] per row) and its backward,
// in row chunks so the [R, N] logits are never held: a chunk's logits are one oneDNN sgemm
// into a buffer of at most ~32 MiB, reduced per row (the forward), or turned into the chunk's
// logit gradient in place and multiplied into dx's rows and dw (the backward recomputes the
// chunk's logits, as Liger kernel's FusedLinearCrossEntropy does in its forward).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include <oneapi/dnnl/dnnl.h>

#include <rcjit/Error.h>

#include "targets/eager/Eager.h"
#include "targets/eager/Iter.h"
#include "tracer/TensorImpl.h"

namespace rcjit::eager {

namespace {

constexpr int64_t kChunkFloats = int64_t{1} << 23; // a chunk's logits: 32 MiB of f32

template <class C> C *ptr(const Tensor &t) { return reinterpret_cast<C *>(t.impl()->ptr()); }

// x [R, K] rows, w [N, K], target [R] as i64.
struct Problem {
  int64_t rows, k, n;
  const float *x, *w;
  const int64_t *t;
  int64_t chunkRows() const {
    const int64_t chunks = std::max<int64_t>(1, (rows * n + kChunkFloats - 1) / kChunkFloats);
    return std::max<int64_t>(1, (rows + chunks - 1) / chunks);
  }
};

void sgemm(char ta, char tb, int64_t m, int64_t n, int64_t k, const float *a, int64_t lda,
           const float *b, int64_t ldb, float beta, float *c, int64_t ldc) {
  if (dnnl_sgemm(ta, tb, m, n, k, 1.f, a, lda, b, ldb, beta, c, ldc) != dnnl_success) {
    throw Error("linear_ce_pick: oneDNN sgemm failed for " + std::to_string(m) + "x" +
                std::to_string(n) + "x" + std::to_string(k));
  }
}

// logsumexp of one row of n logits (fastExp and branch-free loops, so that they vectorize:
// with std::exp the rows' exponentials took longer than the chunk's three GEMMs)
float logSumExp(const float *row, int64_t n) {
  float m = -std::numeric_limits<float>::infinity();
#pragma omp simd reduction(max : m)
  for (int64_t c = 0; c < n; ++c) m = std::max(m, row[c]);
  if (!std::isfinite(m)) return m;
  float s = 0.f;
#pragma omp simd reduction(+ : s)
  for (int64_t c = 0; c < n; ++c) s += fastExp(row[c] - m);
  return m + std::log(s);
}

Problem problemOf(const Tensor &xc, const Tensor &wc, const Tensor &tc) {
  const int64_t k = wc.shape()[1];
  return {tc.numel(), k, wc.shape()[0], ptr<float>(xc), ptr<float>(wc), ptr<int64_t>(tc)};
}

Tensor pickForward(const Problem &p, const TensorMeta &out) {
  Tensor y = detail::makeTensor(out.shape, DType::f32);
  float *yp = ptr<float>(y);
  const int64_t chunk = p.chunkRows();
  Tensor buf = detail::makeTensor({chunk * p.n}, DType::f32);
  float *b = ptr<float>(buf);
  for (int64_t r0 = 0; r0 < p.rows; r0 += chunk) {
    const int64_t rows = std::min(chunk, p.rows - r0);
    sgemm('N', 'T', rows, p.n, p.k, p.x + r0 * p.k, p.k, p.w, p.k, 0.f, b, p.n);
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < rows; ++i) {
      const float *row = b + i * p.n;
      const int64_t t = p.t[r0 + i];
      yp[r0 + i] = t >= 0 && t < p.n ? row[t] - logSumExp(row, p.n) : 0.f;
    }
  }
  return y;
}

// The packed [dw (N*K) | dx (R*K) | y (R)]: the gradients and the forward's values. dw comes
// first: a compiled call scatters a tied embedding's gradient into it in place (a base at
// the front of a dying buffer: eagerIntoBase, targets/cpu/CpuProgram.h), and the block
// becomes the weight's gradient without a copy (autograd keeps a contiguous gradient that
// starts its storage); with dw in the middle the sum took a block of its own, llama-3.2-1b's
// peak 1 GB higher.
Tensor pickBackward(const Problem &p, const Tensor &gIn, const TensorMeta &out) {
  Tensor gc = contiguousAs(gIn, DType::f32);
  const float *g = ptr<float>(gc);
  Tensor packed = detail::makeTensor(out.shape, DType::f32);
  float *dw = ptr<float>(packed), *dx = dw + p.n * p.k, *y = dx + p.rows * p.k;
  const int64_t chunk = p.chunkRows();
  Tensor buf = detail::makeTensor({chunk * p.n}, DType::f32);
  float *b = ptr<float>(buf);
  if (p.rows == 0) std::memset(dw, 0, static_cast<size_t>(p.n * p.k) * sizeof(float));
  for (int64_t r0 = 0; r0 < p.rows; r0 += chunk) {
    const int64_t rows = std::min(chunk, p.rows - r0);
    sgemm('N', 'T', rows, p.n, p.k, p.x + r0 * p.k, p.k, p.w, p.k, 0.f, b, p.n);
    // d(logp[t]) / d(logit[c]) = [c == t] - softmax[c], times the row's gradient
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < rows; ++i) {
      float *row = b + i * p.n;
      const float gr = g[r0 + i];
      const int64_t t = p.t[r0 + i];
      if (t < 0 || t >= p.n) {
        y[r0 + i] = 0.f;
        std::fill(row, row + p.n, 0.f);
        continue;
      }
      const float lse = logSumExp(row, p.n);
      y[r0 + i] = row[t] - lse;
      if (gr == 0.f) {
        std::fill(row, row + p.n, 0.f);
        continue;
      }
#pragma omp simd
      for (int64_t c = 0; c < p.n; ++c) row[c] = -gr * fastExp(row[c] - lse);
      row[t] += gr;
    }
    sgemm('N', 'N', rows, p.k, p.n, b, p.n, p.w, p.k, 0.f, dx + r0 * p.k, p.k);
    sgemm('T', 'N', p.n, p.k, rows, b, p.n, p.x + r0 * p.k, p.k, r0 == 0 ? 0.f : 1.f, dw, p.k);
  }
  return packed;
}

} // namespace

Tensor runLinearCePick(OpKind op, const std::vector<Tensor> &in, const TensorMeta &out) {
  if (!in[0].device().is_cpu()) {
    throw Error(std::string(opName(op)) + ": runs on the CPU only, got a tensor on " +
                in[0].device().str());
  }
  Tensor xc = contiguousAs(in[0], DType::f32), wc = contiguousAs(in[1], DType::f32),
         tc = contiguousAs(in[2], DType::i64);
  const Problem p = problemOf(xc, wc, tc);
  // the result's size, checked: a program made by another build must not overrun it
  const int64_t want = op == OpKind::linear_ce_pick ? p.rows : (p.rows + p.n) * p.k + p.rows;
  int64_t have = 1;
  for (int64_t d : out.shape) have *= d;
  if (have != want) {
    throw Error(std::string(opName(op)) + ": expected a result of " + std::to_string(want) +
                " elements for " + std::to_string(p.rows) + " rows, " + std::to_string(p.k) +
                " features and " + std::to_string(p.n) + " classes, got " + shapeStr(out.shape));
  }
  return op == OpKind::linear_ce_pick ? pickForward(p, out) : pickBackward(p, in[3], out);
}

} // namespace rcjit::eager
