// Target-neutral LLVM IR for a LoopKernel's loop body: indexing, statements, reduction passes.
#include "targets/LoopCodegen.h"

#include <algorithm>
#include <cassert>
#include <limits>

#include <llvm/IR/MDBuilder.h>

#include "targets/LoopCodegenOps.h"

namespace rcjit::codegen {

using llvm::Value;
using K = KernelStmt::Kind;

namespace {

// Float sums accumulate in blocks of this many innermost points (vector partial sums in
// the element type, reassociated), then into an f64 total: accurate for ~1e9 points.
constexpr int64_t kSumBlock = 4096;

// a * b; both without an added constant (mergeable() says so)
SizeExpr mulSize(SizeExpr a, const SizeExpr &b) {
  a.c *= b.c;
  a.syms.insert(a.syms.end(), b.syms.begin(), b.syms.end());
  std::sort(a.syms.begin(), a.syms.end());
  return a;
}

SizeExpr canonical(SizeExpr e) {
  std::sort(e.syms.begin(), e.syms.end());
  if (e.c == 0) e.syms.clear();
  return e;
}

// Dims [d, d+1] merge when every tensor's stride of d equals stride(d+1) * size(d+1); a
// size or stride with an added constant (s - 1) keeps its dims apart: products of such
// sums are not SizeExprs.
bool canMerge(const LoopKernel &k, size_t d) {
  if (k.domain[d].add != 0 || k.domain[d + 1].add != 0) return false;
  for (const KernelTensor &t : k.tensors) {
    if (t.strides[d].add != 0 || t.strides[d + 1].add != 0) return false;
    if (canonical(t.strides[d]) != canonical(mulSize(t.strides[d + 1], k.domain[d + 1]))) {
      return false;
    }
  }
  return true;
}

void eraseDim(LoopKernel &k, size_t d) {
  k.domain.erase(k.domain.begin() + static_cast<long>(d));
  for (KernelTensor &t : k.tensors) t.strides.erase(t.strides.begin() + static_cast<long>(d));
  if (static_cast<int>(d) < k.numOuter) --k.numOuter;
}

} // namespace

LoopKernel simplifyKernel(const LoopKernel &in) {
  LoopKernel k = in;
  for (size_t d = k.domain.size(); d-- > 0;) {
    bool lastInner =
        static_cast<int>(k.domain.size()) == k.numOuter + 1 && static_cast<int>(d) == k.numOuter;
    if (k.domain[d] == SizeExpr::constant(1) && !lastInner) eraseDim(k, d); // keep reductions
  }
  for (size_t d = k.domain.size(); d-- > 1;) {
    bool sameGroup = (static_cast<int>(d) < k.numOuter) == (static_cast<int>(d) - 1 < k.numOuter);
    if (!sameGroup || !canMerge(k, d - 1)) continue;
    for (KernelTensor &t : k.tensors) t.strides[d - 1] = t.strides[d];
    k.domain[d - 1] = canonical(mulSize(k.domain[d - 1], k.domain[d]));
    eraseDim(k, d);
  }
  return k;
}

std::vector<Value *> emitCountedLoop(llvm::IRBuilder<> &b, Value *start, Value *end,
                                     const std::vector<Value *> &init, const LoopBody &body,
                                     const llvm::Twine &name, int64_t step, unsigned hints) {
  llvm::Function *fn = b.GetInsertBlock()->getParent();
  llvm::LLVMContext &c = b.getContext();
  llvm::BasicBlock *pre = b.GetInsertBlock();
  auto *loop = llvm::BasicBlock::Create(c, name + ".body", fn);
  auto *exit = llvm::BasicBlock::Create(c, name + ".exit", fn);
  b.CreateCondBr(b.CreateICmpSLT(start, end), loop, exit);

  b.SetInsertPoint(loop);
  llvm::PHINode *iv = b.CreatePHI(b.getInt64Ty(), 2, name + ".i");
  iv->addIncoming(start, pre);
  std::vector<llvm::PHINode *> phis;
  std::vector<Value *> carried;
  for (Value *v : init) {
    phis.push_back(b.CreatePHI(v->getType(), 2));
    phis.back()->addIncoming(v, pre);
    carried.push_back(phis.back());
  }
  std::vector<Value *> next = body(iv, carried);
  Value *ivNext = b.CreateAdd(iv, b.getInt64(step), "", true, true);
  llvm::BasicBlock *latch = b.GetInsertBlock();
  llvm::BranchInst *back = b.CreateCondBr(b.CreateICmpSLT(ivNext, end), loop, exit);
  if (hints != 0) {
    std::vector<llvm::Metadata *> ops = {nullptr};
    if (hints & kNoUnroll)
      ops.push_back(llvm::MDNode::get(c, {llvm::MDString::get(c, "llvm.loop.unroll.disable")}));
    if (hints & kFoldTail) {
      auto flag = [&](const char *name) {
        return llvm::MDNode::get(c, {llvm::MDString::get(c, name),
                                     llvm::ConstantAsMetadata::get(llvm::ConstantInt::getTrue(c))});
      };
      ops.push_back(flag("llvm.loop.vectorize.enable"));
      ops.push_back(flag("llvm.loop.vectorize.predicate.enable"));
    }
    if (hints & kWidth8) {
      ops.push_back(llvm::MDNode::get(c, {llvm::MDString::get(c, "llvm.loop.vectorize.width"),
                                          llvm::ConstantAsMetadata::get(b.getInt32(8))}));
    }
    llvm::MDNode *md = llvm::MDNode::getDistinct(c, ops);
    md->replaceOperandWith(0, md);
    back->setMetadata(llvm::LLVMContext::MD_loop, md);
  }
  iv->addIncoming(ivNext, latch);

  b.SetInsertPoint(exit);
  std::vector<Value *> out;
  for (size_t i = 0; i < phis.size(); ++i) {
    phis[i]->addIncoming(next[i], latch);
    llvm::PHINode *r = b.CreatePHI(init[i]->getType(), 2);
    r->addIncoming(init[i], pre);
    r->addIncoming(next[i], latch);
    out.push_back(r);
  }
  return out;
}

// ---------------------------------------------------------------------------------------
// Reductions: a local accumulator per innermost run (vectorizable), folded into a total.

struct KernelBody::Reduction {
  int stmt = 0;
  OpKind op = OpKind::sum;
  DType in = DType::f32;    // the reduced value's dtype
  DType acc = DType::f32;   // local accumulator dtype
  DType total = DType::f32; // total accumulator dtype
  int slot = 0;             // first carried value (argmax carries value and index)

