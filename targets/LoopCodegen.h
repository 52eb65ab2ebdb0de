// Target-neutral LLVM IR for the loop body of a LoopKernel; targets add only the outer loop.
//
// A target builds one kernel as: emitKernelFunction(module, kernel, outer), where `outer`
// emits the target's iteration over outer points (CPU: [begin, end) split into rows with a
// counted innermost loop; CUDA: a grid- or warp-stride loop) and calls KernelBody::emitPoint once
// per point it visits. Everything below the outer point — index decomposition, strided loads and
// stores, the statements, reduction passes over the inner dims — is emitted here, so the
// targets cannot drift apart. Nothing in this file knows about a target machine: a target
// whose threads cooperate on one outer point (a CUDA warp) says so with a LaneSplit, which
// gives the only target-specific piece, the exchange of a value between lanes.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <vector>

#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Module.h>

#include "targets/LoopKernel.h"

namespace rcjit::codegen {

/// Returns `k` with constant size-1 dims dropped and adjacent dims merged wherever every
/// tensor's strides allow it (outer dims with outer dims, inner with inner), so that a
/// contiguous elementwise kernel becomes one flat loop. The outer flat index and the flat
/// inner index (argmax) keep their meaning. Pure function.
LoopKernel simplifyKernel(const LoopKernel &k);

/// Loop-carried values of a counted loop: the body gets the index and the current values
/// and returns the next ones (same count and types).
using LoopBody = std::function<std::vector<llvm::Value *>(
    llvm::Value *index, const std::vector<llvm::Value *> &carried)>;

/// Emits `for (i = start; i < end; i += step)` (signed i64, guarded, rotated: the shape LLVM's
/// vectorizer expects; step > 0) at the builder's point; returns the carried values after the
/// loop and leaves the builder in the exit block.
/// `hints`: LoopHint flags for LLVM's loop passes, as llvm.loop metadata.
enum LoopHint : unsigned {
  kNoUnroll = 1, // code size over speed: a constant trip count is not unrolled in full
  kFoldTail = 2, // vectorize with the remainder as one masked iteration (a short row)
  kWidth8 = 4,   // vectorize 8 lanes wide: one vector body and a scalar remainder, not a
                 // 16-lane body plus the 8-lane vector epilogue LLVM adds behind it (for a
                 // short loop, twice the compile time for no speed)
};
std::vector<llvm::Value *> emitCountedLoop(llvm::IRBuilder<> &b, llvm::Value *start,
                                           llvm::Value *end, const std::vector<llvm::Value *> &init,
                                           const LoopBody &body, const llvm::Twine &name,
                                           int64_t step = 1, unsigned hints = 0);

/// How a target runs one outer point on `lanes` threads that execute its code together (a
/// GPU warp) instead of on one thread. With it, every pass over the inner dims iterates the
/// flattened inner index space, lane l taking positions l, l + lanes, l + 2 * lanes, ...;
/// each reduction's partials are then combined by a butterfly of `shuffleXor` (so every lane
/// holds the total, which later passes use); inner-level stores are made by the lane that owns
/// the position, outer-level stores by lane 0 alone. The target must run the emitted point on
/// all lanes together (its outer loop's condition must not depend on the lane); the exchanges
/// are emitted outside every lane-dependent branch, where all lanes reach them.
struct LaneSplit {
  llvm::Value *lane = nullptr; // this thread's lane, an i64 in [0, lanes) defined in the entry
  int lanes = 1;               // a power of two
  /// Emits, at the builder's point, the value that `v` has in lane (this lane XOR `mask`).
  /// `v` is a scalar of a reduction's carried type (i1, i32, i64, float or double); all lanes
  /// execute the emitted code together.
  std::function<llvm::Value *(llvm::IRBuilder<> &b, llvm::Value *v, int mask)> shuffleXor;
};

/// Emits the computation of one outer point of a kernel. Construct it in the function's
/// entry block: it loads the tensor addresses and the symbolic sizes there (so they dominate
/// every later use and are hoisted out of all loops). Holds a reference to the kernel, which
/// must outlive it. Not thread-safe (it owns an IRBuilder position); use one per function.
class KernelBody {
public:
  KernelBody(llvm::IRBuilder<> &b, const LoopKernel &k, llvm::Value *ptrs, llvm::Value *syms);

  const LoopKernel &kernel() const { return k_; }
  /// The i64 value of a size or stride, at the builder's point.
  llvm::Value *size(const SizeExpr &e);
  /// The i64 number of inner points (the product of the inner dims' sizes).
  llvm::Value *innerCount();
  /// Splits a flat row-major index over domain dims [first, end) into one index per dim.
  std::vector<llvm::Value *> unflatten(llvm::Value *flat, int first, int end);
  /// Makes emitPoint split each point over lanes (see LaneSplit); call before emitPoint.
  /// Without it (the CPU) one thread computes the whole point.
  void splitLanes(LaneSplit split) { split_ = std::move(split); }
  /// Emits the statements of the outer point whose indices are `outerIdx` (one per outer
  /// dim), including every reduction pass over the inner dims and every store. Leaves the
  /// builder after the emitted code.
  void emitPoint(const std::vector<llvm::Value *> &outerIdx);

