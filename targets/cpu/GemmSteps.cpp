// The library steps' out-of-line parts (GemmSteps.h).
#include "targets/cpu/GemmSteps.h"

#include <algorithm>
#include <cstring>

#include "support/Threads.h"
#include "tracer/Half.h"
#include "tracer/OpCases.h"

namespace rcjit::cpu::gemm {

bool eltwiseFor(OpKind op, dnnl::algorithm &alg, float &alpha) {
  alpha = 0.f;
  switch (op) {
  case OpKind::relu:
    alg = dnnl::algorithm::eltwise_relu;
    return true;
  case OpKind::sigmoid:
    alg = dnnl::algorithm::eltwise_logistic;
    return true;
  case OpKind::tanh:
    alg = dnnl::algorithm::eltwise_tanh;
    return true;
  case OpKind::gelu:
    alg = dnnl::algorithm::eltwise_gelu_erf;
    return true;
  case OpKind::silu:
    alg = dnnl::algorithm::eltwise_swish;
    alpha = 1.f;
    return true;
  case OpKind::exp:
    alg = dnnl::algorithm::eltwise_exp;
    return true;
  case OpKind::abs:
    alg = dnnl::algorithm::eltwise_abs;
    return true;
  case OpKind::sqrt:
    alg = dnnl::algorithm::eltwise_sqrt;
    return true;
  case OpKind::log:
    alg = dnnl::algorithm::eltwise_log;
    return true;
    RCJIT_OP_CASES_WITHOUT(kPostOp) // no oneDNN eltwise: the next kernel computes these
    return false;
  }
  return false;
}

dnnl::primitive_attr attrFor(const std::vector<PostOp> &postOps, dnnl::scratchpad_mode mode) {
  dnnl::post_ops po;
  for (const PostOp &p : postOps) {
    dnnl::algorithm alg = dnnl::algorithm::eltwise_relu;
    float alpha = 0.f;
    eltwiseFor(p.op, alg, alpha);
    po.append_eltwise(1.f, alg, alpha, 0.f);
  }
  dnnl::primitive_attr attr;
  attr.set_post_ops(po);
  attr.set_scratchpad_mode(mode);
  return attr;
}

void InnerSplitStep::runWith(char *const *operands, char *result,
                             const std::shared_ptr<detail::Storage> *) const {
  std::unique_ptr<std::vector<float>> sums = slices_.take();
  if (!sums)
    sums = std::make_unique<std::vector<float>>(static_cast<size_t>(m_ * n_) * blocks_.size());
  const int64_t slice = m_ * n_;
  float *base = sums->data();
  WorkPool &pool = WorkPool::instance();
  pool.run(static_cast<int64_t>(blocks_.size()), [&](int64_t c) {
    const Block &b = blocks_[static_cast<size_t>(c)];
    char *ops[3] = {operands[0] + b.src, operands[1] + b.wei, nullptr};
    prims_[static_cast<size_t>(b.prim)]->run(ops, reinterpret_cast<char *>(base + c * slice));
  });
  const int64_t parts = static_cast<int64_t>(blocks_.size());
  const int64_t perRun = 4 * pool.threads();
  const int64_t rowBlock = std::max<int64_t>(1, (m_ + perRun - 1) / perRun);
  pool.run((m_ + rowBlock - 1) / rowBlock, [&](int64_t r) {
    for (int64_t i = r * rowBlock; i < std::min(m_, (r + 1) * rowBlock); ++i) {
      float *row = base + i * n_; // the first slice's row takes the sum
      for (int64_t p = 1; p < parts; ++p) {
        const float *other = base + p * slice + i * n_;
        for (int64_t j = 0; j < n_; ++j) row[j] += other[j];
      }
      if (dt_ == memory::data_type::bf16) {
        auto *out = reinterpret_cast<uint16_t *>(result) + i * c_.row;
        for (int64_t j = 0; j < n_; ++j) out[j * c_.col] = floatToBf16(row[j]);
      } else if (c_.col == 1) {
        std::memcpy(reinterpret_cast<float *>(result) + i * c_.row, row,
                    static_cast<size_t>(n_) * sizeof(float));
      } else {
        auto *out = reinterpret_cast<float *>(result) + i * c_.row;
        for (int64_t j = 0; j < n_; ++j) out[j * c_.col] = row[j];
      }
    }
  });
  slices_.give(std::move(sums));
}

std::vector<std::pair<int64_t, int64_t>> cutInto(int64_t size, int64_t block) {
  std::vector<std::pair<int64_t, int64_t>> out;
  for (int64_t at = 0; at < size; at += block) out.emplace_back(at, std::min(block, size - at));
  return out;
}

GemmDescs gemmDescs(const GemmLayout &l, int64_t nb, int64_t m, int64_t n) {
  auto bs = [&](const GemmStrides &g, int64_t rows, int64_t cols) {
    return nb > 1 ? g.batch : rows * cols;
  };
  GemmDescs d;
  d.src = md3(nb, m, l.k, bs(l.a, m, l.k), l.a.row, l.a.col, l.dt);
  d.wei = md3(nb, l.k, n, bs(l.b, l.k, n), l.b.row, l.b.col, l.dt);
  d.dst = md3(nb, m, n, nb > 1 ? l.c.batch : m * n, l.c.row, l.c.col, l.cdt);
  if (l.bias) d.bias = md3(1, 1, n, n, n, 1, l.dt);
  return d;
}

namespace {
// A blocked step's primitives, one per distinct block length (the blocks of a cut share one,
// its shorter last block another).
struct PrimsByLength {
  std::vector<std::unique_ptr<MatmulStep>> prims;
  std::vector<int64_t> lengths; // the block length each primitive is made for
  // The index of the primitive for blocks of `len`, made by `make(len)` the first time.
  template <class Make> int indexFor(int64_t len, Make &&make) {
    size_t i = 0;
    while (i < lengths.size() && lengths[i] != len) ++i;
    if (i == lengths.size()) {
      prims.push_back(make(len));
      lengths.push_back(len);
    }
    return static_cast<int>(i);
  }
};
} // namespace

std::unique_ptr<LibraryStep> blockedGemm(const GemmLayout &l, const std::vector<PostOp> &postOps,
                                         double macs, GemmSplit dim, int64_t block, bool pack,
                                         memory::desc *packedDesc,
                                         const std::shared_ptr<dnnl::primitive> &shared) {
  const int64_t f = l.elemBytes(), fc = l.resultBytes();
  PrimsByLength prims;
  std::vector<BlockedMatmulStep::Block> blocks;
  OmpThreads one(1); // primitives made for one thread
  for (const auto &[at, len] : cutInto(dim == GemmSplit::batch  ? l.batch
                                       : dim == GemmSplit::rows ? l.m
                                                                : l.n,
                                       block)) {
    const int prim = prims.indexFor(len, [&](int64_t n) {
      GemmDescs d = gemmDescs(l, dim == GemmSplit::batch ? n : l.batch,
                              dim == GemmSplit::rows ? n : l.m, dim == GemmSplit::cols ? n : l.n);
      return shared
                 ? std::make_unique<MatmulStep>(d.src, d.wei, d.bias, d.dst, shared, l.bias)
                 : std::make_unique<MatmulStep>(d.src, d.wei, d.bias, d.dst, postOps, l.bias, pack);
    });
    BlockedMatmulStep::Block b{0, 0, 0, 0, prim};
    if (dim == GemmSplit::batch) {
      b.src = at * l.a.batch * f;
      b.wei = at * l.b.batch * f;
      b.dst = at * l.c.batch * fc;
    } else if (dim == GemmSplit::rows) {
      b.src = at * l.a.row * f;
      b.dst = at * l.c.row * fc;
    } else {
      b.wei = at * l.b.col * f;
      b.dst = at * l.c.col * fc;
      b.bias = at * f;
    }
    blocks.push_back(b);
  }
  if (pack) { // every block reads the one packed copy: the same layout for all
    *packedDesc = prims.prims.front()->weightsDesc();
    for (const auto &p : prims.prims) {
      if (p->weightsDesc() != *packedDesc) return nullptr;
    }
  }
  return std::make_unique<BlockedMatmulStep>(std::move(prims.prims), std::move(blocks), macs,
                                             l.bias,
                                             dim == GemmSplit::batch  ? "batches"
                                             : dim == GemmSplit::rows ? "rows"
                                                                      : "weight columns");
}

std::unique_ptr<LibraryStep> innerSplitGemm(const GemmLayout &l, double macs, int threads) {
  const int64_t f = l.elemBytes();
  const int64_t block = ((l.k + threads - 1) / threads + 15) / 16 * 16;
  PrimsByLength prims;
  std::vector<InnerSplitStep::Block> blocks;
  OmpThreads one(1); // primitives made for one thread
  for (const auto &[at, len] : cutInto(l.k, block)) {
    const int prim = prims.indexFor(len, [&](int64_t k) {
      const memory::desc src = md3(1, l.m, k, l.m * k, l.a.row, l.a.col, l.dt);
      const memory::desc wei = md3(1, k, l.n, k * l.n, l.b.row, l.b.col, l.dt);
      const memory::desc dst =
          md3(1, l.m, l.n, l.m * l.n, l.n, 1, memory::data_type::f32); // a dense f32 slice
      return std::make_unique<MatmulStep>(src, wei, memory::desc(), dst, std::vector<PostOp>{},
                                          false);
    });
    blocks.push_back({at * l.a.col * f, at * l.b.row * f, prim});
  }
  return std::make_unique<InnerSplitStep>(std::move(prims.prims), std::move(blocks), l.m, l.n, l.c,
                                          l.cdt, macs);
}

} // namespace rcjit::cpu::gemm