  Reduction(const LoopKernel &k, int s, int firstSlot) : stmt(s), slot(firstSlot) {
    const KernelStmt &st = k.stmts[s];
    op = st.op;
    in = k.stmts[st.args[0]].dtype;
    DType base = op == OpKind::argmax ? in : st.dtype;
    acc = (base == DType::f16 || base == DType::bf16) ? DType::f32 : base;
    if (acc == DType::boolean && op != OpKind::argmax && op != OpKind::amax) acc = DType::i64;
    bool floatSum = (op == OpKind::sum || op == OpKind::mean) && isFloatDtype(acc);
    total = floatSum ? DType::f64 : acc;
  }
  int width() const { return op == OpKind::argmax ? 2 : 1; }
  bool isFloatSum() const { return (op == OpKind::sum || op == OpKind::mean) && isFloatDtype(acc); }

  void init(llvm::IRBuilder<> &b, DType t, std::vector<Value *> &out) const {
    if (op == OpKind::sum || op == OpKind::mean) {
      out.push_back(llvm::Constant::getNullValue(computeType(b.getContext(), t)));
      return;
    }
    out.push_back(lowestValue(b, t));
    if (op == OpKind::argmax) out.push_back(b.getInt64(0));
  }

  void update(llvm::IRBuilder<> &b, Value *x, Value *flat, std::vector<Value *> &cur) const {
    Value *v = convert(b, x, in, acc);
    Value *&a = cur[slot];
    if (op == OpKind::sum || op == OpKind::mean) {
      a = isFloatDtype(acc) ? b.CreateFAdd(a, v) : b.CreateAdd(a, v);
      if (auto *i = llvm::dyn_cast<llvm::Instruction>(a); i && isFloatDtype(acc)) {
        i->setHasAllowReassoc(true);
      }
    } else if (op == OpKind::amax) {
      a = emitMax(b, a, v, acc);
    } else {
      Value *take = argmaxTakes(b, v, a, acc);
      a = b.CreateSelect(take, v, a);
      cur[slot + 1] = b.CreateSelect(take, flat, cur[slot + 1]);
    }
  }