  /// A kernel that is a product contracted over its one inner dim, C[r, j] = epilogue(
  /// sum_k A[r, k] * B[r, j, k]): one reduction (an f32 sum, the last statement of its one
  /// pass) of `x * y`, where `row` (A) does not vary along the last outer dim j and `col`
  /// (B) does, with constant sizes j and k. What a target may emit as a GEMM-like loop nest
  /// (k outer, j inner and vectorized) instead of one reduction nest per outer point.
  struct Contraction {
    int reduce = -1; // the sum statement
    int row = -1;    // A: x or y, constant along j
    int col = -1;    // B: the other factor
    int64_t n = 0, k = 0;
    bool colUnitLoad = false; // B is one f32 load with stride 1 along j
    bool colRowFree = false;  // no load under B varies along an outer dim but j
  };
  /// A kernel that sums one f32 value over its one inner dim per outer point, where every
  /// load under the value steps 0 or 1 along the last outer dim j and at least one steps 1
  /// along j and not 0 along the inner dim: a column sum (`sum(x, 0)` of a row-major
  /// [R, C]: a bias's or a LayerNorm weight's gradient), whose default nest walks each
  /// column with a stride (gathers). What a target may emit as a loop over the inner dim
  /// around a vectorized loop along j, many outer points' sums at once.
  struct ColumnSum {
    int reduce = -1; // the sum statement
    int value = -1;  // what it sums
  };
  /// The kernel's column sum, if it is one (see ColumnSum).
  std::optional<ColumnSum> columnSum() const;
  /// The address of load statement `s`'s element at the full index `idx`.
  llvm::Value *loadAddress(int s, const std::vector<llvm::Value *> &idx);
  /// The kernel's contraction, if it is one (see Contraction).
  std::optional<Contraction> contraction() const;
  /// The value of load/constant/compute statement `s` at the full index `idx` (outer dims
  /// then the inner dim), emitted at the builder's point with its operands.
  llvm::Value *emitValueAt(int s, const std::vector<llvm::Value *> &idx);
  /// emitPoint with the value of reduction statement `reduce` given (its loop already
  /// run by the caller): the outer-level statements and stores only.
  void emitPointGiven(const std::vector<llvm::Value *> &outerIdx, int reduce, llvm::Value *value);

private:
  struct Reduction;
  using Values = std::vector<llvm::Value *>;

  void analyze();
  void makeAliasScopes();
  llvm::Value *elementOffset(int tensor, const Values &idx);
  llvm::Value *address(int tensor, const Values &idx);
  llvm::Value *emitLoad(int tensor, const Values &idx);
  llvm::Value *loadFrom(int tensor, llvm::Value *addr);
  llvm::Value *rowAddress(int tensor, const Values &idx, llvm::Value *row);
  llvm::Value *emitGather(const KernelStmt &st, const Values &idx, llvm::Value *row);
  void emitScatterAdd(const KernelStmt &st, const Values &idx, llvm::Value *row, llvm::Value *v,
                      DType from);
  void emitStore(int tensor, const Values &idx, llvm::Value *v, DType from);
  llvm::Value *emitStmt(int s, const Values &idx, const Values &vals);
  void emitOuterLevel(int afterPass, const Values &idx, Values &vals);
  void emitPass(int pass, Values &idx, Values &vals);
  Values emitInnerLoops(size_t dim, Values &idx, Values &vals, const std::vector<bool> &needed,
                        std::vector<Reduction> &reds, const Values &totals, bool blocked);
  Values emitInnermostRun(llvm::Value *lo, llvm::Value *hi, Values &idx, Values &vals,
                          const std::vector<bool> &needed, std::vector<Reduction> &reds,
                          const Values &totals);
  Values emitInnerPoint(const Values &idx, const Values &vals, const std::vector<bool> &needed,
                        const std::vector<Reduction> &reds, llvm::Value *flat, const Values &cur);
  Values emitLaneRuns(Values &idx, const Values &vals, const std::vector<bool> &needed,
                      const std::vector<Reduction> &reds, const Values &totals);
  Values combineAcrossLanes(const std::vector<Reduction> &reds, Values totals);
  void emitOuterStore(int tensor, const Values &idx, llvm::Value *v, DType from);
  llvm::Value *innerFlatIndex(const Values &idx);

  llvm::IRBuilder<> &b_;
  const LoopKernel &k_;
  Values base_;                           // one address per tensor
  std::map<int32_t, llvm::Value *> syms_; // loaded symbolic sizes
  std::vector<llvm::MDNode *> scope_, noalias_;
  std::vector<bool> inner_; // statement depends on an inner index
  std::vector<int> ready_;  // reduction passes that must run before the statement
  int numPasses_ = 0;
  std::optional<LaneSplit> split_;
};

/// Emits the target's iteration over outer points for `body` inside `fn` (whose arguments
/// follow the KernelFn ABI). The builder starts in the entry block after the setup code; the
/// emitter must leave it in a block that falls through to the return.
using OuterLoopEmitter =
    std::function<void(llvm::IRBuilder<> &b, KernelBody &body, llvm::Function *fn)>;

/// Defines `k.name` in `m` with the KernelFn ABI
///   void(ptr noalias ptrs, ptr noalias syms, i64 begin, i64 end)
/// from the simplified kernel, with `outer` providing the outer loop. The kernel must have
/// passed verifyKernel. Returns the function.
llvm::Function *emitKernelFunction(llvm::Module &m, const LoopKernel &k,
                                   const OuterLoopEmitter &outer);

} // namespace rcjit::codegen
