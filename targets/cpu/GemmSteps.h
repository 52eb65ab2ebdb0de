// The oneDNN library steps LibraryStep::create chooses among (targets/cpu/LibraryStep.cpp
// holds the choice and its measurements): one matmul primitive (MatmulStep), a GEMM cut into
// blocks run through the work pool (BlockedMatmulStep), or cut along its inner dim with the
// blocks' products summed after (InnerSplitStep); and the descriptors and cuts they are
// made from.
#pragma once
#include <omp.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include <oneapi/dnnl/dnnl.h>
#include <oneapi/dnnl/dnnl.hpp>
#include <rcjit/Error.h>

#include "support/WorkPool.h"
#include "targets/MatmulLayout.h"
#include "targets/Program.h"
#include "targets/cpu/LibraryStep.h"
#include "targets/cpu/WeightPack.h"
#include "targets/eager/DnnlContext.h"

namespace rcjit::cpu::gemm {

using dnnl::memory;

// The oneDNN algorithm of a post-op (kPostOp in Ops.def's props); false for any other op.
bool eltwiseFor(OpKind op, dnnl::algorithm &alg, float &alpha);

// The primitive attributes of `postOps` (eltwise post-ops) with this scratchpad mode.
dnnl::primitive_attr attrFor(const std::vector<PostOp> &postOps, dnnl::scratchpad_mode mode);

inline memory::desc md3(int64_t b, int64_t r, int64_t c, int64_t sb, int64_t sr, int64_t sc,
                        memory::data_type dt) {
  return memory::desc({b, r, c}, dt, {sb, sr, sc});
}

// Objects a step reuses across runs (a run's oneDNN memory objects, its scratch buffers):
// take() hands one back or null, give() keeps one for a later run. Thread-safe: concurrent
// runs each take their own.
template <class T> class FreeList {
public:
  std::unique_ptr<T> take() const {
    std::lock_guard<std::mutex> lock(mu_);
    if (items_.empty()) return nullptr;
    std::unique_ptr<T> t = std::move(items_.back());
    items_.pop_back();
    return t;
  }
  void give(std::unique_ptr<T> t) const {
    std::lock_guard<std::mutex> lock(mu_);
    items_.push_back(std::move(t));
  }

private:
  mutable std::mutex mu_;
  mutable std::vector<std::unique_ptr<T>> items_;
};

// A 2-D or 3-D (batched) f32 or bf16 matmul: src [B, M, K] @ wei [B, K, N] (+ bias [1, 1, N]).
class MatmulStep : public LibraryStep {
public:
  /// `packedWeights`: the primitive reads its weight in the layout oneDNN picks for it
  /// (weightsDesc(); the caller passes a copy reordered into it, see WeightPack).
  ///
  /// A product of one batch is made as a 2-D one ([M, K] x [K, N]), which the caller's
  /// operands and weightsDesc() then follow: oneDNN 2.6 ran the same product given as
  /// [1, M, K] x [1, K, N] on one of two threads (gpt2's LM head, 512 x 768 x 50257 f32 on
  /// an AMX host: 226-238 ms against 112-134 ms), and picks plain row-major weights for a
  /// 3-D `format_tag::any` where a 2-D one gets its blocked layout (BA16a64b: 5.6 ms against
  /// 12.6 ms at 512 x 768 x 3072).
  MatmulStep(memory::desc src, memory::desc wei, memory::desc bias, memory::desc dst,
             const std::vector<PostOp> &postOps, bool hasBias, bool packedWeights = false)
      : src_(unbatched(src)), wei_(unbatched(wei)), bias_(hasBias ? unbatched(bias) : bias),
        dst_(unbatched(dst)), hasBias_(hasBias), macs_(macsOf(src, dst)),
        threads_(omp_get_max_threads()) {
    auto &ctx = eager::DnnlContext::instance();
    memory::desc w = wei_;
    if (packedWeights) w = memory::desc(wei_.dims(), wei_.data_type(), memory::format_tag::any);
    auto d = hasBias ? dnnl::matmul::desc(src_, w, bias_, dst_) : dnnl::matmul::desc(src_, w, dst_);
    dnnl::matmul::primitive_desc pd(d, attrFor(postOps, dnnl::scratchpad_mode::user), ctx.engine());
    prim_ = dnnl::matmul(pd);
    scratch_ = pd.scratchpad_desc();
    if (packedWeights) wei_ = pd.weights_desc();
  }
  const memory::desc &weightsDesc() const { return wei_; }
  /// The same call through a shared runtime-dims primitive (no scratchpad argument: the
  /// library allocates its own).
  MatmulStep(memory::desc src, memory::desc wei, memory::desc bias, memory::desc dst,
             std::shared_ptr<dnnl::primitive> shared, bool hasBias)
      : src_(src), wei_(wei), bias_(bias), dst_(dst), hasBias_(hasBias), macs_(macsOf(src, dst)),
        shared_(std::move(shared)) {}

