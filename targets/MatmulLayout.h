// A matmul or linear step as one batched GEMM over strided row-major operands: what every
// target's library call (oneDNN on the CPU, cuBLAS on the GPU) is built from.
#pragma once
#include <cstdint>

#include "targets/Program.h"

namespace rcjit {

/// One operand of C[b] = A[b] x B[b]: element (b, i, j) is at b * batch + i * row + j * col.
struct GemmStrides {
  int64_t batch = 0;
  int64_t row = 0;
  int64_t col = 0;
};

struct MatmulLayout {
  int64_t batch = 1, m = 0, n = 0, k = 0;
  GemmStrides a, b, c; // A [m, k], B [k, n], C [m, n] (C: the step's contiguous result)
  bool bias = false;   // linear with a bias operand (operand 2, [n])
};

/// The GEMM of library step `s` (matmul: a [..., M, K] x b [..., K, N] with equal batch dims,
/// or a [..., M, K] x b [K, N] as one GEMM over a's collapsed rows; linear: x [..., K] x
/// w[N, K]^T) in `p`'s value layouts. False when the leading dims do not
/// collapse into one equally spaced batch (or row) dimension, or the batches broadcast: the
/// caller then runs the op another way.
bool matmulLayout(const Program &p, const Step &s, MatmulLayout &out);

} // namespace rcjit
