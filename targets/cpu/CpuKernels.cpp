// LoopKernels → one LLVM module with the CPU outer loop → optimized machine code via CpuJit.
#include "targets/cpu/CpuKernels.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>

#include <llvm/Config/llvm-config.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>
#include <llvm/IR/Verifier.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/TargetParser/Host.h>
#include <llvm/Transforms/Utils/Cloning.h>

#include <rcjit/Error.h>

#include "support/Env.h"
#include "support/Events.h"
#include "targets/LlvmOptimize.h"
#include "targets/LoopCodegen.h"
#include "targets/cpu/CpuJit.h"
#include "targets/cpu/ObjectCacheAdapter.h"

namespace rcjit::cpu {

namespace {

using Values = std::vector<llvm::Value *>;

// A feature set: its canonical name, the LLVM CPU it compiles for ("" = the host) and the
// host features it needs.
struct FeatureSet {
  const char *name;
  const char *llvmCpu;
  std::vector<const char *> needs;
};

const FeatureSet &featureSet(const std::string &name) {
  static const FeatureSet sets[] = {
      {"native", "", {}},
      {"x86-64-v2", "x86-64-v2", {"sse4.2", "popcnt", "ssse3", "cx16"}},
      {"avx2", "x86-64-v3", {"avx2", "fma", "bmi2", "f16c", "movbe"}},
      {"avx512", "x86-64-v4", {"avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"}},
  };
  for (const FeatureSet &s : sets) {
    if (name == s.name || (*s.llvmCpu && name == s.llvmCpu)) {
      if (*s.llvmCpu && llvm::sys::getProcessTriple().rfind("x86_64", 0) != 0) {
        throw Error("CPU feature set '" + name + "' is for x86-64 hosts only");
      }
      llvm::StringMap<bool> host = llvm::sys::getHostCPUFeatures();
      for (const char *f : s.needs) {
        if (!host.lookup(f)) {
          throw Error("CPU feature set '" + name + "' needs " + f +
                      ", which this CPU lacks (its code would not run here)");
        }
      }
      return s;
    }
  }
  throw Error("unknown CPU feature set '" + name +
              "' (expected native, x86-64-v2, avx2 or avx512; e.g. RCJIT_CPU_FEATURES=avx2)");
}

std::mutex &featuresMutex() {
  static std::mutex mu;
  return mu;
}

// The selected set's name; initialized from RCJIT_CPU_FEATURES on first use.
std::string &selectedFeatures() {
  static std::string name = [] {
    const std::initializer_list<const char *> words = {"native", "x86-64-v2", "avx2",
                                                       "avx512", "x86-64-v3", "x86-64-v4"};
    const std::string n =
        words.begin()[envChoice("RCJIT_CPU_FEATURES", words, 0,
                                "x86-64-v3 and x86-64-v4 are avx2's and avx512's LLVM names")];
    try {
      return std::string(featureSet(n).name); // the host may lack the set's features
    } catch (const Error &e) {
      throw Error("RCJIT_CPU_FEATURES='" + n + "': " + e.what());
    }
  }();
  return name;
}

// The JIT of the selected feature set (one per set used, created on first use).
CpuJit &processJit() {
  static std::map<std::string, std::unique_ptr<CpuJit>> *jits =
      new std::map<std::string, std::unique_ptr<CpuJit>>(); // never destroyed: code lives on
  std::lock_guard<std::mutex> lock(featuresMutex());
  const std::string &name = selectedFeatures();
  std::unique_ptr<CpuJit> &jit = (*jits)[name];
  if (!jit) jit = withObjectCache(CpuJit::create(featureSet(name).llvmCpu)); // retried on throw
  return *jit;
}

// The head of a loop over the flat points [begin, end) of rows of `len` points, a row (or the
// part of one in the range) per trip: `block` (named `name`), entered when begin < end
// (else `exitBB`), starts each trip; `i` is the trip's first flat point (the caller adds its
// back edge), `row` its row, `col` its column and `stop` the column the trip ends at.
struct FlatRowHead {
  llvm::BasicBlock *block;
  llvm::PHINode *i;
  llvm::Value *row, *col, *stop;
};

FlatRowHead emitFlatRowHead(llvm::IRBuilder<> &b, llvm::Value *begin, llvm::Value *end,
                            llvm::Value *len, llvm::BasicBlock *exitBB, const char *name) {
  llvm::BasicBlock *pre = b.GetInsertBlock();
  auto *block = llvm::BasicBlock::Create(b.getContext(), name, pre->getParent());
  b.CreateCondBr(b.CreateICmpSLT(begin, end), block, exitBB);
  b.SetInsertPoint(block);
  llvm::PHINode *i = b.CreatePHI(b.getInt64Ty(), 2, "flat");
  i->addIncoming(begin, pre);
  llvm::Value *row = b.CreateUDiv(i, len);
  llvm::Value *col = b.CreateSub(i, b.CreateMul(row, len));
  llvm::Value *stop =
      b.CreateBinaryIntrinsic(llvm::Intrinsic::smin, b.CreateAdd(col, b.CreateSub(end, i)), len);
  return {block, i, row, col, stop};
}

// The back edge of a FlatRowHead loop whose trip covered its row's [col, stop): the next
// trip's first point, back to the head while below `end`, else on to `exitBB`, where the
// builder is left.
void emitFlatRowNext(llvm::IRBuilder<> &b, const FlatRowHead &h, llvm::Value *end,
                     llvm::BasicBlock *exitBB) {
  llvm::Value *next = b.CreateAdd(h.i, b.CreateSub(h.stop, h.col));
  llvm::BasicBlock *latch = b.GetInsertBlock();
  b.CreateCondBr(b.CreateICmpSLT(next, end), h.block, exitBB);
  h.i->addIncoming(next, latch);
  b.SetInsertPoint(exitBB);
}

// Elementwise kernels: [begin, end) is a flat range over the whole domain. Walk it row by
// row (one division per row), with the last dim as a counted, unit-step loop that LLVM
// vectorizes whenever that dim's strides are constant.
void emitRowLoop(llvm::IRBuilder<> &b, codegen::KernelBody &body, llvm::Value *begin,
                 llvm::Value *end) {
  const LoopKernel &k = body.kernel();
  int last = static_cast<int>(k.domain.size()) - 1;
  llvm::Value *len = body.size(k.domain[last]);
  llvm::Function *fn = b.GetInsertBlock()->getParent();
  auto *exitBB = llvm::BasicBlock::Create(b.getContext(), "row.exit", fn);
  const FlatRowHead h = emitFlatRowHead(b, begin, end, len, exitBB, "row");
  Values rowIdx = body.unflatten(h.row, 0, last);
  codegen::emitCountedLoop(
      b, h.col, h.stop, {},
      [&](llvm::Value *j, const Values &) {
        Values idx = rowIdx;
        idx.push_back(j);
        body.emitPoint(idx);
        return Values{};
      },
      "col");
  emitFlatRowNext(b, h, end, exitBB);
}

// A contraction's B operand is packed into a [k, n] stack buffer (so that a row of it is
// one vector load) when it has at most this many elements...
constexpr int64_t kPackMaxElements = 16384;
// ... and the range has at least this many rows to share it; fewer rows run as one dot
// product per output point (the default nest), which reads B as it is.
constexpr int64_t kPackMinRows = 4;
// A contraction's accumulators (one row of outputs) live on the stack up to this many...
constexpr int64_t kMaxAccumulators = 4096;
// ... and are computed in vector registers this many at a time...
constexpr int64_t kAccBlock = 64;
// ... for this many rows at once (independent multiply-add chains that share B's loads).
constexpr int64_t kRowBlock = 4;
// f32 lanes of an AVX2 vector: without AVX-512's mask registers, a row of n outputs that is
// not a multiple of it is cut at the last multiple (see SplitTails).
constexpr int64_t kAvx2Lanes = 8;

// Whether a contraction's rows are cut at the last multiple of kAvx2Lanes (AVX2 hosts) or
// left whole (AVX-512 hosts). LLVM vectorizes a row of n = 10 outputs as one full and one
// masked 8-lane vector: a <10 x float> multiply-add widened to two vectors, and an epilogue
// whose constant trip count is below the vectorizer's "tiny loop" bound, which it only
// vectorizes with the tail folded into masked loads and stores. AVX2's masked store is
// microcoded on AMD's Zen (tens of micro-ops), and the masked half-empty vector costs what a
// full one does; cut at 8, the tail (2 outputs) runs as a 2-lane vector, half the work on
// hosts that split 256-bit operations (toy64's [1, 128, 10] call 0.65 -> 0.57 ms on a Zen 1
// EPYC, docs/performance.md). With AVX-512's masks a whole row is one masked vector, which
// is cheaper than the cut: a kernel compiled for avx512 keeps its rows whole.
enum class SplitTails : bool { no, yes };

// How many of n outputs (a row, or the part of one after its blocks of kAccBlock) are cut
// off its end as the rest: n % kAvx2Lanes when rows are cut and n is wider than a vector.
int64_t cutRest(int64_t n, SplitTails split) {
  return split == SplitTails::yes && n > kAvx2Lanes ? n % kAvx2Lanes : 0;
}

llvm::Value *f32At(llvm::IRBuilder<> &b, llvm::Value *base, llvm::Value *i) {
  return b.CreateInBoundsGEP(b.getFloatTy(), base, i);
}

// The n sums of each row in `rows` (outer indices of rows of a contraction,
// codegen::KernelBody::Contraction) into acc[r * n + j]: kAccBlock outputs at a time, each
// block a k loop of vector multiply-adds carried in registers, one accumulator per row (A's
// element broadcast times a row of B: `packed` [k, n] when given, else B read in place),
// so that the rows' multiply-add chains overlap and share each load of B.
void emitContractionSums(llvm::IRBuilder<> &b, codegen::KernelBody &body,
                         const codegen::KernelBody::Contraction &c, const std::vector<Values> &rows,
                         llvm::Value *acc, llvm::Value *packed, SplitTails split) {
  llvm::Type *f32 = b.getFloatTy();
  auto at = [](const Values &rowIdx, llvm::Value *j, llvm::Value *kk) {
    Values idx = rowIdx;
    idx.push_back(j);
    idx.push_back(kk);
    return idx;
  };
  // one k loop over the outputs of `segments` (first output, width), a vector per row and
  // segment, the segments sharing A's elements: a tail cut by SplitTails is one loop with
  // two accumulators a row (two loops read A twice: toy64 0.388 -> 0.367 ms on Zen 1)
  struct Segment {
    llvm::Value *jb;
    int64_t width;
  };
  auto block = [&](const std::vector<Segment> &segments) {
    Values init;
    for (const Segment &g : segments) {
      auto *vt = llvm::FixedVectorType::get(f32, static_cast<unsigned>(g.width));
      init.insert(init.end(), rows.size(), llvm::Constant::getNullValue(vt));
    }
    Values sums = codegen::emitCountedLoop(
        b, b.getInt64(0), b.getInt64(c.k), init,
        [&](llvm::Value *kk, const Values &cur) {
          Values as; // A's element of each row, broadcast below to each segment's width
          for (size_t r = 0; r < rows.size(); ++r)
            as.push_back(body.emitValueAt(c.row, at(rows[r], segments[0].jb, kk)));
          Values next;
          for (size_t g = 0; g < segments.size(); ++g) {
            const auto [jb, width] = segments[g];
            auto *vt = llvm::FixedVectorType::get(f32, static_cast<unsigned>(width));
            llvm::Value *from =
                packed ? f32At(b, packed, b.CreateAdd(b.CreateMul(kk, b.getInt64(c.n)), jb))
                       : body.loadAddress(c.col, at(rows[0], jb, kk));
            llvm::Value *bv = b.CreateAlignedLoad(vt, from, llvm::Align(4));
            for (size_t r = 0; r < rows.size(); ++r) {
              if (r > 0 && !packed) { // B may vary by row (a batched product)
                bv = b.CreateAlignedLoad(vt, body.loadAddress(c.col, at(rows[r], jb, kk)),
                                         llvm::Align(4));
              }
              llvm::Value *a = b.CreateVectorSplat(static_cast<unsigned>(width), as[r]);
              next.push_back(b.CreateIntrinsic(llvm::Intrinsic::fmuladd, {vt},
                                               {a, bv, cur[g * rows.size() + r]}));
            }
          }
          return next;
        },
        "k");
    for (size_t g = 0; g < segments.size(); ++g) {
      for (size_t r = 0; r < rows.size(); ++r) {
        llvm::Value *dst =
            f32At(b, acc, b.CreateAdd(b.getInt64(static_cast<int64_t>(r) * c.n), segments[g].jb));
        b.CreateAlignedStore(sums[g * rows.size() + r], dst, llvm::Align(4));
      }
    }
  };
  const int64_t full = c.n / kAccBlock, tail = c.n % kAccBlock;
  if (full == 1) block({{b.getInt64(0), kAccBlock}});
  if (full > 1) {
    codegen::emitCountedLoop(
        b, b.getInt64(0), b.getInt64(full), {},
        [&](llvm::Value *blk, const Values &) {
          block({{b.CreateMul(blk, b.getInt64(kAccBlock)), kAccBlock}});
          return Values{};
        },
        "jb", 1, codegen::kNoUnroll);
  }
  const int64_t cut = cutRest(tail, split);
  if (cut > 0) {
    block({{b.getInt64(full * kAccBlock), tail - cut},
           {b.getInt64(full * kAccBlock + tail - cut), cut}});
  } else if (tail > 0) {
    block({{b.getInt64(full * kAccBlock), tail}});
  }
}

// The epilogue of outputs [col, stop) of the row at outer indices rowIdx, whose sums are
// accRow[0, n).
void emitContractionEpilogue(llvm::IRBuilder<> &b, codegen::KernelBody &body,
                             const codegen::KernelBody::Contraction &c, const Values &rowIdx,
                             llvm::Value *col, llvm::Value *stop, llvm::Value *accRow) {
  codegen::emitCountedLoop(
      b, col, stop, {},
      [&](llvm::Value *j, const Values &) {
        Values idx = rowIdx;
        idx.push_back(j);
        body.emitPointGiven(idx, c.reduce, b.CreateLoad(b.getFloatTy(), f32At(b, accRow, j)));
        return Values{};
      },
      "epilogue");
}

// A contraction over outer points [begin, end): row by row (rows of n outputs), each row
// through emitContractionRow. True when emitted; false when the kernel is not one this
// loop serves (then the caller emits the default nest).
bool emitContractionLoop(llvm::IRBuilder<> &b, codegen::KernelBody &body, llvm::Function *fn,
                         llvm::Value *begin, llvm::Value *end, SplitTails split) {
  const LoopKernel &k = body.kernel();
  std::optional<codegen::KernelBody::Contraction> c = body.contraction();
  if (!c || c->n > kMaxAccumulators) return false;
  const bool pack = !c->colUnitLoad;
  if (pack && (!c->colRowFree || c->n * c->k > kPackMaxElements)) return false;
  const int jd = k.numOuter - 1;
  llvm::Type *f32 = b.getFloatTy();
  llvm::IRBuilder<> entry(&fn->getEntryBlock(), fn->getEntryBlock().begin());
  auto *acc =
      entry.CreateAlloca(llvm::ArrayType::get(f32, static_cast<uint64_t>(c->n * kRowBlock)));
  acc->setAlignment(llvm::Align(64));
  llvm::AllocaInst *packed = nullptr;
  if (pack) {
    packed = entry.CreateAlloca(llvm::ArrayType::get(f32, static_cast<uint64_t>(c->n * c->k)));
    packed->setAlignment(llvm::Align(64));
  }
  llvm::Value *len = b.getInt64(c->n);
  llvm::BasicBlock *exitBB = llvm::BasicBlock::Create(b.getContext(), "mm.exit", fn);
  if (pack) {
    // few rows: one dot product per output (B read in place) beats packing it; LLVM
    // vectorizes this loop across outputs (B's column gathered). At 8 lanes it is one
    // vector body: at AVX-512's 16 it added an 8-lane vector epilogue that made toy64's
    // O3 and machine code 110-158 ms instead of 73-95 (same call time, [1, 1, 10]).
    auto *nest = llvm::BasicBlock::Create(b.getContext(), "mm.nest", fn);
    auto *packBB = llvm::BasicBlock::Create(b.getContext(), "mm.pack", fn);
    b.CreateCondBr(b.CreateICmpSLT(b.CreateSub(end, begin), b.getInt64(c->n * kPackMinRows)), nest,
                   packBB);
    b.SetInsertPoint(nest);
    codegen::emitCountedLoop(
        b, begin, end, {},
        [&](llvm::Value *i, const Values &) {
          body.emitPoint(body.unflatten(i, 0, k.numOuter));
          return Values{};
        },
        "outer", 1, codegen::kWidth8);
    b.CreateBr(exitBB);
    b.SetInsertPoint(packBB);
    Values zeros(static_cast<size_t>(jd), b.getInt64(0));
    codegen::emitCountedLoop(
        b, b.getInt64(0), len, {},
        [&](llvm::Value *j, const Values &) {
          codegen::emitCountedLoop(
              b, b.getInt64(0), b.getInt64(c->k), {},
              [&](llvm::Value *kk, const Values &) {
                Values idx = zeros;
                idx.push_back(j);
                idx.push_back(kk);
                b.CreateStore(body.emitValueAt(c->col, idx),
                              f32At(b, packed, b.CreateAdd(b.CreateMul(kk, len), j)));
                return Values{};
              },
              "pack.k", 1, codegen::kNoUnroll);
          return Values{};
        },
        "pack.j", 1, codegen::kNoUnroll);
  }
  const FlatRowHead h = emitFlatRowHead(b, begin, end, len, exitBB, "mm.row");
  llvm::BasicBlock *rowBB = h.block;
  llvm::PHINode *i = h.i;
  llvm::Value *row = h.row, *col = h.col, *stop = h.stop;
  // kRowBlock whole rows at once where they fit in the range, else one (part of a) row
  auto *blockBB = llvm::BasicBlock::Create(b.getContext(), "mm.rows", fn);
  auto *oneBB = llvm::BasicBlock::Create(b.getContext(), "mm.one", fn);
  auto *latchBB = llvm::BasicBlock::Create(b.getContext(), "mm.next", fn);
  b.CreateCondBr(b.CreateAnd(b.CreateICmpEQ(col, b.getInt64(0)),
                             b.CreateICmpSGE(b.CreateSub(end, i), b.getInt64(kRowBlock * c->n))),
                 blockBB, oneBB);
  b.SetInsertPoint(blockBB);
  std::vector<Values> rows;
  for (int64_t r = 0; r < kRowBlock; ++r)
    rows.push_back(body.unflatten(b.CreateAdd(row, b.getInt64(r)), 0, jd));
  emitContractionSums(b, body, *c, rows, acc, packed, split);
  // The epilogue, cut like the sums (SplitTails) so that nothing is masked: each row's
  // outputs [0, cut) in a loop over the rows, then the rest [cut, n) of all kRowBlock rows
  // as straight-line code, which LLVM vectorizes row by row and schedules as independent
  // chains side by side (a row's own short rest after its main part was one more chain
  // in a row: toy64 0.420 -> 0.389 ms on Zen 1, docs/performance.md).
  const int64_t cut = c->n - cutRest(c->n, split);
  codegen::emitCountedLoop(
      b, b.getInt64(0), b.getInt64(kRowBlock), {},
      [&](llvm::Value *r, const Values &) {
        emitContractionEpilogue(b, body, *c, body.unflatten(b.CreateAdd(row, r), 0, jd),
                                b.getInt64(0), b.getInt64(cut), f32At(b, acc, b.CreateMul(r, len)));
        return Values{};
      },
      "rows", 1, codegen::kNoUnroll);
  for (int64_t r = 0; r < kRowBlock && cut < c->n; ++r) {
    for (int64_t j = cut; j < c->n; ++j) {
      Values idx = rows[static_cast<size_t>(r)];
      idx.push_back(b.getInt64(j));
      llvm::Value *sum = b.CreateLoad(f32, f32At(b, acc, b.getInt64(r * c->n + j)));
      body.emitPointGiven(idx, c->reduce, sum);
    }
  }
  llvm::Value *nextBlock = b.CreateAdd(i, b.getInt64(kRowBlock * c->n));
  llvm::BasicBlock *blockEnd = b.GetInsertBlock();
  b.CreateBr(latchBB);
  b.SetInsertPoint(oneBB);
  emitContractionSums(b, body, *c, {body.unflatten(row, 0, jd)}, acc, packed, split);
  emitContractionEpilogue(b, body, *c, body.unflatten(row, 0, jd), col, stop, acc);
  llvm::Value *nextOne = b.CreateAdd(i, b.CreateSub(stop, col));
  llvm::BasicBlock *oneEnd = b.GetInsertBlock();
  b.CreateBr(latchBB);
  b.SetInsertPoint(latchBB);
  llvm::PHINode *next = b.CreatePHI(b.getInt64Ty(), 2);
  next->addIncoming(nextBlock, blockEnd);
  next->addIncoming(nextOne, oneEnd);
  llvm::BasicBlock *latch = b.GetInsertBlock();
  b.CreateCondBr(b.CreateICmpSLT(next, end), rowBB, exitBB);
  i->addIncoming(next, latch);
  b.SetInsertPoint(exitBB);
  return true;
}

// A column sum's outputs per tile: its accumulators on the stack.
constexpr int64_t kColumnTile = 512;

// A column sum (codegen::KernelBody::ColumnSum) over outer points [begin, end): row by row
// (rows of the last outer dim j), each row's part in tiles of kColumnTile outputs: the
// tile's sums as a loop over the inner dim around a loop along j, which LLVM vectorizes
// (every load under the summed value steps 0 or 1 along j), accumulated on the stack; then
// each output's epilogue. The default nest sums one output at a time down its column
// (gpt2's bias gradient, sum(x, 0) of [512, 3072] f32: gathers, 2.4 ms on a Zen 4 against
// 0.07 for the row sum). True when emitted.
bool emitColumnSumLoop(llvm::IRBuilder<> &b, codegen::KernelBody &body, llvm::Function *fn,
                       llvm::Value *begin, llvm::Value *end) {
  const LoopKernel &k = body.kernel();
  std::optional<codegen::KernelBody::ColumnSum> c = body.columnSum();
  if (!c) return false;
  const int jd = k.numOuter - 1;
  llvm::Type *f32 = b.getFloatTy();
  llvm::IRBuilder<> entry(&fn->getEntryBlock(), fn->getEntryBlock().begin());
  auto *acc = entry.CreateAlloca(llvm::ArrayType::get(f32, static_cast<uint64_t>(kColumnTile)));
  acc->setAlignment(llvm::Align(64));
  llvm::Value *len = body.size(k.domain[static_cast<size_t>(jd)]);
  llvm::Value *depth = body.size(k.domain[static_cast<size_t>(k.numOuter)]);
  llvm::BasicBlock *exitBB = llvm::BasicBlock::Create(b.getContext(), "cs.exit", fn);
  const FlatRowHead h = emitFlatRowHead(b, begin, end, len, exitBB, "cs.row");
  const Values rowIdx = body.unflatten(h.row, 0, jd);
  codegen::emitCountedLoop(
      b, h.col, h.stop, {},
      [&](llvm::Value *t0, const Values &) {
        llvm::Value *t1 = b.CreateBinaryIntrinsic(llvm::Intrinsic::smin,
                                                  b.CreateAdd(t0, b.getInt64(kColumnTile)), h.stop);
        llvm::Value *count = b.CreateSub(t1, t0);
        codegen::emitCountedLoop(
            b, b.getInt64(0), count, {},
            [&](llvm::Value *t, const Values &) {
              b.CreateStore(llvm::ConstantFP::get(f32, 0.0), f32At(b, acc, t));
              return Values{};
            },
            "cs.zero");
        codegen::emitCountedLoop(
            b, b.getInt64(0), depth, {},
            [&](llvm::Value *r, const Values &) {
              codegen::emitCountedLoop(
                  b, b.getInt64(0), count, {},
                  [&](llvm::Value *t, const Values &) {
                    Values idx = rowIdx;
                    idx.push_back(b.CreateAdd(t0, t));
                    idx.push_back(r);
                    llvm::Value *at = f32At(b, acc, t);
                    b.CreateStore(
                        b.CreateFAdd(b.CreateLoad(f32, at), body.emitValueAt(c->value, idx)), at);
                    return Values{};
                  },
                  "cs.j");
              return Values{};
            },
            "cs.r", 1, codegen::kNoUnroll);
        codegen::emitCountedLoop(
            b, b.getInt64(0), count, {},
            [&](llvm::Value *t, const Values &) {
              Values idx = rowIdx;
              idx.push_back(b.CreateAdd(t0, t));
              body.emitPointGiven(idx, c->reduce, b.CreateLoad(f32, f32At(b, acc, t)));
              return Values{};
            },
            "cs.epilogue");
        return Values{};
      },
      "cs.tile", kColumnTile, codegen::kNoUnroll);
  emitFlatRowNext(b, h, end, exitBB);
  return true;
}

// The CPU outer loop over [begin, end): rows for elementwise kernels, k-outer loops for
// contractions (small matmuls), inner-dim-outer loops for column sums, else one reduction
// nest per outer point. The caller splits [0, outerSize) across threads.
void emitCpuOuterLoop(llvm::IRBuilder<> &b, codegen::KernelBody &body, llvm::Function *fn,
                      SplitTails split) {
  const LoopKernel &k = body.kernel();
  llvm::Value *begin = fn->getArg(2);
  llvm::Value *end = fn->getArg(3);
  if (k.numOuter == static_cast<int>(k.domain.size()) && k.numOuter > 0) {
    emitRowLoop(b, body, begin, end);
    return;
  }
  if (emitContractionLoop(b, body, fn, begin, end, split)) return;
  if (emitColumnSumLoop(b, body, fn, begin, end)) return;
  codegen::emitCountedLoop(
      b, begin, end, {},
      [&](llvm::Value *i, const Values &) {
        body.emitPoint(body.unflatten(i, 0, k.numOuter));
        return Values{};
      },
      "outer");
}

void checkNames(const std::vector<LoopKernel> &kernels) {
  std::set<std::string> names;
  for (const LoopKernel &k : kernels) {
    verifyKernel(k);
    if (!names.insert(k.name).second) {
      throw Error("compileKernels: two kernels are named '" + k.name + "'");
    }
  }
}

std::string printModule(const llvm::Module &m) {
  std::string text;
  llvm::raw_string_ostream os(text);
  m.print(os, nullptr);
  return text;
}

} // namespace

std::string cpuFeatures() {
  std::lock_guard<std::mutex> lock(featuresMutex());
  return selectedFeatures();
}

void setCpuFeatures(const std::string &name) {
  const FeatureSet &s = featureSet(name); // throws before anything changes
  std::lock_guard<std::mutex> lock(featuresMutex());
  selectedFeatures() = s.name;
}

std::string hostCodegenId() {
  static const std::string hostPart = [] {
    std::string s = "llvm " LLVM_VERSION_STRING "; " + llvm::sys::getProcessTriple() + "; ";
    std::string native = llvm::sys::getHostCPUName().str() + ";";
    std::map<std::string, bool> features; // sorted: the key must not depend on hash order
    for (const auto &f : llvm::sys::getHostCPUFeatures()) {
      features[f.getKey().str()] = f.getValue();
    }
    for (const auto &[name, on] : features) native += (on ? " +" : " -") + name;
    return s + "\n" + native;
  }();
  const std::string features = cpuFeatures();
  const size_t cut = hostPart.find('\n');
  std::string id =
      hostPart.substr(0, cut) + (features == "native"
                                     ? hostPart.substr(cut + 1)
                                     : "cpu " + std::string(featureSet(features).llvmCpu) + ";");
  return id + (processJit().hasVectorMath() ? "; libmvec" : "; no libmvec");
}

namespace {

// The target compile's own steps for the trace (phase llvm or load), timed from t0.
void announceCpuStep(const std::string &moduleId, const char *step, const char *phase,
                     double seconds, const std::string &result) {
  if (!logging::wanted(logging::Kind::passes)) return;
  logging::emit(logging::CompileStepEvent{
      .graph = moduleId, .step = step, .seconds = seconds, .result = result, .phase = phase});
}

double cpuSecondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

CpuCompiledKernels compileOnce(const std::vector<LoopKernel> &kernels, const std::string &moduleId,
                               const CpuCompileOptions &options) {
  auto t0 = std::chrono::steady_clock::now();
  CpuJit &jit = processJit();
  auto ctx = std::make_unique<llvm::LLVMContext>();
  auto m = std::make_unique<llvm::Module>(moduleId, *ctx);
  if (!options.name.empty()) m->setSourceFileName(options.name); // for the cache log
  jit.prepareModule(*m);
  if (options.quick) m->addModuleFlag(llvm::Module::Warning, CpuJit::kQuickFlag, 1);
  const SplitTails split = jit.hasAvx512() ? SplitTails::no : SplitTails::yes;
  for (size_t i = 0; i < kernels.size(); ++i) {
    const LoopKernel &k = kernels[i];
    llvm::Function *fn = codegen::emitKernelFunction(
        *m, k, [split](llvm::IRBuilder<> &b, codegen::KernelBody &body, llvm::Function *f) {
          emitCpuOuterLoop(b, body, f, split);
        });
    if (options.vectorizes(i)) fn->addFnAttr(kQuickVectorizeAttr);
    if (jit.hasAvx512()) fn->addFnAttr("prefer-vector-width", "512");
    // Vector divisions marked `arcp` (only those of the tanh/erf approximations) become a
    // reciprocal estimate plus two Newton steps: no divider on the hot path, and full f32
    // precision even from AVX2's 12-bit estimate (one step left erf 4e-7 off: gelu near
    // x = -5.5, where 1 + erf cancels, was off by 1e-6).
    fn->addFnAttr("reciprocal-estimates", "vec-divf:2");
  }
  std::string problems;
  llvm::raw_string_ostream err(problems);
  if (llvm::verifyModule(*m, &err)) {
    throw Error("compileKernels: internal error, invalid LLVM IR for '" + moduleId +
                "': " + problems);
  }
  announceCpuStep(moduleId, "emit LLVM IR", "llvm", cpuSecondsSince(t0),
                  std::to_string(kernels.size()) + " kernels\n");
  CpuCompiledKernels out;
  if (options.wantLlvmIr || options.wantAssembly) {
    auto tDump = std::chrono::steady_clock::now();
    std::unique_ptr<llvm::Module> copy = llvm::CloneModule(*m);
    jit.optimize(*copy, options.quick);
    if (options.wantLlvmIr) out.llvmIr = printModule(*copy);
    if (options.wantAssembly) out.assembly = jit.assembly(*copy);
    announceCpuStep(moduleId, "optimize a copy for the logs' LLVM IR", "logging",
                    cpuSecondsSince(tDump), "");
  }
  auto tLookup = std::chrono::steady_clock::now();
  const double codegenBefore = CpuJit::codegenSecondsOnThisThread();
  const int64_t hitsBefore = CpuJit::cacheHitsOnThisThread();
  CpuJit::ModuleHandle h = jit.addModule(std::move(m), std::move(ctx));
  out.code = std::shared_ptr<const void>(static_cast<const void *>(h), [&jit, h](const void *) {
    jit.removeModule(h); // the process's jits are never destroyed
  });
  for (const LoopKernel &k : kernels) {
    out.functions.push_back(reinterpret_cast<KernelFn>(jit.lookup(h, k.name)));
  }
  const double codegen = CpuJit::codegenSecondsOnThisThread() - codegenBefore;
  out.fromCache = CpuJit::cacheHitsOnThisThread() > hitsBefore;
  announceCpuStep(moduleId, "O3 and machine code (or the object cache)", "llvm", codegen, "");
  announceCpuStep(moduleId, "link and load", "load",
                  std::max(0.0, cpuSecondsSince(tLookup) - codegen), "");
  return out;
}

} // namespace

CpuCompiledKernels compileKernels(const std::vector<LoopKernel> &kernels,
                                  const std::string &moduleId, const CpuCompileOptions &options) {
  checkNames(kernels);
  try {
    return compileOnce(kernels, moduleId, options);
  } catch (const Error &e) {
    // A cached object that passed validation but does not link (e.g. a symbol renamed) is
    // evicted and the module compiled once more, from IR.
    if (!forgetCachedObject(moduleId, e.what())) throw;
  }
  return compileOnce(kernels, moduleId, options);
}

} // namespace rcjit::cpu