  double macs() const override { return macs_; }
  std::string describe() const override {
    if (shared_) return "the shared runtime-dims oneDNN matmul";
    return "one oneDNN matmul made for " + std::to_string(threads_) +
           (threads_ == 1 ? " thread" : " threads");
  }

  void runWith(char *const *operands, char *result,
               const std::shared_ptr<detail::Storage> *) const override {
    auto &ctx = eager::DnnlContext::instance();
    std::unique_ptr<Mems> m = acquire();
    m->src.set_data_handle(operands[0]);
    m->wei.set_data_handle(operands[1]);
    if (hasBias_) m->bias.set_data_handle(operands[2]);
    m->dst.set_data_handle(result);
    dnnl_exec_arg_t args[5] = {{DNNL_ARG_SRC, m->src.get()},
                               {DNNL_ARG_WEIGHTS, m->wei.get()},
                               {DNNL_ARG_DST, m->dst.get()},
                               {DNNL_ARG_BIAS, m->bias ? m->bias.get() : nullptr},
                               {DNNL_ARG_SCRATCHPAD, m->scratch ? m->scratch.get() : nullptr}};
    int nargs = (hasBias_ ? 4 : 3) + (m->scratch ? 1 : 0);
    if (!hasBias_) args[3] = args[4];
    dnnl::stream &s = ctx.stream();
    const dnnl::primitive &prim = shared_ ? *shared_ : prim_;
    dnnl_status_t st = dnnl_primitive_execute(prim.get(), s.get(), nargs, args);
    if (st == dnnl_success) st = dnnl_stream_wait(s.get());
    free_.give(std::move(m));
    if (st != dnnl_success) {
      throw Error("matmul: oneDNN execution failed (status " + std::to_string(st) + ")");
    }
  }

private:
  struct Mems {
    memory src, wei, bias, dst, scratch;
  };
  std::unique_ptr<Mems> acquire() const {
    if (std::unique_ptr<Mems> m = free_.take()) return m;
    auto &ctx = eager::DnnlContext::instance();
    auto m = std::make_unique<Mems>();
    m->src = memory(src_, ctx.engine(), DNNL_MEMORY_NONE);
    m->wei = memory(wei_, ctx.engine(), DNNL_MEMORY_NONE);
    if (hasBias_) m->bias = memory(bias_, ctx.engine(), DNNL_MEMORY_NONE);
    m->dst = memory(dst_, ctx.engine(), DNNL_MEMORY_NONE);
    if (!shared_) m->scratch = memory(scratch_, ctx.engine()); // owns its buffer
    return m;
  }
  static double macsOf(const memory::desc &src, const memory::desc &dst) {
    const memory::dims s = src.dims(), d = dst.dims(); // [B, M, K], [B, M, N]
    return static_cast<double>(d[0]) * static_cast<double>(d[1]) * static_cast<double>(d[2]) *
           static_cast<double>(s[2]);
  }

  memory::desc src_, wei_, bias_, dst_, scratch_;
  bool hasBias_;
  double macs_;
  int threads_ = 0;                         // OpenMP's count when prim_ was made
  dnnl::primitive prim_;                    // made for these sizes, or
  std::shared_ptr<dnnl::primitive> shared_; // the runtime-dims primitive
  FreeList<Mems> free_;
};

// A GEMM cut into independent blocks along one dimension (batches, rows of A and C, or
// columns of B and C), each run by a primitive made for one thread, the blocks claimed one
// at a time through the work pool: a thread the scheduler holds back delays only the block
// it runs, where oneDNN's own OpenMP split waits at its barrier for every thread.
class BlockedMatmulStep : public LibraryStep {
public:
  struct Block {
    int64_t src, wei, dst, bias; // byte offsets into the operands and the result
    int prim;                    // index into prims_
  };
  /// `along`: what the blocks cut, for describe() ("rows", "weight columns", ...).
  BlockedMatmulStep(std::vector<std::unique_ptr<MatmulStep>> prims, std::vector<Block> blocks,
                    double macs, bool hasBias, std::string along)
      : prims_(std::move(prims)), blocks_(std::move(blocks)), macs_(macs), hasBias_(hasBias),
        along_(std::move(along)) {}

  double macs() const override { return macs_; }
  int blocks() const override { return static_cast<int>(blocks_.size()); }
  std::string describe() const override {
    return std::to_string(blocks_.size()) + " blocks of " + along_ + " on the work pool, each " +
           prims_.front()->describe();
  }

