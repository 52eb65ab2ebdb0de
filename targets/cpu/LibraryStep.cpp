// oneDNN matmul primitives with fused bias and eltwise post-ops, run on raw pointers.
#include "targets/cpu/LibraryStep.h"

#include <algorithm>
#include <map>
#include <memory>

#include "tracer/OpCases.h"

#include <mutex>
#include <oneapi/dnnl/dnnl.h>
#include <oneapi/dnnl/dnnl.hpp>
#include <string>

#include "targets/MatmulLayout.h"
#include "targets/eager/DnnlContext.h"

namespace rcjit::cpu {

namespace {

using dnnl::memory;

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
  case OpKind::neg: // no oneDNN eltwise: the next kernel computes these
  case OpKind::rsqrt:
  case OpKind::reciprocal:
  case OpKind::erf:
  case OpKind::sin:
  case OpKind::cos:
  case OpKind::cast:
    RCJIT_OP_CASES(Source, Binary, Compare, Where, Reduce, Normalize, Matmul, Nn, View, Copy,
                   Collective)
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

// A 2-D or 3-D (batched) f32 matmul: src [B, M, K] @ wei [B, K, N] (+ bias [1, 1, N]).
class MatmulStep : public LibraryStep {
public:
  MatmulStep(memory::desc src, memory::desc wei, memory::desc bias, memory::desc dst,
             const std::vector<PostOp> &postOps, bool hasBias)
      : src_(src), wei_(wei), bias_(bias), dst_(dst), hasBias_(hasBias) {
    auto &ctx = eager::DnnlContext::instance();
    auto d = hasBias ? dnnl::matmul::desc(src, wei, bias, dst) : dnnl::matmul::desc(src, wei, dst);
    dnnl::matmul::primitive_desc pd(d, attrFor(postOps, dnnl::scratchpad_mode::user), ctx.engine());
    prim_ = dnnl::matmul(pd);
    scratch_ = pd.scratchpad_desc();
  }
  /// The same call through a shared runtime-dims primitive (no scratchpad argument: the
  /// library allocates its own).
  MatmulStep(memory::desc src, memory::desc wei, memory::desc bias, memory::desc dst,
             std::shared_ptr<dnnl::primitive> shared, bool hasBias)
      : src_(src), wei_(wei), bias_(bias), dst_(dst), hasBias_(hasBias),
        shared_(std::move(shared)) {}

  double macs() const override {
    return static_cast<double>(dst_.dims()[0]) * static_cast<double>(dst_.dims()[1]) *
           static_cast<double>(dst_.dims()[2]) * static_cast<double>(src_.dims()[2]);
  }

  void run(char *const *operands, char *result) const override {
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
    release(std::move(m));
    if (st != dnnl_success) {
      throw Error("matmul: oneDNN execution failed (status " + std::to_string(st) + ")");
    }
  }

private:
  struct Mems {
    memory src, wei, bias, dst, scratch;
  };
  std::unique_ptr<Mems> acquire() const {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!pool_.empty()) {
        std::unique_ptr<Mems> m = std::move(pool_.back());
        pool_.pop_back();
        return m;
      }
    }
    auto &ctx = eager::DnnlContext::instance();
    auto m = std::make_unique<Mems>();
    m->src = memory(src_, ctx.engine(), DNNL_MEMORY_NONE);
    m->wei = memory(wei_, ctx.engine(), DNNL_MEMORY_NONE);
    if (hasBias_) m->bias = memory(bias_, ctx.engine(), DNNL_MEMORY_NONE);
    m->dst = memory(dst_, ctx.engine(), DNNL_MEMORY_NONE);
    if (!shared_) m->scratch = memory(scratch_, ctx.engine()); // owns its buffer
    return m;
  }
  void release(std::unique_ptr<Mems> m) const {
    std::lock_guard<std::mutex> lock(mu_);
    pool_.push_back(std::move(m));
  }

  memory::desc src_, wei_, bias_, dst_, scratch_;
  bool hasBias_;
  dnnl::primitive prim_;                    // made for these sizes, or
  std::shared_ptr<dnnl::primitive> shared_; // the runtime-dims primitive
  mutable std::mutex mu_;
  mutable std::vector<std::unique_ptr<Mems>> pool_;
};

memory::desc md3(int64_t b, int64_t r, int64_t c, int64_t sb, int64_t sr, int64_t sc) {
  return memory::desc({b, r, c}, memory::data_type::f32, {sb, sr, sc});
}

// The oneDNN call for a step's GEMM: [batch, rows, cols] descriptors over the operands'
// strides (a batch of one gets a dense batch stride, which oneDNN never steps over).
std::unique_ptr<LibraryStep> createGemm(const Program &p, const Step &s, bool sizeFree) {
  MatmulLayout l;
  if (!matmulLayout(p, s, l)) return nullptr; // the eager path runs it
  auto batchStride = [&](const GemmStrides &g, int64_t rows, int64_t cols) {
    return l.batch > 1 ? g.batch : rows * cols;
  };
  memory::desc src = md3(l.batch, l.m, l.k, batchStride(l.a, l.m, l.k), l.a.row, l.a.col);
  memory::desc wei = md3(l.batch, l.k, l.n, batchStride(l.b, l.k, l.n), l.b.row, l.b.col);
  memory::desc dst = md3(l.batch, l.m, l.n, l.c.batch, l.c.row, l.c.col);
  memory::desc bias;
  if (l.bias) {
    if (p.values[s.operands[2]].strides[0] != 1) return nullptr;
    bias = md3(1, 1, l.n, l.n, l.n, 1);
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
  if (sizeFree && ta >= 0 && tb >= 0 && tc == 0 &&
      macs <= static_cast<double>(kRuntimeDimsMaxMacs)) {
    if (auto shared = runtimeMatmul(l.bias, s.postOps, ta == 1, tb == 1)) {
      return std::make_unique<MatmulStep>(src, wei, bias, dst, std::move(shared), l.bias);
    }
  }
  return std::make_unique<MatmulStep>(src, wei, bias, dst, s.postOps, l.bias);
}

} // namespace

std::unique_ptr<LibraryStep> LibraryStep::create(const Program &p, const Step &s, bool sizeFree) {
  for (int v : s.operands) {
    if (p.values[v].dtype != DType::f32) return nullptr;
  }
  for (const PostOp &po : s.postOps) {
    dnnl::algorithm alg = dnnl::algorithm::eltwise_relu;
    float alpha = 0.f;
    if (!eltwiseFor(po.op, alg, alpha)) return nullptr;
  }
  try {
    return createGemm(p, s, sizeFree);
  } catch (const dnnl::error &) {
    return nullptr; // oneDNN declined this layout: the eager path runs it
  }
}

} // namespace rcjit::cpu
