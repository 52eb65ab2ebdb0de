// oneDNN matmul primitives with fused bias and eltwise post-ops, run on raw pointers.
#include "targets/cpu/LibraryStep.h"

#include "tracer/OpCases.h"

#include <mutex>
#include <oneapi/dnnl/dnnl.h>
#include <oneapi/dnnl/dnnl.hpp>

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
    RCJIT_OP_CASES(Source, Binary, Compare, Where, Reduce, Normalize, Matmul, Nn, View, Copy)
    return false;
  }
  return false;
}

// A 2-D or 3-D (batched) f32 matmul: src [B, M, K] @ wei [B, K, N] (+ bias [1, 1, N]).
class MatmulStep : public LibraryStep {
public:
  MatmulStep(memory::desc src, memory::desc wei, memory::desc bias, memory::desc dst,
             const std::vector<PostOp> &postOps, bool hasBias)
      : src_(src), wei_(wei), bias_(bias), dst_(dst), hasBias_(hasBias) {
    auto &ctx = eager::DnnlContext::instance();
    dnnl::post_ops po;
    for (const PostOp &p : postOps) {
      dnnl::algorithm alg = dnnl::algorithm::eltwise_relu;
      float alpha = 0.f;
      eltwiseFor(p.op, alg, alpha);
      po.append_eltwise(1.f, alg, alpha, 0.f);
    }
    dnnl::primitive_attr attr;
    attr.set_post_ops(po);
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    auto d = hasBias ? dnnl::matmul::desc(src, wei, bias, dst) : dnnl::matmul::desc(src, wei, dst);
    dnnl::matmul::primitive_desc pd(d, attr, ctx.engine());
    prim_ = dnnl::matmul(pd);
    scratch_ = pd.scratchpad_desc();
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
                               {DNNL_ARG_SCRATCHPAD, m->scratch.get()},
                               {DNNL_ARG_BIAS, m->bias ? m->bias.get() : nullptr}};
    int nargs = hasBias_ ? 5 : 4;
    dnnl::stream &s = ctx.stream();
    dnnl_status_t st = dnnl_primitive_execute(prim_.get(), s.get(), nargs, args);
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
    m->scratch = memory(scratch_, ctx.engine()); // owns its buffer
    return m;
  }
  void release(std::unique_ptr<Mems> m) const {
    std::lock_guard<std::mutex> lock(mu_);
    pool_.push_back(std::move(m));
  }

  memory::desc src_, wei_, bias_, dst_, scratch_;
  bool hasBias_;
  dnnl::primitive prim_;
  mutable std::mutex mu_;
  mutable std::vector<std::unique_ptr<Mems>> pool_;
};

memory::desc md3(int64_t b, int64_t r, int64_t c, int64_t sb, int64_t sr, int64_t sc) {
  return memory::desc({b, r, c}, memory::data_type::f32, {sb, sr, sc});
}

// The oneDNN call for a step's GEMM: [batch, rows, cols] descriptors over the operands'
// strides (a batch of one gets a dense batch stride, which oneDNN never steps over).
std::unique_ptr<LibraryStep> createGemm(const Program &p, const Step &s) {
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
  return std::make_unique<MatmulStep>(src, wei, bias, dst, s.postOps, l.bias);
}

} // namespace

std::unique_ptr<LibraryStep> LibraryStep::create(const Program &p, const Step &s) {
  for (int v : s.operands) {
    if (p.values[v].dtype != DType::f32) return nullptr;
  }
  for (const PostOp &po : s.postOps) {
    dnnl::algorithm alg = dnnl::algorithm::eltwise_relu;
    float alpha = 0.f;
    if (!eltwiseFor(po.op, alg, alpha)) return nullptr;
  }
  try {
    return createGemm(p, s);
  } catch (const dnnl::error &) {
    return nullptr; // oneDNN declined this layout: the eager path runs it
  }
}

} // namespace rcjit::cpu
