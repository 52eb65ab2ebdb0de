// Target-neutral LLVM IR for the loop body of a LoopKernel; targets add only the outer loop.
//
// A target builds one kernel as: emitKernelFunction(module, kernel, outer), where `outer`
// emits the target's iteration over outer points (CPU: [begin, end) split into rows with a
// counted innermost loop; CUDA: a grid-stride loop) and calls KernelBody::emitPoint once per
// point it visits. Everything below the outer point — index decomposition, strided loads and
// stores, the statements, reduction passes over the inner dims — is emitted here, so the
// targets cannot drift apart. Nothing in this file knows about a target machine.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
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

/// Emits `for (i = start; i < end; ++i)` (signed i64, guarded, rotated: the shape LLVM's
/// vectorizer expects) at the builder's point; returns the carried values after the loop
/// and leaves the builder in the exit block.
std::vector<llvm::Value *> emitCountedLoop(llvm::IRBuilder<> &b, llvm::Value *start,
                                           llvm::Value *end, const std::vector<llvm::Value *> &init,
                                           const LoopBody &body, const llvm::Twine &name);

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
  /// Splits a flat row-major index over domain dims [first, end) into one index per dim.
  std::vector<llvm::Value *> unflatten(llvm::Value *flat, int first, int end);
  /// Emits the statements of the outer point whose indices are `outerIdx` (one per outer
  /// dim), including every reduction pass over the inner dims and every store. Leaves the
  /// builder after the emitted code.
  void emitPoint(const std::vector<llvm::Value *> &outerIdx);

private:
  struct Reduction;
  using Values = std::vector<llvm::Value *>;

  void analyze();
  void makeAliasScopes();
  llvm::Value *address(int tensor, const Values &idx);
  llvm::Value *emitLoad(int tensor, const Values &idx);
  void emitStore(int tensor, const Values &idx, llvm::Value *v, DType from);
  llvm::Value *emitStmt(int s, const Values &idx, const Values &vals);
  void emitOuterLevel(int afterPass, const Values &idx, Values &vals);
  void emitPass(int pass, Values &idx, Values &vals);
  Values emitInnerLoops(size_t dim, Values &idx, Values &vals, const std::vector<bool> &needed,
                        std::vector<Reduction> &reds, const Values &totals, bool blocked);
  Values emitInnermostRun(llvm::Value *lo, llvm::Value *hi, Values &idx, Values &vals,
                          const std::vector<bool> &needed, std::vector<Reduction> &reds,
                          const Values &totals);
  llvm::Value *innerFlatIndex(const Values &idx);

  llvm::IRBuilder<> &b_;
  const LoopKernel &k_;
  Values base_;                           // one address per tensor
  std::map<int32_t, llvm::Value *> syms_; // loaded symbolic sizes
  std::vector<llvm::MDNode *> scope_, noalias_;
  std::vector<bool> inner_; // statement depends on an inner index
  std::vector<int> ready_;  // reduction passes that must run before the statement
  int numPasses_ = 0;
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