  void combine(llvm::IRBuilder<> &b, const std::vector<Value *> &local,
               std::vector<Value *> &tot) const {
    Value *&t = tot[slot];
    if (op == OpKind::sum || op == OpKind::mean) {
      Value *l = convert(b, local[slot], acc, total);
      t = isFloatDtype(total) ? b.CreateFAdd(t, l) : b.CreateAdd(t, l);
    } else if (op == OpKind::amax) {
      t = emitMax(b, t, local[slot], acc);
    } else {
      Value *take = argmaxTakes(b, local[slot], t, acc);
      t = b.CreateSelect(take, local[slot], t);
      tot[slot + 1] = b.CreateSelect(take, local[slot + 1], tot[slot + 1]);
    }
  }

  // Folds another lane's totals `other` into `tot`. Unlike combine, which knows that `local`
  // comes after `tot` in index order, this is symmetric (argmax breaks ties by the lower
  // index, the first NaN included: the CPU's answer), so that every lane of a butterfly ends
  // with the same bits.
  void combineLanes(llvm::IRBuilder<> &b, const std::vector<Value *> &other,
                    std::vector<Value *> &tot) const {
    Value *&t = tot[slot];
    Value *x = other[slot];
    if (op == OpKind::sum || op == OpKind::mean) {
      t = isFloatDtype(total) ? b.CreateFAdd(t, x) : b.CreateAdd(t, x);
    } else if (op == OpKind::amax) {
      t = emitMax(b, t, x, acc);
    } else {
      Value *same = isFloatDtype(acc)
                        ? b.CreateOr(b.CreateFCmpOEQ(x, t),
                                     b.CreateAnd(b.CreateFCmpUNO(x, x), b.CreateFCmpUNO(t, t)))
                        : b.CreateICmpEQ(x, t);
      Value *earlier = b.CreateICmpSLT(other[slot + 1], tot[slot + 1]);
      Value *take = b.CreateOr(argmaxTakes(b, x, t, acc), b.CreateAnd(same, earlier));
      t = b.CreateSelect(take, x, t);
      tot[slot + 1] = b.CreateSelect(take, other[slot + 1], tot[slot + 1]);
    }
  }