  void runWith(char *const *operands, char *result,
               const std::shared_ptr<detail::Storage> *) const override {
    WorkPool::instance().run(static_cast<int64_t>(blocks_.size()), [&](int64_t c) {
      const Block &b = blocks_[static_cast<size_t>(c)];
      char *ops[3] = {operands[0] + b.src, operands[1] + b.wei,
                      hasBias_ ? operands[2] + b.bias : nullptr};
      prims_[static_cast<size_t>(b.prim)]->run(ops, result + b.dst);
    });
  }

private:
  std::vector<std::unique_ptr<MatmulStep>> prims_;
  std::vector<Block> blocks_;
  double macs_;
  bool hasBias_;
  std::string along_;
};

// A GEMM cut along its inner dim into blocks (`blocks_`, claimed through the work pool),
// each run by a primitive made for one thread that writes the block's product in f32 to a
// dense [M, N] slice of a buffer of the step; the slices are then summed, rows claimed
// through the pool, into the result (f32, or rounded to bf16). A product with a long inner
// dim and a small result (gpt2's LM head gradient dx = dlogits @ W, 512 x 50257 x 768) ran
// 15-20 % faster so than on oneDNN's own two threads (see innerSplitPays).
class InnerSplitStep : public LibraryStep {
public:
  struct Block {
    int64_t src, wei; // byte offsets into A and B
    int prim;         // index into prims_
  };
  InnerSplitStep(std::vector<std::unique_ptr<MatmulStep>> prims, std::vector<Block> blocks,
                 int64_t m, int64_t n, GemmStrides c, memory::data_type dt, double macs)
      : prims_(std::move(prims)), blocks_(std::move(blocks)), m_(m), n_(n), c_(c), dt_(dt),
        macs_(macs) {}

  double macs() const override { return macs_; }
  int blocks() const override { return static_cast<int>(blocks_.size()); }
  std::string describe() const override {
    return std::to_string(blocks_.size()) + " blocks of the inner dim on the work pool, each " +
           prims_.front()->describe() + ", summed in f32";
  }

  void runWith(char *const *operands, char *result,
               const std::shared_ptr<detail::Storage> *) const override;

private:
  std::vector<std::unique_ptr<MatmulStep>> prims_;
  std::vector<Block> blocks_;
  int64_t m_, n_;
  GemmStrides c_; // the result's row and column strides, in elements
  memory::data_type dt_;
  double macs_;
  FreeList<std::vector<float>> slices_; // the f32 slices, reused
};

// How a GEMM is split into blocks: RCJIT_GEMM_SPLIT = auto (default; the cost model below),
// off (oneDNN's own threading), or batch / rows / cols (that dimension where it has more
// than one block; for measurements).
enum class GemmSplit { automatic, off, batch, rows, cols };

// Cuts [0, size) into blocks of `block` (the last one shorter): (start, length) pairs.
std::vector<std::pair<int64_t, int64_t>> cutInto(int64_t size, int64_t block);

// A step's GEMM (MatmulLayout) and its element types: the operands' `dt` (f32, or bf16
// where oneDNN runs it natively) and the result's `cdt`, which is `dt` or, for a bf16
// product whose cast to f32 the lowering folded in (foldCast), f32.
struct GemmLayout : MatmulLayout {
  memory::data_type dt = memory::data_type::f32;
  memory::data_type cdt = memory::data_type::f32;
  int64_t elemBytes() const { return dt == memory::data_type::bf16 ? 2 : 4; }
  int64_t resultBytes() const { return cdt == memory::data_type::bf16 ? 2 : 4; }
  /// Whether B ([K, N]) is row-major: its columns contiguous, its rows N apart.
  bool rowMajorB() const { return b.col == 1 && b.row == n; }
};

// The descriptors of the GEMM `l` restricted to `nb` batches, `m` rows and `n` columns
// (strides as in `l`; a batch of one gets a dense batch stride).
struct GemmDescs {
  memory::desc src, wei, bias, dst;
};
GemmDescs gemmDescs(const GemmLayout &l, int64_t nb, int64_t m, int64_t n);

// `l` cut into blocks along `dim` (`block` long; the last may be shorter), each run by a
// primitive made for one thread; `pack`: the primitives read a packed weight, whose layout
// goes to `packedDesc` (null when the blocks' layouts differ); `shared`: every block runs
// this runtime-dims primitive instead (`postOps` and `pack` unused).
std::unique_ptr<LibraryStep> blockedGemm(const GemmLayout &l, const std::vector<PostOp> &postOps,
                                         double macs, GemmSplit dim, int64_t block, bool pack,
                                         memory::desc *packedDesc,
                                         const std::shared_ptr<dnnl::primitive> &shared = nullptr);

// `l` as an InnerSplitStep of one block of the inner dim per pool thread (a multiple of 16
// long).
std::unique_ptr<LibraryStep> innerSplitGemm(const GemmLayout &l, double macs, int threads);

} // namespace rcjit::cpu::gemm
