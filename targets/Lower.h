// Lowering: an optimized Graph to a Program of fused loop kernels and library calls.
//
// Steps, announced in order:
//   1. place values: inputs are buffers; view ops (reshape, permute, expand, slice) become
//      strided views of their operand's buffer, materializing it first when needed;
//   2. fuse: elementwise, broadcast and reduction nodes join a producer's group when the
//      group's iteration domain fits (same shape, or a reduction over the same domain);
//   3. library calls: matmul, linear and conv2d, absorbing a following eltwise op as a
//      post-op when that op is the only user;
//   4. eager steps for the few ops no kernel covers (embedding, cat);
//   5. plan buffers: group outputs used later get arena space by liveness; graph outputs
//      get per-call output buffers.
#pragma once
#include <rcjit/Compile.h>

#include "targets/Program.h"
#include "tracer/Graph.h"

namespace rcjit {

struct LowerOptions {
  bool fuseLibraryEpilogues = true; // oneDNN post-ops (CPU); off for targets without them
};

/// The options for a target: cuda has no oneDNN post-ops (its epilogues are kernels).
LowerOptions lowerOptionsFor(Target t);

/// Lowers `g` (static shapes, composites decomposed) to a Program. `inputStrides` gives the
/// strides of each program input (args then captured tensors, as guarded). Throws
/// rcjit::Error for what it cannot lower.
Program lower(const Graph &g, const std::vector<Shape> &inputStrides,
              const LowerOptions &opts = {});

/// Assigns arena offsets to p's arena buffers from their sizes and lifetimes (greedy first
/// fit over step positions) and sets p.arenaBytes. Run again after sizes change.
void planArena(Program &p);

} // namespace rcjit
