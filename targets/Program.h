// A lowered graph: buffers, strided values over them, and the steps that fill them.
//
// Lowering (Lower.h) produces a Program from an optimized Graph; a target compiles its
// LoopKernels and runs the steps in order. A Program is target-neutral and immutable.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <rcjit/Types.h>

#include "targets/LoopKernel.h"
#include "tracer/Graph.h"

namespace rcjit {

/// Where a buffer's memory comes from on each call.
struct Buffer {
  enum class Kind : uint8_t {
    input,   // the storage of program input `index`
    arena,   // [offset, offset + bytes) of the per-call scratch arena
    output,  // a fresh tensor allocated per call (returned to the caller)
    dynamic, // a tensor produced at run time by an eager step, or a large intermediate
             // allocated from its first step to its last (moveLargeBuffersOut)
  };
  Kind kind = Kind::arena;
  int index = 0;      // input index (input)
  int64_t bytes = 0;  // arena/output size
  int64_t offset = 0; // arena offset (arena)
  DType dtype = DType::f32;
  Shape shape; // output buffers: the tensor's shape
};

/// A strided view of a buffer: what a graph value is at run time.
struct Value {
  int buffer = -1;
  int64_t offset = 0; // in elements
  Shape shape;
  Shape strides;
  DType dtype = DType::f32;
};

/// oneDNN post-op applied to a library call's result (eltwise kinds).
struct PostOp {
  OpKind op = OpKind::relu; // relu, sigmoid, tanh, gelu, silu, exp, abs, sqrt, log
};

/// A collective node (Ops.def's Collective category) is two steps: `collective` starts it
/// (non-blocking: rcjit::dist's *_async) where the node stands, writing `result` (a dynamic
/// buffer) only when waited for; `wait` finishes it just before the first later step that
/// reads the result's buffer (or at the end). The wait's operands are the collective's
/// input and result, so the buffer planner keeps the input alive, and its arena bytes
/// unshared, while the transfer is in flight. A graph pass overlaps communication with
/// compute by moving a collective node earlier.
struct Step {
  enum class Kind : uint8_t { kernel, library, eager, collective, wait };
  Kind kind = Kind::kernel;
  int kernel = -1;           // kernel: index into Program::kernels;
                             // wait: the index of the collective step it finishes
  std::vector<int> operands; // kernel: values in the kernel's tensor order;
                             // library/eager/collective: input values in op order;
                             // wait: the collective's input, then its result
  int result = -1;           // library/eager/collective: the value written
  OpKind op = OpKind::add;   // library/eager: the graph op
  Attrs attrs;
  std::vector<PostOp> postOps; // library: fused epilogue
  std::string note;            // which graph nodes this step covers (for logs)
};

/// Where a symbolic size is read on each call: dim `dim` of program input `input`.
struct SymSource {
  int input = 0;
  int dim = 0;
  friend bool operator==(const SymSource &, const SymSource &) = default;
};

/// A numeric field of a program's values, buffers or steps (numbered in the order
/// forEachSizeField visits them) whose value depends on the symbols.
struct SymField {
  int32_t field = 0;
  SizeExpr expr; // with its `add`: an offset or length like s - 1
};

/// The symbolic sizes of a program. Empty for a static program. Kernels use the symbols
/// directly (their SizeExprs name them); values, buffers and step attributes hold the
/// trace-time numbers, and `fields` says how to recompute the ones that vary.
struct ProgramSymbols {
  std::vector<Symbol> ranges;                  // one per symbol
  std::vector<std::vector<SymSource>> sources; // per symbol; all must have the same size
                                               // (none: a symbol this program does not use)
  std::vector<SymField> fields;
  bool empty() const { return ranges.empty(); }
};

struct Program {
  std::vector<LoopKernel> kernels;
  std::vector<Buffer> buffers;
  std::vector<Value> values;
  std::vector<Step> steps;
  std::vector<int> outputs; // values returned, in graph output order
  int numInputs = 0;
  int64_t arenaBytes = 0;
  ProgramSymbols symbols;
};

/// Calls f on every size-like number of p's values (offset, shape, strides),
/// buffers (bytes, shape) and steps (attrs start, end, dims), in a fixed order. Arena
/// offsets are not visited: they follow from the sizes (planArena).
/// P is Program or const Program; f takes the number by (const) reference.
template <class P, class F> void forEachSizeField(P &p, F &&f) {
  for (auto &v : p.values) {
    f(v.offset);
    for (auto &x : v.shape) f(x);
    for (auto &x : v.strides) f(x);
  }
  for (auto &b : p.buffers) {
    f(b.bytes);
    for (auto &x : b.shape) f(x);
  }
  for (auto &s : p.steps) {
    f(s.attrs.start);
    f(s.attrs.end);
    for (auto &x : s.attrs.dims) f(x);
  }
}

/// Readable listing of a program (steps, kernels, buffers) for logs and tests.
std::string printProgram(const Program &p);

} // namespace rcjit
