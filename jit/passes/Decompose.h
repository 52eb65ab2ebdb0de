// Decompose: composite ops to the primitives that fusion turns into one loop kernel each.
//
// Why: targets/Lower.cpp fuses elementwise, broadcast and reduction chains but runs
// composites (softmax, log_softmax, layer_norm, rms_norm, sdpa) as opaque eager steps.
// Spelled as primitives, a softmax becomes one kernel, and its neighbours' elementwise
// ops join it. The spelling follows Lower's fusion rules: reductions whose result is
// broadcast back keep their dims (keepdim), scalars are `full` nodes of shape [], and
// f16/bf16 composites compute in f32 (cast in, cast out) to match the eager target.
//
// - softmax/log_softmax: m = amax(x, d, keep); z = x - m; e = exp(z); s = sum(e, d, keep);
//   e / s, or z - log(s).
// - layer_norm/rms_norm over the weight's trailing dims: mean, biased variance, eps added
//   before rsqrt, then * w (+ b), like PyTorch.
// - sdpa: softmax(q @ k^T * 1/sqrt(D), masked to -inf above the diagonal when causal,
//   with the mask built from arange) @ v; the two matmuls stay library calls.
// - small linear/matmul (K and N <= smallMatmulMax, or at most smallMatmulMacs
//   multiply-adds; batch dims of a matmul broadcast): sum(x[..., M, 1, K] * w[..., N, K],
//   last), so the code generator builds the product and its epilogue (bias, activations,
//   whatever elementwise ops follow) as one kernel instead of a library call too small to
//   pay for itself. The CPU code generator runs such a kernel as a k-outer, n-inner loop
//   nest (targets/cpu/CpuKernels.cpp).
// - linear(x, w, b) with splitLinearBias: linear(x, w) + b.
// - check_target with dropDataChecks: its input (any shape, symbolic ones too).
// - pow(x, c) for a floating x and a constant c of 2, 3, 4 or 0.5: x * x (* x ...) or
//   sqrt(x), as Inductor does (symbolic shapes too): a kernel multiplies instead of calling
//   powf per element.
// gelu and silu stay single ops: the code generator and oneDNN post-ops implement them
// natively, and spelled out they would no longer fuse into a matmul as a post-op.
//
// Nodes with symbolic dims or no elements are left alone. Returns its input unchanged when
// there is nothing to decompose.
#pragma once
#include <cstdint>

#include "tracer/Graph.h"

namespace rcjit {

struct DecomposeOptions {
  /// linear, and matmul of operands of rank >= 2, with K and N at most this become a
  /// multiply and a sum; 0: none by this rule.
  int64_t smallMatmulMax = 0;
  /// ... and so do those of at most this many multiply-adds (batch * M * N * K); 0: none by
  /// this rule. The CPU target sets it from its cost model (Target.h, smallMatmulMacs).
  int64_t smallMatmulMacs = 0;
  /// linear(x, w, b) becomes linear(x, w) + b, for targets whose library call adds no bias
  /// (cuBLAS): the add then fuses into the kernel after the call with the rest of the
  /// epilogue. Off for the CPU, where oneDNN adds the bias in the call.
  bool splitLinearBias = false;
  /// check_target (a host read of the data) becomes its input, for targets that run no
  /// host steps (cuda): cross_entropy's loss is then NaN for an out-of-range target.
  bool dropDataChecks = false;
  /// matmul becomes what one batched GEMM takes, for targets whose library call is one
  /// (cuBLAS): a 1-D operand a matrix ([K] as [1, K] or [K, 1], the result reshaped back),
  /// batch dims that broadcast expanded and copied, and an integer product (no integer
  /// GEMM) a multiply and a sum. conv2d and its gradients become one GEMM each over the
  /// input's columns (im2col; col2im for the input's gradient).
  bool batchedGemm = false;
};

/// Rewrites the composites of `g` as primitives (see above). Pure; thread-safe.
Graph decompose(const Graph &g, const DecomposeOptions &opts = {});

} // namespace rcjit
