// Scalar LLVM IR for LoopKernel statements: how each dtype is held, conversions, every op.
//
// Internal to LoopCodegen (target-neutral). A value of dtype t is held in computeType(t):
// f16 and bf16 compute in float and are rounded only by casts and stores; bool is i1 in
// registers and one byte (0/1) in memory. f32 exp (and so sigmoid, silu), tanh and erf are
// inline polynomial / rational approximations that LLVM vectorizes like any arithmetic (max
// error ~4e-7 relative); log, sin, cos, pow and every f64 transcendental are LLVM intrinsics
// or libm calls, which a target may map to a vector math library.
#pragma once
#include <vector>

#include <llvm/IR/IRBuilder.h>

#include "targets/LoopKernel.h"

namespace rcjit::codegen {

bool isFloatDtype(DType t);
/// The register type of a value of dtype `t`.
llvm::Type *computeType(llvm::LLVMContext &c, DType t);
/// The in-memory element type of dtype `t` (half, i16 for bf16 bits, i8 for bool).
llvm::Type *storageType(llvm::LLVMContext &c, DType t);
/// Converts a loaded element to its compute type.
llvm::Value *fromStorage(llvm::IRBuilder<> &b, llvm::Value *stored, DType t);
/// Converts a compute value of dtype `t` to its storage form (rounding f16/bf16 to nearest
/// even, bool to 0/1).
llvm::Value *toStorage(llvm::IRBuilder<> &b, llvm::Value *v, DType t);
/// Converts a value between dtypes (PyTorch semantics: float→bool is `!= 0`, NaN → true).
llvm::Value *convert(llvm::IRBuilder<> &b, llvm::Value *v, DType from, DType to);
/// `value` as a constant of dtype `t` (rounded for f16/bf16).
llvm::Value *emitConstant(llvm::IRBuilder<> &b, double value, DType t);
/// Applies an elementwise op (Unary, Binary, Compare, Where or cast) with result dtype
/// `out` to `args`, whose dtypes are `argTypes`; args are converted as the op needs.
llvm::Value *emitCompute(llvm::IRBuilder<> &b, OpKind op, DType out,
                         const std::vector<llvm::Value *> &args,
                         const std::vector<DType> &argTypes);
/// NaN-propagating max of two values of dtype `t` (the amax combine).
llvm::Value *emitMax(llvm::IRBuilder<> &b, llvm::Value *x, llvm::Value *y, DType t);
/// The smallest value of dtype `t` (-inf for floats): the identity of max.
llvm::Value *lowestValue(llvm::IRBuilder<> &b, DType t);
/// True where `x` should replace `best` in argmax: x > best, or x is the first NaN.
llvm::Value *argmaxTakes(llvm::IRBuilder<> &b, llvm::Value *x, llvm::Value *best, DType t);

} // namespace rcjit::codegen
