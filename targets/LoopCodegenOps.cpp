// Scalar LLVM IR for LoopKernel statements: dtype representation, conversions and every op.
#include "targets/LoopCodegenOps.h"

#include <cassert>
#include <cmath>

#include <llvm/IR/Intrinsics.h>
#include <llvm/IR/Module.h>

#include <rcjit/Error.h>

#include "tracer/OpCases.h"

namespace rcjit::codegen {

using llvm::Value;

namespace {
// `op` reached an emitter of another kind of op: the caller's broken invariant, never null IR.
[[noreturn]] void noEmitterFor(OpKind op, const char *emitter) {
  assert(false && "op dispatched to the wrong emitter");
  throw Error("codegen: " + std::string(emitter) + " has no case for op " +
              std::string(opName(op)) + " (internal error)");
}
} // namespace

bool isFloatDtype(DType t) {
  return t == DType::f32 || t == DType::f64 || t == DType::f16 || t == DType::bf16;
}

llvm::Type *computeType(llvm::LLVMContext &c, DType t) {
  switch (t) {
  case DType::f32:
  case DType::f16:
  case DType::bf16:
    return llvm::Type::getFloatTy(c);
  case DType::f64:
    return llvm::Type::getDoubleTy(c);
  case DType::i32:
    return llvm::Type::getInt32Ty(c);
  case DType::i64:
    return llvm::Type::getInt64Ty(c);
  case DType::boolean:
    return llvm::Type::getInt1Ty(c);
  }
  return nullptr;
}

llvm::Type *storageType(llvm::LLVMContext &c, DType t) {
  if (t == DType::f16) return llvm::Type::getHalfTy(c);
  if (t == DType::bf16) return llvm::Type::getInt16Ty(c);
  if (t == DType::boolean) return llvm::Type::getInt8Ty(c);
  return computeType(c, t);
}

namespace {

// bf16 bits of a float, round to nearest even; NaN becomes the quiet NaN 0x7fc0.
Value *floatToBf16Bits(llvm::IRBuilder<> &b, Value *f) {
  Value *u = b.CreateBitCast(f, b.getInt32Ty());
  Value *lsb = b.CreateAnd(b.CreateLShr(u, 16), 1);
  Value *rounded = b.CreateLShr(b.CreateAdd(u, b.CreateAdd(lsb, b.getInt32(0x7fff))), 16);
  Value *isNan = b.CreateFCmpUNO(f, f);
  return b.CreateTrunc(b.CreateSelect(isNan, b.getInt32(0x7fc0), rounded), b.getInt16Ty());
}

Value *bf16BitsToFloat(llvm::IRBuilder<> &b, Value *bits) {
  return b.CreateBitCast(b.CreateShl(b.CreateZExt(bits, b.getInt32Ty()), 16), b.getFloatTy());
}

// Rounds a float or double to the precision of f16/bf16, returned as float.
Value *roundToReduced(llvm::IRBuilder<> &b, Value *v, DType to) {
  if (to == DType::f16) return b.CreateFPExt(b.CreateFPTrunc(v, b.getHalfTy()), b.getFloatTy());
  Value *f = b.CreateFPCast(v, b.getFloatTy());
  return bf16BitsToFloat(b, floatToBf16Bits(b, f));
}

Value *fconst(Value *like, double v) { return llvm::ConstantFP::get(like->getType(), v); }

Value *fmuladd(llvm::IRBuilder<> &b, Value *x, Value *y, Value *z) {
  return b.CreateIntrinsic(llvm::Intrinsic::fmuladd, {x->getType()}, {x, y, z});
}

// Evaluates a polynomial in x by Horner's rule (coefficients from high to low degree), with
// fused multiply-adds where the target has them.
Value *horner(llvm::IRBuilder<> &b, Value *x, std::initializer_list<double> coeffs) {
  Value *acc = nullptr;
  for (double c : coeffs) acc = acc ? fmuladd(b, acc, x, fconst(x, c)) : fconst(x, c);
  return acc;
}

// x limited to [lo, hi], NaN passed through: `hi < x ? hi : x` is one x86 min instruction
// whose NaN operand order returns x.
Value *clamp(llvm::IRBuilder<> &b, Value *x, double lo, double hi) {
  Value *c = b.CreateSelect(b.CreateFCmpOLT(fconst(x, hi), x), fconst(x, hi), x);
  return b.CreateSelect(b.CreateFCmpOGT(fconst(x, lo), c), fconst(x, lo), c);
}

// 2^n for an i32 n in [-126, 127], as a float.
Value *pow2(llvm::IRBuilder<> &b, Value *n) {
  Value *bits = b.CreateShl(b.CreateAdd(n, llvm::ConstantInt::get(n->getType(), 127)), 23);
  return b.CreateBitCast(bits, llvm::Type::getFloatTy(b.getContext()));
}

// f32 exp inline (Cephes expf: n = rint(x/ln2), r = x - n*ln2 in two parts, degree-5
// polynomial; max error ~1e-7 relative), so loops need no vector-library call. 2^n is
// applied as two factors, which keeps overflow to inf and gradual underflow correct.
// The polynomial is evaluated by Estrin's scheme (three independent multiply-adds, then two
// more with r^2 and r^4) rather than Horner's rule (five in a chain), and 1 + e is folded
// into the first scaling multiply-add: exp sits inside a fused kernel's per-row epilogue
// (sigmoid, silu), where the chain's latency, not the arithmetic, sets the speed (toy64's
// call 0.57 -> 0.49 ms on a Zen 1 EPYC, docs/performance.md); the results differ from
// Horner's by rounding only.
// `of`: exp(x), or exp(-x) computed from x, the negation folded into the clamp's bounds,
// the scale and a negated multiply-add (bit for bit exp of the negated value). sigmoid and
// silu otherwise negate x first: an operation more on the chain, which also kept a relu
// before them from becoming one max instruction (toy64 0.461 -> 0.437 ms, docs/performance.md).
enum class ExpOf : bool { x, minusX };
constexpr double kRoundMagic = 12582912.0;      // 1.5 * 2^23
constexpr int32_t kRoundMagicBits = 0x4b400000; // its f32 bits
// exp(+-c) for an argument c already clamped, in two parts: e^r - 1 and the integer n of
// exp(+-c) = 2^n e^r (as i32), which the callers scale by.
struct ExpParts {
  Value *em1, *n;
};
ExpParts expParts(llvm::IRBuilder<> &b, Value *c, ExpOf of) {
  const bool neg = of == ExpOf::minusX;
  // n = rint(+-c / ln2) by the 1.5 * 2^23 trick: adding it rounds to an integer, which is
  // then also t's low mantissa bits (the n returned: no float-to-int conversion, whose NaN is
  // poison in LLVM IR and needed a select to keep the result NaN; here a NaN x gives a NaN
  // t, n and r, and the result is NaN without one). Two operations fewer than rint,
  // fptosi and that select (toy64 0.437 -> 0.420 ms, docs/performance.md).
  Value *t = fmuladd(b, c, fconst(c, neg ? -1.44269504088896341 : 1.44269504088896341),
                     fconst(c, kRoundMagic));
  Value *n = b.CreateFSub(t, fconst(c, kRoundMagic));
  // r = (+-c) - n * ln2, ln2 in two parts
  Value *r = neg ? b.CreateFNeg(fmuladd(b, n, fconst(c, 0.693359375), c))
                 : fmuladd(b, n, fconst(c, -0.693359375), c);
  r = fmuladd(b, n, fconst(c, 2.12194440e-4), r);
  // p(r) = 1.98757e-4 r^5 + 1.39820e-3 r^4 + ... + 0.5, and e^r = 1 + r + r^2 p(r)
  Value *r2 = b.CreateFMul(r, r);
  Value *hi = fmuladd(b, r, fconst(c, 1.9875691500E-4), fconst(c, 1.3981999507E-3));
  Value *mid = fmuladd(b, r, fconst(c, 8.3334519073E-3), fconst(c, 4.1665795894E-2));
  Value *lo = fmuladd(b, r, fconst(c, 1.6666665459E-1), fconst(c, 5.0000001201E-1));
  Value *p = fmuladd(b, b.CreateFMul(r2, r2), hi, fmuladd(b, r2, mid, lo));
  Value *em1 = fmuladd(b, p, r2, r); // e^r - 1
  return {em1, b.CreateSub(b.CreateBitCast(t, b.getInt32Ty()), b.getInt32(kRoundMagicBits))};
}

Value *expF32(llvm::IRBuilder<> &b, Value *x, ExpOf of = ExpOf::x) {
  // c: the argument clamped (for exp(-x), x clamped to the mirrored bounds: -c is -x's)
  Value *c = of == ExpOf::minusX ? clamp(b, x, -89.0, 104.0) : clamp(b, x, -104.0, 89.0);
  const ExpParts e = expParts(b, c, of);
  Value *half = b.CreateAShr(e.n, 1);
  Value *first = pow2(b, half);
  return b.CreateFMul(fmuladd(b, e.em1, first, first), pow2(b, b.CreateSub(e.n, half)));
}

Value *expFloat(llvm::IRBuilder<> &b, Value *x) {
  return x->getType()->isFloatTy() ? expF32(b, x) : b.CreateUnaryIntrinsic(llvm::Intrinsic::exp, x);
}

// p / q for the rational approximations (both finite on the clamped range), marked `arcp
// ninf`: a target may use a refined reciprocal estimate (the approximation's own error,
// ~4e-7, dominates either way).
Value *approxDiv(llvm::IRBuilder<> &b, Value *p, Value *q) {
  Value *r = b.CreateFDiv(p, q);
  if (auto *i = llvm::dyn_cast<llvm::Instruction>(r)) {
    i->setHasAllowReciprocal(true);
    i->setHasNoInfs(true);
  }
  return r;
}

// f32 tanh: x*P(x^2)/Q(x^2) on [-7.9, 7.9] (Eigen's rational fit; P(0)/Q(0) = 1 - 1.3e-7).
Value *tanhF32(llvm::IRBuilder<> &b, Value *x) {
  Value *c = clamp(b, x, -7.90531110763549805, 7.90531110763549805);
  Value *x2 = b.CreateFMul(c, c);
  Value *p = horner(b, x2,
                    {-2.76076847742355e-16, 2.00018790482477e-13, -8.60467152213735e-11,
                     5.12229709037114e-08, 1.48572235717979e-05, 6.37261928875436e-04,
                     4.89352455891786e-03});
  Value *q = horner(
      b, x2,
      {1.19825839466702e-06, 1.18534705686654e-04, 2.26843463243900e-03, 4.89352518554385e-03});
  return approxDiv(b, b.CreateFMul(c, p), q);
}

// f32 erf: x*P(x^2)/Q(x^2) on [-4, 4] (Eigen's rational fit); outside it (and at +-inf)
// exactly +-1, which is erf's f32 value there (erfc(4) = 1.5e-8 < half an ulp of 1): the
// fit itself is only ~1 - 3e-8 at +-4, more with a vector reciprocal estimate, and gelu's
// 1 + erf(x) must be 0 for large negative x. NaN propagates (clamp and compares keep it).
Value *erfF32(llvm::IRBuilder<> &b, Value *x) {
  Value *c = clamp(b, x, -4.0, 4.0);
  Value *x2 = b.CreateFMul(c, c);
  Value *p = horner(b, x2,
                    {-2.72614225801306e-10, 2.77068142495902e-08, -2.10102402082508e-06,
                     -5.69250639462346e-05, -7.34990630326855e-04, -2.95459980854025e-03,
                     -1.60960333262415e-02});
  Value *q = horner(b, x2,
                    {-1.45660718464996e-05, -2.13374055278905e-04, -1.68282697438203e-03,
                     -7.37332916720468e-03, -1.42647390514189e-02});
  Value *fit = approxDiv(b, b.CreateFMul(c, p), q);
  Value *one = fconst(x, 1.0);
  Value *r = b.CreateSelect(b.CreateFCmpOGE(x, fconst(x, 4.0)), one, fit);
  return b.CreateSelect(b.CreateFCmpOLE(x, fconst(x, -4.0)), fconst(x, -1.0), r);
}

// A pure libm function `double name(double)` (erf has no vector intrinsic in LLVM 19).
Value *callLibm(llvm::IRBuilder<> &b, const char *name, Value *x) {
  llvm::Module *m = b.GetInsertBlock()->getModule();
  auto *fty = llvm::FunctionType::get(x->getType(), {x->getType()}, false);
  llvm::FunctionCallee f = m->getOrInsertFunction(name, fty);
  if (auto *fn = llvm::dyn_cast<llvm::Function>(f.getCallee())) {
    fn->setDoesNotAccessMemory();
    fn->setDoesNotThrow();
    fn->setWillReturn();
  }
  return b.CreateCall(f, {x});
}

Value *erfFloat(llvm::IRBuilder<> &b, Value *x) {
  return x->getType()->isFloatTy() ? erfF32(b, x) : callLibm(b, "erf", x);
}

// Whether x is a relu's result (select(v < 0, 0, v)): not below 0, or NaN.
bool reluResult(Value *x) {
  auto *sel = llvm::dyn_cast<llvm::SelectInst>(x);
  auto *cmp = sel ? llvm::dyn_cast<llvm::FCmpInst>(sel->getCondition()) : nullptr;
  auto isZero = [](Value *v) {
    auto *c = llvm::dyn_cast<llvm::ConstantFP>(v);
    return c && c->isZero();
  };
  return cmp && cmp->getPredicate() == llvm::CmpInst::FCMP_OLT &&
         cmp->getOperand(0) == sel->getFalseValue() && isZero(cmp->getOperand(1)) &&
         isZero(sel->getTrueValue());
}

// f32 exp(-x) for x not below 0 (or NaN): expF32's, but with its result in (0, 1] 2^n is one
// factor (n in [-126, 0]: x clamped to 87, where exp(-x) is already below 1 + e's half
// ulp), two integer operations and a multiply fewer on the chain of a relu then sigmoid.
Value *expF32OfMinusNonNegative(llvm::IRBuilder<> &b, Value *x) {
  Value *c = b.CreateSelect(b.CreateFCmpOLT(fconst(x, 87.0), x), fconst(x, 87.0), x);
  const ExpParts e = expParts(b, c, ExpOf::minusX);
  Value *s = pow2(b, e.n);
  return fmuladd(b, e.em1, s, s);
}

Value *sigmoidFloat(llvm::IRBuilder<> &b, Value *x) {
  Value *e = !x->getType()->isFloatTy()
                 ? b.CreateUnaryIntrinsic(llvm::Intrinsic::exp, b.CreateFNeg(x))
             : reluResult(x) ? expF32OfMinusNonNegative(b, x)
                             : expF32(b, x, ExpOf::minusX);
  return b.CreateFDiv(fconst(x, 1.0), b.CreateFAdd(fconst(x, 1.0), e));
}

Value *unaryFloat(llvm::IRBuilder<> &b, OpKind op, Value *x) {
  using llvm::Intrinsic::ID;
  auto intr = [&](ID id) { return b.CreateUnaryIntrinsic(id, x); };
  switch (op) {
  case OpKind::neg:
    return b.CreateFNeg(x);
  case OpKind::abs:
    return intr(llvm::Intrinsic::fabs);
  case OpKind::exp:
    return expFloat(b, x);
  case OpKind::log:
    return intr(llvm::Intrinsic::log);
  case OpKind::sqrt:
    return intr(llvm::Intrinsic::sqrt);
  case OpKind::rsqrt:
    return b.CreateFDiv(fconst(x, 1.0), intr(llvm::Intrinsic::sqrt));
  case OpKind::reciprocal:
    return b.CreateFDiv(fconst(x, 1.0), x);
  case OpKind::tanh:
    return x->getType()->isFloatTy() ? tanhF32(b, x) : intr(llvm::Intrinsic::tanh);
  case OpKind::sigmoid:
    return sigmoidFloat(b, x);
  case OpKind::relu:
    return b.CreateSelect(b.CreateFCmpOLT(x, fconst(x, 0.0)), fconst(x, 0.0), x);
  case OpKind::gelu: {
    // x/2 * (1 + erf(x/sqrt 2)); 0 where 1 + erf is 0 in this precision (f32: x/sqrt 2 <=
    // -4; f64: below -40, which only -inf reaches, where x * 0 would be NaN). NaN compares
    // false and propagates through the formula.
    Value *e = erfFloat(b, b.CreateFMul(x, fconst(x, M_SQRT1_2)));
    Value *g = b.CreateFMul(b.CreateFMul(x, fconst(x, 0.5)), b.CreateFAdd(fconst(x, 1.0), e));
    double zeroBelow = x->getType()->isFloatTy() ? -4.0 * M_SQRT2 : -40.0;
    return b.CreateSelect(b.CreateFCmpOLE(x, fconst(x, zeroBelow)), fconst(x, 0.0), g);
  }
  case OpKind::silu:
    return b.CreateFMul(x, sigmoidFloat(b, x));
  case OpKind::erf:
    return erfFloat(b, x);
  case OpKind::sin:
    return intr(llvm::Intrinsic::sin);
  case OpKind::cos:
    return intr(llvm::Intrinsic::cos);
  case OpKind::cast: // emitCompute converts
    RCJIT_OP_CASES(Source, Binary, Compare, Where, Reduce, Normalize, Matmul, Nn, View, Copy,
                   Collective)
    break;
  }
  noEmitterFor(op, "unaryFloat");
}

Value *unaryInt(llvm::IRBuilder<> &b, OpKind op, Value *x) {
  Value *zero = llvm::ConstantInt::get(x->getType(), 0);
  switch (op) {
  case OpKind::neg:
    return b.CreateNeg(x);
  case OpKind::abs:
    return b.CreateBinaryIntrinsic(llvm::Intrinsic::abs, x, b.getFalse());
  case OpKind::relu:
    return b.CreateBinaryIntrinsic(llvm::Intrinsic::smax, x, zero);
  case OpKind::cast:                // emitCompute converts
    RCJIT_OP_CASES_WITH(kFloatOnly) // emitCompute computes them in f64
    RCJIT_OP_CASES(Source, Binary, Compare, Where, Reduce, Normalize, Matmul, Nn, View, Copy,
                   Collective)
    break;
  }
  noEmitterFor(op, "unaryInt");
}

Value *binaryFloat(llvm::IRBuilder<> &b, OpKind op, Value *x, Value *y) {
  switch (op) {
  case OpKind::add:
    return b.CreateFAdd(x, y);
  case OpKind::sub:
    return b.CreateFSub(x, y);
  case OpKind::mul:
    return b.CreateFMul(x, y);
  case OpKind::div:
    return b.CreateFDiv(x, y);
  case OpKind::pow:
    return b.CreateBinaryIntrinsic(llvm::Intrinsic::pow, x, y);
  case OpKind::maximum:
    return b.CreateBinaryIntrinsic(llvm::Intrinsic::maximum, x, y);
  case OpKind::minimum:
    return b.CreateBinaryIntrinsic(llvm::Intrinsic::minimum, x, y);
    RCJIT_OP_CASES(Source, Unary, Compare, Where, Reduce, Normalize, Matmul, Nn, View, Copy,
                   Collective)
    break;
  }
  noEmitterFor(op, "binaryFloat");
}

// Integer ops; division truncates, and a zero divisor yields x (no trap).
Value *binaryInt(llvm::IRBuilder<> &b, OpKind op, Value *x, Value *y) {
  llvm::Type *t = x->getType();
  switch (op) {
  case OpKind::add:
    return b.CreateAdd(x, y);
  case OpKind::sub:
    return b.CreateSub(x, y);
  case OpKind::mul:
    return b.CreateMul(x, y);
  case OpKind::div: {
    Value *safe = b.CreateSelect(b.CreateICmpEQ(y, llvm::ConstantInt::get(t, 0)),
                                 llvm::ConstantInt::get(t, 1), y);
    return b.CreateSDiv(x, safe);
  }
  case OpKind::pow: {
    Value *r = b.CreateBinaryIntrinsic(llvm::Intrinsic::pow, b.CreateSIToFP(x, b.getDoubleTy()),
                                       b.CreateSIToFP(y, b.getDoubleTy()));
    return b.CreateFPToSI(r, t);
  }
  case OpKind::maximum:
    return b.CreateBinaryIntrinsic(llvm::Intrinsic::smax, x, y);
  case OpKind::minimum:
    return b.CreateBinaryIntrinsic(llvm::Intrinsic::smin, x, y);
    RCJIT_OP_CASES(Source, Unary, Compare, Where, Reduce, Normalize, Matmul, Nn, View, Copy,
                   Collective)
    break;
  }
  noEmitterFor(op, "binaryInt");
}

Value *compare(llvm::IRBuilder<> &b, OpKind op, Value *x, Value *y, bool isFloat) {
  using P = llvm::CmpInst::Predicate;
  P p = P::BAD_ICMP_PREDICATE;
  switch (op) {
  case OpKind::eq:
    p = isFloat ? P::FCMP_OEQ : P::ICMP_EQ;
    break;
  case OpKind::ne:
    p = isFloat ? P::FCMP_UNE : P::ICMP_NE;
    break;
  case OpKind::lt:
    p = isFloat ? P::FCMP_OLT : P::ICMP_SLT;
    break;
  case OpKind::le:
    p = isFloat ? P::FCMP_OLE : P::ICMP_SLE;
    break;
  case OpKind::gt:
    p = isFloat ? P::FCMP_OGT : P::ICMP_SGT;
    break;
  case OpKind::ge:
    p = isFloat ? P::FCMP_OGE : P::ICMP_SGE;
    break;
    RCJIT_OP_CASES(Source, Unary, Binary, Where, Reduce, Normalize, Matmul, Nn, View, Copy,
                   Collective)
    noEmitterFor(op, "compare");
  }
  return b.CreateCmp(p, x, y);
}

int promotionRank(DType t) {
  switch (t) {
  case DType::boolean:
    return 0;
  case DType::i32:
    return 1;
  case DType::i64:
    return 2;
  case DType::f16:
  case DType::bf16:
    return 3;
  case DType::f32:
    return 4;
  case DType::f64:
    return 5;
  }
  return 0;
}

// The dtype both operands of a comparison are converted to (bool compares as i32).
DType compareType(DType x, DType y) {
  if (x != y && promotionRank(x) == promotionRank(y)) return DType::f32; // f16 vs bf16
  DType t = promotionRank(x) >= promotionRank(y) ? x : y;
  return t == DType::boolean ? DType::i32 : t;
}

} // namespace

Value *fromStorage(llvm::IRBuilder<> &b, Value *stored, DType t) {
  if (t == DType::f16) return b.CreateFPExt(stored, b.getFloatTy());
  if (t == DType::bf16) return bf16BitsToFloat(b, stored);
  if (t == DType::boolean) return b.CreateICmpNE(stored, b.getInt8(0));
  return stored;
}

Value *toStorage(llvm::IRBuilder<> &b, Value *v, DType t) {
  if (t == DType::f16) return b.CreateFPTrunc(v, b.getHalfTy());
  if (t == DType::bf16) return floatToBf16Bits(b, v);
  if (t == DType::boolean) return b.CreateZExt(v, b.getInt8Ty());
  return v;
}

Value *convert(llvm::IRBuilder<> &b, Value *v, DType from, DType to) {
  if (from == to) return v;
  llvm::Type *tt = computeType(b.getContext(), to);
  bool ff = isFloatDtype(from);
  bool tf = isFloatDtype(to);
  if (to == DType::boolean) {
    return ff ? b.CreateFCmpUNE(v, fconst(v, 0.0))
              : b.CreateICmpNE(v, llvm::ConstantInt::get(v->getType(), 0));
  }
  if (tf && (to == DType::f16 || to == DType::bf16) && ff) return roundToReduced(b, v, to);
  Value *r = nullptr;
  if (ff && tf)
    r = b.CreateFPCast(v, tt);
  else if (ff)
    r = b.CreateFPToSI(v, tt);
  else if (tf)
    r = from == DType::boolean ? b.CreateUIToFP(v, tt) : b.CreateSIToFP(v, tt);
  else
    r = from == DType::boolean ? b.CreateZExt(v, tt) : b.CreateSExtOrTrunc(v, tt);
  if (to == DType::f16 || to == DType::bf16) r = roundToReduced(b, r, to);
  return r;
}

Value *emitConstant(llvm::IRBuilder<> &b, double value, DType t) {
  llvm::Type *ty = computeType(b.getContext(), t);
  if (t == DType::boolean) return b.getInt1(value != 0);
  if (!isFloatDtype(t)) return llvm::ConstantInt::get(ty, static_cast<int64_t>(value), true);
  Value *c = llvm::ConstantFP::get(ty, value);
  return (t == DType::f16 || t == DType::bf16) ? roundToReduced(b, c, t) : c;
}

Value *emitCompute(llvm::IRBuilder<> &b, OpKind op, DType out, const std::vector<Value *> &args,
                   const std::vector<DType> &argTypes) {
  OpCategory cat = opInfo(op).category;
  if (op == OpKind::cast) return convert(b, args[0], argTypes[0], out);
  if (cat == OpCategory::Compare) {
    DType c = compareType(argTypes[0], argTypes[1]);
    return compare(b, op, convert(b, args[0], argTypes[0], c), convert(b, args[1], argTypes[1], c),
                   isFloatDtype(c));
  }
  if (cat == OpCategory::Where) {
    return b.CreateSelect(convert(b, args[0], argTypes[0], DType::boolean),
                          convert(b, args[1], argTypes[1], out),
                          convert(b, args[2], argTypes[2], out));
  }
  // Arithmetic runs in `work`: bool as i32, float-only ops on integers in f64.
  DType work = out == DType::boolean ? DType::i32 : out;
  if (opHas(op, kFloatOnly) && !isFloatDtype(work)) work = DType::f64;
  std::vector<Value *> xs;
  for (size_t i = 0; i < args.size(); ++i) xs.push_back(convert(b, args[i], argTypes[i], work));
  bool f = isFloatDtype(work);
  Value *r = nullptr;
  if (cat == OpCategory::Unary)
    r = f ? unaryFloat(b, op, xs[0]) : unaryInt(b, op, xs[0]);
  else
    r = f ? binaryFloat(b, op, xs[0], xs[1]) : binaryInt(b, op, xs[0], xs[1]);
  return convert(b, r, work, out);
}

Value *emitMax(llvm::IRBuilder<> &b, Value *x, Value *y, DType t) {
  if (isFloatDtype(t)) return b.CreateBinaryIntrinsic(llvm::Intrinsic::maximum, x, y);
  if (t == DType::boolean) return b.CreateOr(x, y);
  return b.CreateBinaryIntrinsic(llvm::Intrinsic::smax, x, y);
}

Value *lowestValue(llvm::IRBuilder<> &b, DType t) {
  llvm::Type *ty = computeType(b.getContext(), t);
  if (isFloatDtype(t)) return llvm::ConstantFP::getInfinity(ty, true);
  if (t == DType::boolean) return b.getFalse();
  return llvm::ConstantInt::get(ty, llvm::APInt::getSignedMinValue(ty->getIntegerBitWidth()));
}

Value *argmaxTakes(llvm::IRBuilder<> &b, Value *x, Value *best, DType t) {
  if (t == DType::boolean) return b.CreateICmpUGT(x, best);
  if (!isFloatDtype(t)) return b.CreateICmpSGT(x, best);
  Value *firstNan = b.CreateAnd(b.CreateFCmpUNO(x, x), b.CreateFCmpORD(best, best));
  return b.CreateOr(b.CreateFCmpOGT(x, best), firstNan);
}

} // namespace rcjit::codegen
