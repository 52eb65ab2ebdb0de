// Lowering: an optimized Graph to a Program of fused loop kernels and library calls.
//
// Three steps, run in order (the compile path announces and times each, jit/CompileGraph):
//   1. fuse (targets/lower/Fuse.cpp): place values (inputs are buffers; reshape, permute,
//      expand and slice become strided views of their operand's buffer), group elementwise,
//      broadcast and reduction nodes into loop kernels whose iteration domain fits, make
//      matmul/linear/conv2d library calls (absorbing a following eltwise op as a post-op
//      where the target has them) and eager steps for the few ops no kernel covers. The
//      result is a printable FusionPlan (targets/Fuse.h);
//   2. build kernels (targets/lower/BuildKernels.cpp): a LoopKernel per group, steps in
//      order;
//   3. plan buffers (targets/lower/PlanBuffers.cpp): graph outputs get per-call output
//      buffers, the rest share an arena by liveness.
#pragma once
#include <memory>

#include "targets/Fuse.h"
#include "targets/Program.h"
#include "tracer/Graph.h"

namespace rcjit {

struct LowerOptions {
  bool fuseLibraryEpilogues = true; // oneDNN post-ops (CPU); off for targets without them
  // embedding and its gradient as gather/scatter kernels (targets without eager steps: cuda)
  // instead of eager steps (the CPU's, which check every id)
  bool indexKernels = false;
  // a library matmul is one batched GEMM (cuBLAS): operands whose batch dims do not collapse
  // into one stride are copied contiguous first
  bool batchedGemm = false;
  // one sample of a symbolic program: no fusion choice may depend on a size that can vary
  // (the tiny-domain join applies to single elements only), so every sample lowers alike
  bool symbolic = false;
};

namespace lowering {
struct Lowering;
}

/// The lowering of one graph, step by step: call fuse(), buildKernels(), planBuffers() in
/// that order, once each. `g` must outlive the object. Not thread-safe.
class LowerSteps {
public:
  /// `g`: static shapes, composites decomposed. `inputStrides`: the strides of each program
  /// input (args then captured tensors, as guarded). Throws rcjit::Error for symbolic shapes.
  LowerSteps(const Graph &g, const std::vector<Shape> &inputStrides, const LowerOptions &opts);
  ~LowerSteps();
  const FusionPlan &fuse();
  const Program &buildKernels(); // the program so far (buffers not yet planned)
  Program planBuffers();         // the finished program; the object is spent

private:
  std::unique_ptr<lowering::Lowering> l_;
};

/// The three steps at once. Throws rcjit::Error for what it cannot lower.
Program lower(const Graph &g, const std::vector<Shape> &inputStrides,
              const LowerOptions &opts = {});

/// Assigns arena offsets to p's arena buffers from their sizes and lifetimes (greedy best
/// fit over step positions, the smallest arena of a few placement orders) and sets
/// p.arenaBytes. Run again after sizes change.
void planArena(Program &p);

/// Takes p's arena buffers of at least `minBytes` out of the arena: each becomes a dynamic
/// buffer that the executor allocates at the step that first uses it and frees after the
/// step that last does (dynamicDoneAt), so that a large intermediate holds memory only
/// while it is live instead of widening an arena held for the whole call. Re-plans the
/// arena; returns, per step, the buffers to allocate there. For concrete sizes (a layout).
std::vector<std::vector<int>> moveLargeBuffersOut(Program &p, int64_t minBytes);

} // namespace rcjit
