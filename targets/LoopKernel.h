// A fusion group ready for code generation: one loop nest, target-neutral.
//
// Fusion (jit/passes/Fuse) turns a group of elementwise, broadcast and reduction nodes
// into a LoopKernel; each target builds it into machine code the same way (LoopCodegen)
// and differs only in how the outer loop is split (CPU: chunks on a thread pool; CUDA:
// a grid-stride loop, or a warp per outer point whose lanes split the inner dims).
//
// The iteration domain is `domain` = outer dims then inner dims. Every tensor the kernel
// touches is described by one stride per domain dim (0 = broadcast along that dim), so
// permutes, expands, slices and broadcasts are all index arithmetic. A value is at
// "inner level" when it depends on an inner index, else at "outer level" (one value per
// outer point). A Reduce statement consumes an inner-level value over all inner dims and
// yields an outer-level value; reductions may depend on earlier reductions (variance after
// mean), which the code generator runs as successive passes over the inner dims.
// Without inner dims (numOuter == domain.size()) the kernel is purely elementwise and the
// last domain dim is its vectorized inner loop. Only such kernels may index a table by a
// loaded value (gather, scatterAdd: the embedding lookup and its gradient on cuda).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <rcjit/Types.h>

#include "tracer/OpKind.h"

namespace rcjit {

/// A size or stride: c * product of the symbolic sizes named in `syms` (indices into
/// the kernel's runtime size array), plus `add` (a slice's `s - 1`). Static shapes have no
/// syms and add 0.
struct SizeExpr {
  int64_t c = 1;
  std::vector<int32_t> syms;
  int64_t add = 0;
  bool isConstant() const { return syms.empty(); }
  static SizeExpr constant(int64_t v) { return {v, {}, 0}; }
  friend bool operator==(const SizeExpr &, const SizeExpr &) = default;
};

/// A tensor operand: its element type and one stride (in elements) per domain dim.
/// At run time its address (already including the view's offset) is ptrs[index].
struct KernelTensor {
  DType dtype = DType::f32;
  std::vector<SizeExpr> strides; // size == domain.size()
  bool output = false;
  /// A table read by `gather` or added to by `scatterAdd` (an embedding's weight or its
  /// gradient): the stride of the dim that a statement's index value picks, and that dim's
  /// size (indices outside [0, rows) are out of range; a table has at least one row).
  bool indexed = false;
  SizeExpr rowStride = SizeExpr::constant(0);
  SizeExpr rows = SizeExpr::constant(0);
  /// An arange's values (an input that holds 0, 1, 2, ... from offset 0 of its view's
  /// storage): a load computes the element's offset, sum of index x stride, as `dtype`
  /// instead of reading memory (cross_entropy's one-hot compare read a [classes] i64 table
  /// per row, 8 bytes for each class, twice in the loss's gradient).
  bool iota = false;
};

/// One statement of the loop body, in order; `args` name earlier statements.
struct KernelStmt {
  enum class Kind : uint8_t {
    load,       // value of tensors[tensor] at the current index
    constant,   // `value` as `dtype`
    compute,    // op (a Unary/Binary/Compare/Where op or cast) applied to args
    reduce,     // op in {sum, mean, amax, argmax} over the inner dims of args[0]
    store,      // writes args[0] to tensors[tensor] (at inner level if args[0] is)
    count,      // the number of inner points (the product of the inner dims' sizes) as `dtype`:
                // a reduction's count that follows symbolic sizes instead of fixing them
    gather,     // the value of indexed tensors[tensor] at the current index plus row args[0] (an
                // i64): the embedding lookup. An index outside [0, rows) reads NaN (0 for an
                // integer table): no data-dependent error can leave a GPU kernel
    scatterAdd, // adds args[1] to indexed tensors[tensor] (f32 or f64) at the current index
                // plus row args[0], atomically (rows repeat): the embedding's gradient. An
                // index outside [0, rows) adds nothing
  };
  Kind kind = Kind::compute;
  OpKind op = OpKind::add;
  std::vector<int> args;
  int tensor = -1;
  DType dtype = DType::f32; // the statement's result type (store: the tensor's)
  double value = 0;
};

struct LoopKernel {
  std::string name;             // a valid symbol name, unique in its module
  std::vector<SizeExpr> domain; // outer dims, then inner dims
  int numOuter = 0;
  std::vector<KernelTensor> tensors;
  std::vector<KernelStmt> stmts;

  /// Number of outer points (product of outer dims) for the given symbol values.
  int64_t outerSize(const int64_t *syms) const;
};

/// Evaluates a SizeExpr for the given symbol values.
int64_t evalSize(const SizeExpr &e, const int64_t *syms);

/// The C ABI of every compiled loop kernel: runs outer points [begin, end).
///   ptrs: one address per KernelTensor, in order; syms: the symbolic sizes.
using KernelFn = void (*)(char *const *ptrs, const int64_t *syms, int64_t begin, int64_t end);

/// Readable text of a kernel (for logs and tests).
std::string printKernel(const LoopKernel &k);
/// Checks a kernel's invariants (arg order, levels, stride counts); throws rcjit::Error.
void verifyKernel(const LoopKernel &k);

} // namespace rcjit
