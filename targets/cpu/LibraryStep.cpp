// Which oneDNN library step runs a program's matmul or linear (the steps themselves:
// GemmSteps.h): the cost model of splits and packed weights per host, and its measurements.
#include "targets/cpu/LibraryStep.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <map>
#include <memory>

#include "tracer/TensorImpl.h"

#include <mutex>
#include <omp.h>
#include <oneapi/dnnl/dnnl.h>
#include <oneapi/dnnl/dnnl.hpp>
#include <string>
#include <unordered_map>

#include "support/Env.h"
#include "support/Threads.h"
#include "support/WorkPool.h"
#include "targets/MatmulLayout.h"
#include "targets/cpu/GemmSteps.h"
#include "targets/cpu/WeightPack.h"
#include "targets/eager/DnnlContext.h"

namespace rcjit::cpu {

namespace {

using dnnl::memory;
using namespace gemm;

// GEMMs up to this many multiply-adds use the shared runtime-dims primitive in programs
// specialized per size: creating a primitive (~50-500 us, JIT code generation) costs more
// than such a multiply, while larger ones gain from a kernel made for their sizes.
constexpr int64_t kRuntimeDimsMaxMacs = int64_t{1} << 24;

// One matmul primitive with runtime dims per (bias, post-ops, operand layouts): created on
// first use, then shared by every size of every program (oneDNN primitives are
// thread-safe). An operand is dense row-major (abc) or dense transposed (acb): oneDNN 2.6
// has a JIT GEMM for runtime dims with fixed layouts but only its reference kernel for
// runtime strides. Null when no JIT kernel takes it (remembered).
std::shared_ptr<dnnl::primitive> runtimeMatmul(bool hasBias, const std::vector<PostOp> &postOps,
                                               bool aTransposed, bool bTransposed) {
  static std::mutex mu;
  static auto *cache = new std::map<std::string, std::shared_ptr<dnnl::primitive>>();
  std::string key =
      std::string(hasBias ? "b" : "-") + (aTransposed ? "T" : "N") + (bTransposed ? "T" : "N");
  for (const PostOp &p : postOps) key += "," + std::string(opName(p.op));
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache->find(key);
  if (it != cache->end()) return it->second;
  std::shared_ptr<dnnl::primitive> prim;
  try {
    using tag = memory::format_tag;
    constexpr memory::dim R = DNNL_RUNTIME_DIM_VAL;
    auto md = [](bool t) {
      return memory::desc({R, R, R}, memory::data_type::f32, t ? tag::acb : tag::abc);
    };
    memory::desc bias({1, 1, R}, memory::data_type::f32, tag::abc);
    auto d = hasBias ? dnnl::matmul::desc(md(aTransposed), md(bTransposed), bias, md(false))
                     : dnnl::matmul::desc(md(aTransposed), md(bTransposed), md(false));
    dnnl::matmul::primitive_desc pd(d, attrFor(postOps, dnnl::scratchpad_mode::library),
                                    eager::DnnlContext::instance().engine());
    if (std::string(pd.impl_info_str()).find("ref") == std::string::npos) {
      prim = std::make_shared<dnnl::primitive>(dnnl::matmul(pd));
    }
  } catch (const dnnl::error &) {
    prim = nullptr;
  }
  (*cache)[key] = prim;
  return prim;
}

GemmSplit gemmSplitSetting() {
  // the words in GemmSplit's order
  static const GemmSplit setting = static_cast<GemmSplit>(
      envChoice("RCJIT_GEMM_SPLIT", {"auto", "off", "batch", "rows", "cols"}, 0));
  return setting;
}

// The block size along a dimension of `size` for `threads` pool threads: about
// `perThread` blocks per thread, a multiple of `align`, at least `least`; 0 when that
// leaves fewer than two blocks.
int64_t blockSizeFor(int64_t size, int threads, int64_t perThread, int64_t align, int64_t least) {
  int64_t block = (size + perThread * threads - 1) / (perThread * threads);
  block = std::max(least, (block + align - 1) / align * align);
  return block < size ? block : 0;
}

// Row blocks (RCJIT_GEMM_SPLIT=rows) have at least this many rows, and weights are packed
// for products with at least this many (bench/gemm_bench: row blocks of 16 run ~10 %
// slower than of 32; packing was measured at 128 and 512 rows only).
constexpr int64_t kMinRowBlock = 32;

// Products over a parameter with an inner dim and a column count this large or larger
// keep oneDNN's own threads (see createSplitOrPacked).
constexpr int64_t kLongInnerDim = 2048;

// Blocks per pool thread by dimension: batches and weight columns are cut finely (many
// more blocks than threads, so a thread held back by the scheduler delays little);
// rows over a packed weight into one block per thread, since every row block streams the
// whole weight from memory (measured in the model: 4 per thread ran 12 % slower than 1).
constexpr int64_t kBatchBlocksPerThread = 4, kColBlocksPerThread = 4, kRowBlocksPerThread = 1;

// A test's override of a host choice (LibraryStep::set...): -1 none, else 0 or 1.
enum class HostChoice { nkWeights, wholePacked, plainSplits, count };
std::atomic<int> &overrideOf(HostChoice c) {
  static std::atomic<int> forced[static_cast<int>(HostChoice::count)] = {-1, -1, -1};
  return forced[static_cast<int>(c)];
}
void setOverride(HostChoice c, int on) {
  overrideOf(c).store(on < 0 ? -1 : on ? 1 : 0, std::memory_order_relaxed);
}

// The override of `c` if a test set one, else the host's choice.
bool overriddenOr(HostChoice c, bool host) {
  const int f = overrideOf(c).load(std::memory_order_relaxed);
  return f >= 0 ? f != 0 : host;
}

// Whether oneDNN's effective ISA here includes `isa`'s.
bool isaIncludes(dnnl_cpu_isa_t isa) {
  return (static_cast<unsigned>(dnnl_get_effective_cpu_isa()) & isa) == isa;
}

// Whether oneDNN runs its brgemm kernels here (its ISA avx512_core or above).
bool brgemmIsa() {
  static const bool brgemm = isaIncludes(dnnl_cpu_isa_avx512_core);
  return brgemm;
}

// Whether oneDNN runs AMX tiles here.
bool amxIsa() {
  static const bool amx = isaIncludes(dnnl_cpu_isa_avx512_core_amx);
  return amx;
}

// Whether products run over weights in [N, K] order: where oneDNN runs below AVX-512 (an
// AVX2 host; LibraryStep::setNkWeights overrides). There its f32 GEMM ran a weight
// in [N, K] order (K contiguous: linear's own) far faster than in [K, N] order, whether
// plain, packed in its preferred ("any") format or split into column blocks of a
// row-major copy: 2026-12-01, AMD EPYC AVX2, 2 threads, 128 x 768 x 3072: 4.3 ms against
// 7.3-8.0 ms (docs/performance.md, "Weights on AVX2 hosts").
bool nkWeights() { return overriddenOr(HostChoice::nkWeights, !brgemmIsa()); }

// Whether a product over a packable weight with rows enough runs as one call on oneDNN's
// own threads over the weight packed into the layout oneDNN picks for it: where oneDNN runs
// its brgemm kernels (AVX-512 and up; LibraryStep::setWholePackedGemms overrides). On an
// Intel AMX host (2026-12-02, 2 threads, bench/gemm_libs against rcjit's column blocks of
// a row-major copy, ms): bf16 512 x 768 x 50257 20.5 against 49.9, 512 x 768 x 3072 0.8
// against 1.5; f32 101 against 107 and 5.7 against 6.5 (column blocks write a strided
// slice of the output, which oneDNN 2.6 runs with its older gemm:jit kernel, and AMX
// tiles want the blocked weight). Below AVX-512 the column blocks stay (nkWeights).
bool wholePackedGemms() { return overriddenOr(HostChoice::wholePacked, brgemmIsa()); }

// Whether an f32 product over a row-major [K, N] weight that cannot be packed once (it is
// new every call) is reordered on each call (RepackingStep): on the brgemm hosts of
// wholePackedGemms(), when its rows are many enough to pay for the reorder. oneDNN 2.6's f32
// brgemm ran a row-major weight at about half speed there (Intel AMX host, 2 threads, ms,
// plain / reordered on each call: 512 x 768 x 3072 12.5 / 7.0, 768 x 512 x 3072 15.6 / 6.2,
// gpt2's LM head weight gradient 50257 x 512 x 768 120 / 104; but 512 x 50257 x 768 134 /
// 137, where the reorder of the long weight costs more than it saves: hence 4M >= K). bf16
// (AMX) gained nothing from it.
bool repacksRowMajorWeight(const GemmLayout &l) {
  return wholePackedGemms() && l.dt == memory::data_type::f32 && l.batch == 1 &&
         l.m >= kMinRowBlock && 4 * l.m >= l.k && l.rowMajorB();
}

// The step of repacksRowMajorWeight for a weight that is not packed once: `d` (one batch)
// over its weight reordered each call.
std::unique_ptr<LibraryStep> repackingStep(const GemmDescs &d, const std::vector<PostOp> &postOps,
                                           bool hasBias) {
  auto inner = std::make_unique<MatmulStep>(d.src, d.wei, d.bias, d.dst, postOps, hasBias, true);
  auto pack = std::make_unique<WeightPack>(d.wei, inner->weightsDesc());
  return std::make_unique<RepackingStep>(std::move(inner), std::move(pack));
}

// wholePackedGemms()'s step for `l` (one batch) over a packable weight: one call over the
// packed copy; until it is packed (a weight that changes every call, as in training), the
// same primitive over the weight reordered for the call where that pays
// (repacksRowMajorWeight: PackingStep without a plain step), else one plain call.
std::unique_ptr<LibraryStep> wholePackedStep(const GemmLayout &l,
                                             const std::vector<PostOp> &postOps,
                                             const memory::desc &plainWeight) {
  GemmDescs d = gemmDescs(l, 1, l.m, l.n);
  auto whole = std::make_unique<MatmulStep>(d.src, d.wei, d.bias, d.dst, postOps, l.bias, true);
  const memory::desc packedDesc = whole->weightsDesc();
  std::unique_ptr<LibraryStep> plain =
      repacksRowMajorWeight(l)
          ? nullptr
          : std::make_unique<MatmulStep>(d.src, d.wei, d.bias, d.dst, postOps, l.bias);
  return std::make_unique<PackingStep>(
      std::move(whole), std::make_unique<WeightPack>(plainWeight, packedDesc), std::move(plain));
}

// Whether the host runs a long inner dim in blocks (innerSplitPays) and a weight gradient's
// product in blocks of rows over its plain operands (rowsOverPlainPay): where oneDNN runs
// its brgemm kernels without AMX (LibraryStep::setPlainOperandSplits overrides). Measured on
// a 2-core AMD EPYC Zen 4 (AVX-512 with avx512_bf16, 2026-12-04, f32, ms, the choice before
// / the blocks, each on one thread): dx of gpt2's LM head, 512 x 50257 x 768, one call on
// oneDNN's two threads 213-225 / 176-178 in 2 inner blocks (4 blocks 176, 8 blocks 179);
// Llama-3.2-1b's, 128 x 128256 x 2048, 407-411 / 354-357; 512 x 8192 x 768 32.0 / 28.9;
// 512 x 3072 x 768 and 128 x 8192 x 2048 even (hence kInnerSplitRatio). Weight gradients
// (A transposed, B a row-major activation), reordered per call / 2 row blocks over the
// plain B: 50257 x 512 x 768 190 / 182, 768 x 512 x 3072 12.8 / 11.4, 3072 x 512 x 768
// 11.7 / 11.2, 768 x 512 x 2304 9.5 / 8.2, 768 x 512 x 768 3.2 / 2.6, 2048 x 128 x 8192
// 23.6 / 19.8. bf16 (avx512_core_bf16): gpt2's dx 105 / 95, Llama's 213-215 / 181-187;
// gpt2's LM head weight gradient 115-125 / 99-100, the layers' within +-5 %. With
// oneDNN's AVX2 kernels on the same host (ONEDNN_MAX_CPU_ISA=AVX2)
// neither gained beyond +-5 %; the AMX host was not measured (its f32 weight gradients ran
// 2x faster over a reordered B than over the plain one in one call: repacksRowMajorWeight).
bool plainOperandSplits() {
  return overriddenOr(HostChoice::plainSplits, brgemmIsa() && !amxIsa());
}

// Inner dims at least this long, and this many times the longer of M and N, are cut into
// blocks (plainOperandSplits' measurements).
constexpr int64_t kMinInnerSplit = 4096, kInnerSplitRatio = 8;

bool innerSplitPays(const GemmLayout &l, const std::vector<PostOp> &postOps) {
  return plainOperandSplits() && l.batch == 1 && !l.bias && postOps.empty() &&
         l.k >= kMinInnerSplit && l.k >= kInnerSplitRatio * std::max(l.m, l.n);
}

// A weight gradient's product (A transposed, B a row-major activation) as one block of
// rows per thread over the plain operands (plainOperandSplits' measurements): f32 at any
// size, bf16 when its rows are many times its inner dim and columns (a bf16 layer's were
// even with one call).
bool rowsOverPlainPay(const GemmLayout &l) {
  return plainOperandSplits() && l.batch == 1 && l.a.row == 1 && l.rowMajorB() &&
         (l.dt == memory::data_type::f32 || l.m >= kInnerSplitRatio * std::max(l.k, l.n));
}

// Below AVX-512 (nkWeights) a product with rows enough for oneDNN's own threads runs over
// its weight in [N, K] order: a [K, N] parameter (an exported MatMul's) packed into that
// order once per version, over the plain weight until then (a linear's is in that order).
std::unique_ptr<LibraryStep> nkPackingStep(const GemmLayout &l,
                                           const std::vector<PostOp> &postOps) {
  GemmLayout nk = l;
  nk.b = GemmStrides{l.k * l.n, 1, l.k};
  const GemmDescs d = gemmDescs(nk, 1, l.m, l.n), plain = gemmDescs(l, 1, l.m, l.n);
  return std::make_unique<PackingStep>(
      std::make_unique<MatmulStep>(d.src, d.wei, d.bias, d.dst, postOps, l.bias),
      std::make_unique<WeightPack>(plain.wei, d.wei),
      std::make_unique<MatmulStep>(plain.src, plain.wei, plain.bias, plain.dst, postOps, l.bias));
}

// `l` as a step by the cost model (or RCJIT_GEMM_SPLIT): cut into blocks run through the
// work pool, and/or over a packed weight (`packable`: the weight is a program input and
// packing is on). Null: one plain oneDNN call (too small to split, or the pool or the
// calling thread has one thread and there is nothing to pack).
//
// Measured on gpt2 and llama-3.2-1b (docs/performance.md, "On a busy machine"; bench/gemm_bench per
// shape): over a parameter's weight, blocks of columns of a row-major copy ran 5-10 %
// faster than oneDNN's own two threads at gpt2's shapes and 5-10 % slower at Llama's
// (K, N >= 2048), one block of rows per thread over a packed weight about as fast as
// oneDNN's threads; blocks of weight columns over the plain (transposed) weight ran
// 10-25 % slower (oneDNN copies each block's weight slice), so without a packed copy
// they are kept for products with few rows; blocks of rows over the plain weight far
// slower (each block copies the whole weight). Under a build on both cores every split
// beat oneDNN's own threads by 1.4-3x.
std::unique_ptr<LibraryStep> createSplitOrPacked(const GemmLayout &l,
                                                 const std::vector<PostOp> &postOps, double macs,
                                                 bool packable) {
  const GemmSplit setting = gemmSplitSetting();
  const int threads = WorkPool::instance().threads();
  if (macs < kParallelMacs) return nullptr;
  // a primitive asked for on one thread (the serial and autotune paths) stays whole
  const bool split = setting != GemmSplit::off && threads >= 2 && omp_get_max_threads() >= 2;
  if (split && setting == GemmSplit::automatic && innerSplitPays(l, postOps))
    return innerSplitGemm(l, macs, threads);
  if (nkWeights() && setting == GemmSplit::automatic && l.batch == 1 && l.m >= kMinRowBlock) {
    if (l.b.row == 1 && l.b.col == l.k) return nullptr; // [N, K] already: one oneDNN call
    if (packable && l.rowMajorB()) return nkPackingStep(l, postOps);
  }
  // packed for the column split at any row count (blocks of columns of the transposed
  // weight made oneDNN copy each block's slice on every call: gpt2 at 1 x 16 ran 20 %
  // slower than oneDNN's own threads), else from kMinRowBlock rows on
  packable = packable && l.batch == 1 &&
             (l.m >= kMinRowBlock || (split && setting == GemmSplit::automatic));
  auto sizeFor = [&](GemmSplit d) -> int64_t {
    if (d == GemmSplit::batch && l.batch > 1)
      return blockSizeFor(l.batch, threads, kBatchBlocksPerThread, 1, 1);
    if (d == GemmSplit::rows)
      return blockSizeFor(l.m, threads, kRowBlocksPerThread, 8, kMinRowBlock);
    if (d == GemmSplit::cols) return blockSizeFor(l.n, threads, kColBlocksPerThread, 16, 128);
    return 0;
  };
  // the plain split: batches, else weight columns (null: none)
  auto plainSplit = [&](GemmSplit prefer) -> std::unique_ptr<LibraryStep> {
    if (!split) return nullptr;
    for (GemmSplit d : {GemmSplit::batch, prefer}) {
      if (d == GemmSplit::off || d == GemmSplit::automatic) continue;
      if (d == GemmSplit::rows && l.batch == 1 && packable) continue; // rows: packed below
      if (int64_t b = sizeFor(d)) return blockedGemm(l, postOps, macs, d, b, false, nullptr);
    }
    return nullptr;
  };
  const bool automatic = setting == GemmSplit::automatic;
  if (!packable) {
    if (!automatic) return plainSplit(setting);
    // batches, or weight columns of a product with few rows; else oneDNN's own threads
    // (column blocks measured 10-25 % slower on an idle machine)
    if (l.batch > 1 || l.m < kMinRowBlock) return plainSplit(GemmSplit::cols);
    if (split && rowsOverPlainPay(l)) {
      if (int64_t block = sizeFor(GemmSplit::rows))
        return blockedGemm(l, postOps, macs, GemmSplit::rows, block, false, nullptr);
    }
    if (repacksRowMajorWeight(l)) return repackingStep(gemmDescs(l, 1, l.m, l.n), postOps, l.bias);
    return nullptr;
  }
  if (split && !automatic && setting != GemmSplit::rows) return plainSplit(setting);
  const memory::desc plainWeight = gemmDescs(l, l.batch, l.m, l.n).wei;
  // automatic: blocks of weight columns, several per thread, over the weight in row-major
  // order (the weight itself when it is so already, else a copy packed into it): a thread
  // the scheduler holds back delays one small block, where one block of rows per thread
  // (below) leaves it half the work. Each column block reads all the activations and each
  // row block the whole weight: columns where they read fewer bytes (gpt2 at 1 x 128 all
  // its products; at 4 x 128 rows for those with 768 columns).
  // Products with a long inner dim and many columns (Llama's, K and N >= 2048) keep
  // oneDNN's own threads over the weight as it is: its two-thread kernel ran 5-10 %
  // faster there than one-thread column blocks (whose strided output slice rules out
  // oneDNN 2.6's brgemm kernel; 128 x 2048 x 8192: 21.6 ms against 23.2, idle, 2
  // threads), and a packed copy gains nothing for one call (23.3 ms row-major).
  if (automatic && split && l.k >= kLongInnerDim && l.n >= kLongInnerDim) return nullptr;
  if (automatic && l.batch == 1 && l.m >= kMinRowBlock && wholePackedGemms())
    return wholePackedStep(l, postOps, plainWeight);
  const int64_t colBlock = split && automatic ? sizeFor(GemmSplit::cols) : 0;
  const int64_t colBlocks = colBlock ? (l.n + colBlock - 1) / colBlock : 0;
  if (colBlock && l.m * colBlocks <= threads * l.n) {
    GemmLayout rowMajor = l;
    rowMajor.b = GemmStrides{l.k * l.n, l.n, 1};
    auto inner = blockedGemm(rowMajor, postOps, macs, GemmSplit::cols, colBlock, false, nullptr);
    if (l.rowMajorB()) return inner; // row-major already: nothing to pack
    // until packed (a weight seen once at its version, as in training): one call on
    // oneDNN's own threads over the plain weight (column blocks over the transposed
    // weight ran ~20 % slower than over a row-major copy: gemm_bench's
    // BM_LinearBlocks/128/3072/768/1/128/0 against .../2, 3983 against 3346 us)
    GemmDescs d = gemmDescs(l, l.batch, l.m, l.n);
    return std::make_unique<PackingStep>(
        std::move(inner),
        std::make_unique<WeightPack>(plainWeight, gemmDescs(rowMajor, 1, l.m, l.n).wei),
        std::make_unique<MatmulStep>(d.src, d.wei, d.bias, d.dst, postOps, l.bias));
  }
  // over a packed weight: one block of rows per thread, or one call when not split
  const int64_t rowBlock = split ? sizeFor(GemmSplit::rows) : 0;
  if (split && rowBlock == 0) return plainSplit(GemmSplit::cols); // too few rows
  std::unique_ptr<LibraryStep> inner;
  memory::desc packedDesc;
  if (rowBlock > 0) {
    inner = blockedGemm(l, postOps, macs, GemmSplit::rows, rowBlock, true, &packedDesc);
  } else {
    GemmDescs d = gemmDescs(l, l.batch, l.m, l.n);
    auto whole = std::make_unique<MatmulStep>(d.src, d.wei, d.bias, d.dst, postOps, l.bias, true);
    packedDesc = whole->weightsDesc();
    inner = std::move(whole);
  }
  // without a packed copy (a weight seen once at its version, as in training, where each
  // step changes it; no storage known; past the budget): one plain call on oneDNN's own
  // threads, as fast as main's on an idle machine (forced splits: weight columns)
  std::unique_ptr<LibraryStep> plain = automatic ? nullptr : plainSplit(GemmSplit::cols);
  if (!plain) {
    GemmDescs d = gemmDescs(l, l.batch, l.m, l.n);
    plain = std::make_unique<MatmulStep>(d.src, d.wei, d.bias, d.dst, postOps, l.bias);
  }
  if (!inner) return plain;
  return std::make_unique<PackingStep>(
      std::move(inner), std::make_unique<WeightPack>(plainWeight, packedDesc), std::move(plain));
}

// The oneDNN call for a step's GEMM: [batch, rows, cols] descriptors over the operands'
// strides (a batch of one gets a dense batch stride, which oneDNN never steps over).
// A batched matmul whose batch dims do not collapse into one (attention's heads: a
// [B, H, T, D] view of a [B, T, H, D] tensor) as one block per index of its first dim,
// each a GEMM batched over the rest, run through the work pool; null when the rest does
// not collapse either, or the pool would not split it (the eager path then runs it, on
// OpenMP's threads, whose spin-waiting afterwards takes the cores from the pool).
std::unique_ptr<LibraryStep> createOuterSplit(const Program &p, const Step &s, memory::data_type dt,
                                              memory::data_type cdt) {
  if (s.op != OpKind::matmul || s.result < 0) return nullptr;
  const Value &a = p.values[s.operands[0]], &b = p.values[s.operands[1]];
  const Value &c = p.values[s.result];
  if (a.shape.size() < 3 || b.shape.size() != a.shape.size() || c.shape.size() != a.shape.size() ||
      a.shape[0] != b.shape[0] || a.shape[0] < 2)
    return nullptr;
  if (gemmSplitSetting() == GemmSplit::off || WorkPool::instance().threads() < 2 ||
      omp_get_max_threads() < 2)
    return nullptr;
  auto inner = [](Value v) {
    v.shape.erase(v.shape.begin());
    v.strides.erase(v.strides.begin());
    v.offset = 0;
    return v;
  };
  Program q; // the operands without their first dim
  q.values = {inner(a), inner(b), inner(c)};
  if (q.values[2].strides != detail::contiguousStrides(q.values[2].shape) ||
      c.strides[0] != c.shape[1] * q.values[2].strides[0])
    return nullptr; // the result as the library step writes it: dense
  Step t = s;
  t.operands = {0, 1};
  t.result = 2;
  GemmLayout l;
  l.dt = dt;
  l.cdt = cdt;
  if (!matmulLayout(q, t, l)) return nullptr;
  const double macs = static_cast<double>(a.shape[0]) * static_cast<double>(l.batch) *
                      static_cast<double>(l.m) * static_cast<double>(l.n) *
                      static_cast<double>(l.k);
  if (macs < kParallelMacs) return nullptr;
  std::vector<std::unique_ptr<MatmulStep>> prims;
  {
    OmpThreads one(1); // a primitive made for one thread
    GemmDescs d = gemmDescs(l, l.batch, l.m, l.n);
    prims.push_back(std::make_unique<MatmulStep>(d.src, d.wei, d.bias, d.dst, s.postOps, false));
  }
  std::vector<BlockedMatmulStep::Block> blocks;
  const int64_t f = l.elemBytes(), fc = l.resultBytes();
  for (int64_t i = 0; i < a.shape[0]; ++i)
    blocks.push_back({i * a.strides[0] * f, i * b.strides[0] * f, i * c.strides[0] * fc, 0, 0});
  return std::make_unique<BlockedMatmulStep>(std::move(prims), std::move(blocks), macs, false,
                                             "the first batch dim");
}

// A symbolic program's product of 2^20 multiply-adds or more through the shared
// runtime-dims primitive, cut into blocks of batches, else of rows (when A is row-major, so
// that each block's operands are dense as the primitive's layout asks), claimed through the
// work pool; each block's call runs on one thread (the pool sets OpenMP's count to 1 in a
// chunk). Null when the pool would not split it.
std::unique_ptr<LibraryStep> runtimeBlocks(const GemmLayout &l,
                                           const std::shared_ptr<dnnl::primitive> &shared,
                                           bool aRowMajor, double macs) {
  const int threads = WorkPool::instance().threads();
  if (macs < kParallelMacs || gemmSplitSetting() == GemmSplit::off || threads < 2 ||
      omp_get_max_threads() < 2)
    return nullptr;
  const bool batches = l.batch > 1;
  if (!batches && !aRowMajor) return nullptr;
  const int64_t block = batches ? blockSizeFor(l.batch, threads, kBatchBlocksPerThread, 1, 1)
                                : blockSizeFor(l.m, threads, 2, 8, 8);
  if (block == 0) return nullptr;
  return blockedGemm(l, {}, macs, batches ? GemmSplit::batch : GemmSplit::rows, block, false,
                     nullptr, shared);
}

std::unique_ptr<LibraryStep> createGemm(const Program &p, const Step &s, bool sizeFree,
                                        memory::data_type dt, memory::data_type cdt) {
  GemmLayout l;
  l.dt = dt;
  l.cdt = cdt;
  if (!matmulLayout(p, s, l))
    return createOuterSplit(p, s, dt, cdt); // null: the eager path runs it
  auto batchStride = [&](const GemmStrides &g, int64_t rows, int64_t cols) {
    return l.batch > 1 ? g.batch : rows * cols;
  };
  memory::desc src = md3(l.batch, l.m, l.k, batchStride(l.a, l.m, l.k), l.a.row, l.a.col, dt);
  memory::desc wei = md3(l.batch, l.k, l.n, batchStride(l.b, l.k, l.n), l.b.row, l.b.col, dt);
  memory::desc dst = md3(l.batch, l.m, l.n, l.c.batch, l.c.row, l.c.col, cdt);
  memory::desc bias;
  if (l.bias) {
    if (p.values[s.operands[2]].strides[0] != 1) return nullptr;
    bias = md3(1, 1, l.n, l.n, l.n, 1, dt);
  }
  const double macs = static_cast<double>(l.batch) * static_cast<double>(l.m) *
                      static_cast<double>(l.n) * static_cast<double>(l.k);
  // Dense operands only, row-major or transposed (C row-major): the layouts the shared
  // primitive is made for. 0: row-major, 1: transposed, -1: neither.
  auto dense = [&l](const GemmStrides &g, int64_t rows, int64_t cols) {
    const bool batchOk = l.batch == 1 || g.batch == rows * cols;
    if (batchOk && g.col == 1 && g.row == cols) return 0;
    if (batchOk && g.row == 1 && g.col == rows) return 1;
    return -1;
  };
  const int ta = dense(l.a, l.m, l.k), tb = dense(l.b, l.k, l.n), tc = dense(l.c, l.m, l.n);
  if (sizeFree && dt == memory::data_type::f32 && ta >= 0 && tb >= 0 && tc == 0 &&
      macs <= static_cast<double>(kRuntimeDimsMaxMacs)) {
    if (auto shared = runtimeMatmul(l.bias, s.postOps, ta == 1, tb == 1)) {
      // (a small one runs on the calling thread: CpuProgram's cost model runs it with
      // OpenMP's count at 1, which this primitive reads at every call)
      if (auto blocked = runtimeBlocks(l, shared, ta == 0, macs)) return blocked;
      return std::make_unique<MatmulStep>(src, wei, bias, dst, std::move(shared), l.bias);
    }
  }
  const Value &w = p.values[s.operands[1]];
  const bool packable = packWeightsSetting() && p.buffers[w.buffer].kind == Buffer::Kind::input;
  if (auto better = createSplitOrPacked(l, s.postOps, macs, packable)) return better;
  return std::make_unique<MatmulStep>(src, wei, bias, dst, s.postOps, l.bias);
}

} // namespace

void LibraryStep::setPackWeights(bool on) { setPackWeightsOverride(on ? 1 : 0); }

void LibraryStep::setWholePackedGemms(int on) { setOverride(HostChoice::wholePacked, on); }

void LibraryStep::setPlainOperandSplits(int on) { setOverride(HostChoice::plainSplits, on); }

void LibraryStep::setNkWeights(int on) { setOverride(HostChoice::nkWeights, on); }

std::unique_ptr<LibraryStep> LibraryStep::create(const Program &p, const Step &s, bool sizeFree) {
  // f32, or bf16 where oneDNN has native bf16 kernels (elsewhere the eager path runs bf16
  // products in f32 over cached f32 copies of the weights); the result in the operands'
  // type, or a bf16 product's in f32 (a cast the lowering folded in)
  const DType t = s.operands.empty() ? DType::f32 : p.values[s.operands[0]].dtype;
  if (t != DType::f32 && (t != DType::bf16 || !eager::bf16MatmulsNative())) return nullptr;
  for (int v : s.operands) {
    if (p.values[v].dtype != t) return nullptr;
  }
  const DType c = s.result >= 0 ? p.values[s.result].dtype : t;
  if (c != t && c != DType::f32) return nullptr;
  for (const PostOp &po : s.postOps) {
    dnnl::algorithm alg = dnnl::algorithm::eltwise_relu;
    float alpha = 0.f;
    if (!eltwiseFor(po.op, alg, alpha)) return nullptr;
  }
  try {
    return createGemm(p, s, sizeFree, eager::dnnlType(t), eager::dnnlType(c));
  } catch (const dnnl::error &) {
    return nullptr; // oneDNN declined this layout: the eager path runs it
  }
}

} // namespace rcjit::cpu