  Value *finish(llvm::IRBuilder<> &b, const std::vector<Value *> &tot, Value *count,
                DType out) const {
    if (op == OpKind::argmax) return tot[slot + 1];
    if (op == OpKind::amax) return convert(b, tot[slot], acc, out);
    Value *t = tot[slot];
    if (op == OpKind::mean) {
      t = isFloatDtype(total) ? b.CreateFDiv(t, b.CreateSIToFP(count, t->getType()))
                              : b.CreateSDiv(t, b.CreateSExtOrTrunc(count, t->getType()));
    }
    return convert(b, t, total, out);
  }
};

// ---------------------------------------------------------------------------------------

KernelBody::KernelBody(llvm::IRBuilder<> &b, const LoopKernel &k, Value *ptrs, Value *syms)
    : b_(b), k_(k) {
  llvm::MDNode *invariant = llvm::MDNode::get(b.getContext(), {});
  for (size_t i = 0; i < k.tensors.size(); ++i) {
    Value *slot = b.CreateConstInBoundsGEP1_64(b.getPtrTy(), ptrs, i);
    auto *p = b.CreateLoad(b.getPtrTy(), slot, "t" + std::to_string(i));
    p->setMetadata(llvm::LLVMContext::MD_invariant_load, invariant);
    base_.push_back(p);
  }
  auto loadSyms = [&](const SizeExpr &e) {
    for (int32_t s : e.syms) {
      if (syms_.count(s)) continue;
      Value *slot = b.CreateConstInBoundsGEP1_64(b.getInt64Ty(), syms, s);
      auto *v = b.CreateLoad(b.getInt64Ty(), slot, "s" + std::to_string(s));
      v->setMetadata(llvm::LLVMContext::MD_invariant_load, invariant);
      syms_[s] = v;
    }
  };
  for (const SizeExpr &e : k.domain) loadSyms(e);
  for (const KernelTensor &t : k.tensors) {
    for (const SizeExpr &e : t.strides) loadSyms(e);
    loadSyms(t.rowStride);
    loadSyms(t.rows);
  }
  makeAliasScopes();
  analyze();
}

// Every tensor gets its own alias scope: the runtime guarantees outputs alias no input and
// no other output, so loads and stores of different tensors never conflict.
void KernelBody::makeAliasScopes() {
  llvm::MDBuilder mdb(b_.getContext());
  llvm::MDNode *domain = mdb.createAnonymousAliasScopeDomain(k_.name);
  std::vector<llvm::Metadata *> scopes;
  for (size_t i = 0; i < k_.tensors.size(); ++i) {
    scopes.push_back(mdb.createAnonymousAliasScope(domain, "t" + std::to_string(i)));
  }
  for (size_t i = 0; i < scopes.size(); ++i) {
    std::vector<llvm::Metadata *> others;
    for (size_t j = 0; j < scopes.size(); ++j) {
      if (j != i) others.push_back(scopes[j]);
    }
    scope_.push_back(llvm::MDNode::get(b_.getContext(), {scopes[i]}));
    noalias_.push_back(llvm::MDNode::get(b_.getContext(), others));
  }
}

// inner_: depends on an inner index; ready_: reduction passes needed before the value.
void KernelBody::analyze() {
  size_t n = k_.stmts.size();
  inner_.assign(n, false);
  ready_.assign(n, 0);
  for (size_t s = 0; s < n; ++s) {
    const KernelStmt &st = k_.stmts[s];
    for (int a : st.args) {
      inner_[s] = inner_[s] || inner_[a];
      ready_[s] = std::max(ready_[s], ready_[a]);
    }
    if (st.kind == K::load || st.kind == K::gather) {
      for (size_t d = k_.numOuter; d < k_.domain.size(); ++d) {
        inner_[s] = inner_[s] || k_.tensors[st.tensor].strides[d] != SizeExpr::constant(0);
      }
    }
    if (st.kind == K::reduce) {
      inner_[s] = false;
      ready_[s] += 1;
      numPasses_ = std::max(numPasses_, ready_[s]);
    }
    if (st.kind == K::store) {
      // a value that is the same along the inner dims (e.g. computed from a broadcast
      // input) but stored to a tensor that spans them is written at every inner point
      for (size_t d = k_.numOuter; d < k_.domain.size(); ++d) {
        inner_[s] = inner_[s] || k_.tensors[st.tensor].strides[d] != SizeExpr::constant(0);
      }
      if (inner_[s]) numPasses_ = std::max(numPasses_, ready_[s] + 1);
    }
  }
}

Value *KernelBody::size(const SizeExpr &e) {
  Value *v = b_.getInt64(e.c);
  for (int32_t s : e.syms) v = b_.CreateMul(v, syms_.at(s));
  return e.add != 0 ? b_.CreateAdd(v, b_.getInt64(e.add)) : v;
}

Value *KernelBody::innerCount() {
  Value *count = b_.getInt64(1);
  for (size_t d = k_.numOuter; d < k_.domain.size(); ++d) {
    count = b_.CreateMul(count, size(k_.domain[d]));
  }
  return count;
}

std::vector<Value *> KernelBody::unflatten(Value *flat, int first, int end) {
  std::vector<Value *> idx(static_cast<size_t>(std::max(end - first, 0)));
  Value *q = flat;
  for (int d = end - 1; d > first; --d) {
    Value *n = size(k_.domain[d]);
    idx[d - first] = b_.CreateURem(q, n);
    q = b_.CreateUDiv(q, n);
  }
  if (end > first) idx[0] = q;
  return idx;
}

// sum_d idx_d * stride_d in elements, summed in dim order so the outer part is
// loop-invariant; null where every stride is 0.
Value *KernelBody::elementOffset(int tensor, const Values &idx) {
  const KernelTensor &t = k_.tensors[tensor];
  Value *off = nullptr;
  for (size_t d = 0; d < idx.size(); ++d) {
    if (t.strides[d] == SizeExpr::constant(0)) continue;
    Value *term =
        t.strides[d] == SizeExpr::constant(1) ? idx[d] : b_.CreateMul(idx[d], size(t.strides[d]));
    off = off ? b_.CreateAdd(off, term) : term;
  }
  return off;
}

Value *KernelBody::address(int tensor, const Values &idx) {
  assert(!k_.tensors[tensor].iota && "an iota tensor is never read or written");
  Value *off = elementOffset(tensor, idx);
  llvm::Type *et = storageType(b_.getContext(), k_.tensors[tensor].dtype);
  return off ? b_.CreateInBoundsGEP(et, base_[tensor], off) : base_[tensor];
}

// A tensor's element at idx; an iota tensor's (an arange's) is its offset, computed.
Value *KernelBody::emitLoad(int tensor, const Values &idx) {
  const KernelTensor &t = k_.tensors[tensor];
  if (!t.iota) return loadFrom(tensor, address(tensor, idx));
  Value *off = elementOffset(tensor, idx);
  return emitCompute(b_, OpKind::cast, t.dtype, {off ? off : b_.getInt64(0)}, {DType::i64});
}

// Tensor `tensor`'s element at `addr`, in its compute type (aliasing metadata attached).
Value *KernelBody::loadFrom(int tensor, Value *addr) {
  DType dt = k_.tensors[tensor].dtype;
  llvm::Type *et = storageType(b_.getContext(), dt);
  auto *ld = b_.CreateAlignedLoad(et, addr, llvm::Align(std::max<uint64_t>(1, dtypeSize(dt))));
  ld->setMetadata(llvm::LLVMContext::MD_alias_scope, scope_[tensor]);
  ld->setMetadata(llvm::LLVMContext::MD_noalias, noalias_[tensor]);
  return fromStorage(b_, ld, dt);
}

void KernelBody::emitStore(int tensor, const Values &idx, Value *v, DType from) {
  DType dt = k_.tensors[tensor].dtype;
  Value *stored = toStorage(b_, convert(b_, v, from, dt), dt);
  auto *st = b_.CreateAlignedStore(stored, address(tensor, idx),
                                   llvm::Align(std::max<uint64_t>(1, dtypeSize(dt))));
  st->setMetadata(llvm::LLVMContext::MD_alias_scope, scope_[tensor]);
  st->setMetadata(llvm::LLVMContext::MD_noalias, noalias_[tensor]);
}

// The address of indexed tensor `tensor`'s element at `idx` in row `row` (an in-range i64).
Value *KernelBody::rowAddress(int tensor, const Values &idx, Value *row) {
  const KernelTensor &t = k_.tensors[tensor];
  llvm::Type *et = storageType(b_.getContext(), t.dtype);
  return b_.CreateInBoundsGEP(et, address(tensor, idx), b_.CreateMul(row, size(t.rowStride)));
}

// gather: the row's element, or NaN (0 for an integer table) for an index out of range,
// read branch-free from row 0 and replaced (the table has at least one row: verified).
Value *KernelBody::emitGather(const KernelStmt &st, const Values &idx, Value *row) {
  const KernelTensor &t = k_.tensors[st.tensor];
  Value *ok = b_.CreateICmpULT(row, size(t.rows));
  Value *at = b_.CreateSelect(ok, row, b_.getInt64(0));
  Value *v = loadFrom(st.tensor, rowAddress(st.tensor, idx, at));
  const double bad = isFloatDtype(t.dtype) ? std::numeric_limits<double>::quiet_NaN() : 0.0;
  return b_.CreateSelect(ok, v, emitConstant(b_, bad, t.dtype));
}

// scatterAdd: an atomic add of `v` into the row's element when the index is in range.
void KernelBody::emitScatterAdd(const KernelStmt &st, const Values &idx, Value *row, Value *v,
                                DType from) {
  const KernelTensor &t = k_.tensors[st.tensor];
  llvm::Function *fn = b_.GetInsertBlock()->getParent();
  auto *add = llvm::BasicBlock::Create(b_.getContext(), "scatter.add", fn);
  auto *done = llvm::BasicBlock::Create(b_.getContext(), "scatter.done", fn);
  b_.CreateCondBr(b_.CreateICmpULT(row, size(t.rows)), add, done);
  b_.SetInsertPoint(add);
  b_.CreateAtomicRMW(llvm::AtomicRMWInst::FAdd, rowAddress(st.tensor, idx, row),
                     convert(b_, v, from, t.dtype), llvm::Align(dtypeSize(t.dtype)),
                     llvm::AtomicOrdering::Monotonic);
  b_.CreateBr(done);
  b_.SetInsertPoint(done);
}

// A load, gather, constant or compute statement; stores and reductions are emitted by the
// caller.
Value *KernelBody::emitStmt(int s, const Values &idx, const Values &vals) {
  const KernelStmt &st = k_.stmts[s];
  if (st.kind == K::load) return emitLoad(st.tensor, idx);
  if (st.kind == K::gather) return emitGather(st, idx, vals[st.args[0]]);
  if (st.kind == K::constant) return emitConstant(b_, st.value, st.dtype);
  if (st.kind == K::count)
    return emitCompute(b_, OpKind::cast, st.dtype, {innerCount()}, {DType::i64});
  std::vector<Value *> args;
  std::vector<DType> types;
  for (int a : st.args) {
    args.push_back(vals[a]);
    types.push_back(k_.stmts[a].dtype);
  }
  return emitCompute(b_, st.op, st.dtype, args, types);
}

// The outer-level statements that become available after `afterPass` reduction passes.
void KernelBody::emitOuterLevel(int afterPass, const Values &idx, Values &vals) {
  for (size_t s = 0; s < k_.stmts.size(); ++s) {
    const KernelStmt &st = k_.stmts[s];
    if (inner_[s] || ready_[s] != afterPass || st.kind == K::reduce) continue;
    if (st.kind == K::store) {
      emitOuterStore(st.tensor, idx, vals[st.args[0]], k_.stmts[st.args[0]].dtype);
    } else if (st.kind == K::scatterAdd) { // only in kernels without inner dims (verified)
      emitScatterAdd(st, idx, vals[st.args[0]], vals[st.args[1]], k_.stmts[st.args[1]].dtype);
    } else {
      vals[s] = emitStmt(static_cast<int>(s), idx, vals);
    }
  }
}

// An outer-level store: with a lane split every lane holds the value; lane 0 writes it.
void KernelBody::emitOuterStore(int tensor, const Values &idx, Value *v, DType from) {
  if (!split_) {
    emitStore(tensor, idx, v, from);
    return;
  }
  llvm::Function *fn = b_.GetInsertBlock()->getParent();
  auto *store = llvm::BasicBlock::Create(b_.getContext(), "lane0.store", fn);
  auto *done = llvm::BasicBlock::Create(b_.getContext(), "lane0.done", fn);
  b_.CreateCondBr(b_.CreateICmpEQ(split_->lane, b_.getInt64(0)), store, done);
  b_.SetInsertPoint(store);
  emitStore(tensor, idx, v, from);
  b_.CreateBr(done);
  b_.SetInsertPoint(done);
}

void KernelBody::emitPoint(const std::vector<Value *> &outerIdx) {
  assert(outerIdx.size() == static_cast<size_t>(k_.numOuter));
  Values vals(k_.stmts.size(), nullptr);
  Values idx = outerIdx;
  emitOuterLevel(0, idx, vals);
  for (int p = 1; p <= numPasses_; ++p) {
    emitPass(p, idx, vals);
    emitOuterLevel(p, idx, vals);
  }
}

Value *KernelBody::loadAddress(int s, const Values &idx) {
  assert(k_.stmts[s].kind == K::load);
  return address(k_.stmts[s].tensor, idx);
}

Value *KernelBody::emitValueAt(int s, const Values &idx) {
  const KernelStmt &st = k_.stmts[s];
  assert(st.kind == K::load || st.kind == K::constant || st.kind == K::compute);
  if (st.kind != K::compute) return emitStmt(s, idx, {});
  Values vals(k_.stmts.size(), nullptr);
  for (int a : st.args) vals[a] = emitValueAt(a, idx);
  return emitStmt(s, idx, vals);
}

void KernelBody::emitPointGiven(const Values &outerIdx, int reduce, Value *value) {
  assert(outerIdx.size() == static_cast<size_t>(k_.numOuter) && numPasses_ == 1);
  Values vals(k_.stmts.size(), nullptr);
  Values idx = outerIdx;
  emitOuterLevel(0, idx, vals);
  vals[reduce] = value;
  emitOuterLevel(1, idx, vals);
}

Value *KernelBody::innerFlatIndex(const Values &idx) {
  Value *f = b_.getInt64(0);
  for (size_t d = k_.numOuter; d < k_.domain.size(); ++d) {
    f = b_.CreateAdd(b_.CreateMul(f, size(k_.domain[d])), idx[d]);
  }
  return f;
}

// One pass over the inner dims: the reductions whose input is ready after pass-1 passes,
// and the inner-level stores that become computable.
void KernelBody::emitPass(int pass, Values &idx, Values &vals) {
  std::vector<bool> needed(k_.stmts.size(), false);
  std::vector<Reduction> reds;
  int slots = 0;
  for (size_t s = 0; s < k_.stmts.size(); ++s) {
    const KernelStmt &st = k_.stmts[s];
    bool inPass = (st.kind == K::reduce && ready_[s] == pass) ||
                  (st.kind == K::store && inner_[s] && ready_[s] + 1 == pass);
    if (!inPass) continue;
    needed[s] = true;
    if (st.kind == K::reduce) {
      reds.emplace_back(k_, static_cast<int>(s), slots);
      slots += reds.back().width();
    }
  }
  for (size_t s = k_.stmts.size(); s-- > 0;) {
    if (!needed[s]) continue;
    for (int a : k_.stmts[s].args) needed[a] = needed[a] || inner_[a];
  }
  bool blocked =
      std::any_of(reds.begin(), reds.end(), [](const Reduction &r) { return r.isFloatSum(); });
  const SizeExpr &last = k_.domain.back();
  if (last.isConstant() && last.c <= kSumBlock) blocked = false;
  Values totals;
  for (const Reduction &r : reds) r.init(b_, r.total, totals);
  idx.resize(k_.domain.size(), nullptr);
  if (split_) {
    totals = combineAcrossLanes(reds, emitLaneRuns(idx, vals, needed, reds, totals));
  } else {
    totals = emitInnerLoops(k_.numOuter, idx, vals, needed, reds, totals, blocked);
  }
  idx.resize(k_.numOuter);
  Value *count = innerCount();
  for (const Reduction &r : reds) {
    vals[r.stmt] = r.finish(b_, totals, count, k_.stmts[r.stmt].dtype);
  }
}

KernelBody::Values KernelBody::emitInnerLoops(size_t dim, Values &idx, Values &vals,
                                              const std::vector<bool> &needed,
                                              std::vector<Reduction> &reds, const Values &totals,
                                              bool blocked) {
  Value *n = size(k_.domain[dim]);
  std::string name = "d" + std::to_string(dim);
  if (dim + 1 < k_.domain.size()) {
    return emitCountedLoop(
        b_, b_.getInt64(0), n, totals,
        [&](Value *i, const Values &cur) {
          idx[dim] = i;
          return emitInnerLoops(dim + 1, idx, vals, needed, reds, cur, blocked);
        },
        name);
  }
  if (!blocked) return emitInnermostRun(b_.getInt64(0), n, idx, vals, needed, reds, totals);
  Value *blocks =
      b_.CreateUDiv(b_.CreateAdd(n, b_.getInt64(kSumBlock - 1)), b_.getInt64(kSumBlock));
  return emitCountedLoop(
      b_, b_.getInt64(0), blocks, totals,
      [&](Value *blk, const Values &cur) {
        Value *lo = b_.CreateMul(blk, b_.getInt64(kSumBlock));
        Value *hi = b_.CreateBinaryIntrinsic(llvm::Intrinsic::smin,
                                             b_.CreateAdd(lo, b_.getInt64(kSumBlock)), n);
        return emitInnermostRun(lo, hi, idx, vals, needed, reds, cur);
      },
      name + ".blk");
}

// The innermost loop over [lo, hi) with fresh local accumulators, folded into `totals`.
KernelBody::Values KernelBody::emitInnermostRun(Value *lo, Value *hi, Values &idx, Values &vals,
                                                const std::vector<bool> &needed,
                                                std::vector<Reduction> &reds,
                                                const Values &totals) {
  size_t dim = k_.domain.size() - 1;
  Values locals;
  for (const Reduction &r : reds) r.init(b_, r.acc, locals);
  Values out = emitCountedLoop(
      b_, lo, hi, locals,
      [&](Value *i, const Values &cur) {
        idx[dim] = i;
        return emitInnerPoint(idx, vals, needed, reds, nullptr, cur);
      },
      "d" + std::to_string(dim));
  Values tot = totals;
  for (const Reduction &r : reds) r.combine(b_, out, tot);
  return tot;
}

// One inner point of a pass: its needed statements and stores, then the reductions' updates
// of the accumulators `cur`, which it returns. `flat` is the flat inner index, or null to
// compute it here (only argmax needs it).
KernelBody::Values KernelBody::emitInnerPoint(const Values &idx, const Values &vals,
                                              const std::vector<bool> &needed,
                                              const std::vector<Reduction> &reds, Value *flat,
                                              const Values &cur) {
  Values v = vals;
  for (size_t s = 0; s < k_.stmts.size(); ++s) {
    const KernelStmt &st = k_.stmts[s];
    if (!needed[s] || !inner_[s] || st.kind == K::store) continue;
    v[s] = emitStmt(static_cast<int>(s), idx, v);
  }
  for (size_t s = 0; s < k_.stmts.size(); ++s) {
    const KernelStmt &st = k_.stmts[s];
    if (needed[s] && st.kind == K::store) {
      emitStore(st.tensor, idx, v[st.args[0]], k_.stmts[st.args[0]].dtype);
    }
  }
  Values next = cur;
  bool anyArgmax = std::any_of(reds.begin(), reds.end(),
                               [](const Reduction &r) { return r.op == OpKind::argmax; });
  if (anyArgmax && !flat) flat = innerFlatIndex(idx);
  for (const Reduction &r : reds) r.update(b_, v[k_.stmts[r.stmt].args[0]], flat, next);
  return next;
}

// With a lane split: this lane's share of a pass, the flat inner positions lane, lane +
// lanes, ... below the inner size, folded into `totals`. As on the CPU, float sums go through
// fresh local accumulators per block of kSumBlock points of the lane (then into the f64 total).
KernelBody::Values KernelBody::emitLaneRuns(Values &idx, const Values &vals,
                                            const std::vector<bool> &needed,
                                            const std::vector<Reduction> &reds,
                                            const Values &totals) {
  const int64_t lanes = split_->lanes;
  const int first = k_.numOuter, end = static_cast<int>(k_.domain.size());
  Value *count = b_.getInt64(1);
  bool constant = true;
  int64_t constantCount = 1;
  for (int d = first; d < end; ++d) {
    count = b_.CreateMul(count, size(k_.domain[d]));
    constant = constant && k_.domain[d].isConstant();
    if (constant) constantCount *= k_.domain[d].c;
  }
  auto run = [&](Value *lo, Value *hi, const Values &tot) {
    Values locals;
    for (const Reduction &r : reds) r.init(b_, r.acc, locals);
    Values out = emitCountedLoop(
        b_, b_.CreateAdd(lo, split_->lane), hi, locals,
        [&](Value *flat, const Values &cur) {
          Values inner = unflatten(flat, first, end);
          std::copy(inner.begin(), inner.end(), idx.begin() + first);
          return emitInnerPoint(idx, vals, needed, reds, flat, cur);
        },
        "lane", lanes);
    Values next = tot;
    for (const Reduction &r : reds) r.combine(b_, out, next);
    return next;
  };
  const int64_t span = kSumBlock * lanes; // flat positions per block, kSumBlock per lane
  bool blocked =
      std::any_of(reds.begin(), reds.end(), [](const Reduction &r) { return r.isFloatSum(); });
  if (constant && constantCount <= span) blocked = false;
  if (!blocked) return run(b_.getInt64(0), count, totals);
  Value *blocks = b_.CreateUDiv(b_.CreateAdd(count, b_.getInt64(span - 1)), b_.getInt64(span));
  return emitCountedLoop(
      b_, b_.getInt64(0), blocks, totals,
      [&](Value *blk, const Values &cur) {
        Value *lo = b_.CreateMul(blk, b_.getInt64(span));
        Value *hi = b_.CreateBinaryIntrinsic(llvm::Intrinsic::smin,
                                             b_.CreateAdd(lo, b_.getInt64(span)), count);
        return run(lo, hi, cur);
      },
      "lane.blk");
}

// With a lane split: a butterfly over the lanes (xor 16, 8, ..., 1 for a warp), after which
// every lane holds every reduction's total. Emitted where all lanes have left the pass's
// loops, so that they execute each exchange together.
KernelBody::Values KernelBody::combineAcrossLanes(const std::vector<Reduction> &reds,
                                                  Values totals) {
  assert(split_->lanes > 0 && (split_->lanes & (split_->lanes - 1)) == 0);
  for (int mask = split_->lanes / 2; mask > 0; mask /= 2) {
    Values other;
    for (Value *t : totals) other.push_back(split_->shuffleXor(b_, t, mask));
    for (const Reduction &r : reds) r.combineLanes(b_, other, totals);
  }
  return totals;
}

llvm::Function *emitKernelFunction(llvm::Module &m, const LoopKernel &kernel,
                                   const OuterLoopEmitter &outer) {
  llvm::LLVMContext &c = m.getContext();
  auto *ptrTy = llvm::PointerType::get(c, 0);
  auto *i64 = llvm::Type::getInt64Ty(c);
  auto *fty = llvm::FunctionType::get(llvm::Type::getVoidTy(c), {ptrTy, ptrTy, i64, i64}, false);
  auto *fn = llvm::Function::Create(fty, llvm::Function::ExternalLinkage, kernel.name, m);
  fn->setDoesNotThrow();
  for (unsigned a = 0; a < 2; ++a) {
    fn->addParamAttr(a, llvm::Attribute::NoAlias);
    fn->addParamAttr(a, llvm::Attribute::NoCapture);
    fn->addParamAttr(a, llvm::Attribute::ReadOnly);
  }
  fn->getArg(0)->setName("ptrs");
  fn->getArg(1)->setName("syms");
  fn->getArg(2)->setName("begin");
  fn->getArg(3)->setName("end");
  llvm::IRBuilder<> b(llvm::BasicBlock::Create(c, "entry", fn));
  LoopKernel k = simplifyKernel(kernel);
  KernelBody body(b, k, fn->getArg(0), fn->getArg(1));
  outer(b, body, fn);
  b.CreateRetVoid();
  return fn;
}

} // namespace rcjit::codegen
