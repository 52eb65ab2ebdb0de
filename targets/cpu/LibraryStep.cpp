// oneDNN matmul primitives with fused bias and eltwise post-ops, run on raw pointers.
#include "targets/cpu/LibraryStep.h"

#include <mutex>
#include <oneapi/dnnl/dnnl.h>
#include <oneapi/dnnl/dnnl.hpp>

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
  default:
    return false;
  }
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

// Collapses a value's leading dims into one when its strides allow ([..., R, C] ->
// [B, R, C]); false otherwise.
bool asBatched(const Value &v, int64_t &b, int64_t &sb) {
  size_t n = v.shape.size();
  b = 1;
  sb = 0;
  if (n <= 2) return true;
  int64_t expected = -1;
  for (size_t i = n - 2; i-- > 0;) {
    if (v.shape[i] == 1) continue;
    if (expected >= 0 && v.strides[i] != expected) return false;
    if (expected < 0) sb = v.strides[i];
    expected = v.strides[i] * v.shape[i];
    b *= v.shape[i];
  }
  if (b == 1) sb = 0;
  return true;
}

std::unique_ptr<LibraryStep> createLinear(const Program &p, const Step &s) {
  const Value &x = p.values[s.operands[0]];
  const Value &w = p.values[s.operands[1]];
  int64_t k = w.shape[1], n = w.shape[0];
  // x [..., K] as [M, K]: its leading dims must collapse into equally spaced rows
  int64_t m = 1;
  for (size_t i = 0; i + 1 < x.shape.size(); ++i) m *= x.shape[i];
  int64_t rowStride = x.shape.size() >= 2 ? x.strides[x.shape.size() - 2] : k;
  int64_t expected = rowStride;
  for (size_t i = x.shape.size() - 1; i-- > 0;) {
    if (x.shape[i] == 1) continue;
    if (x.strides[i] != expected) return nullptr;
    expected *= x.shape[i];
  }
  memory::desc src = md3(1, m, k, m * rowStride, rowStride, x.strides.back());
  memory::desc wei = md3(1, k, n, k * n, w.strides[1], w.strides[0]);
  memory::desc dst = md3(1, m, n, m * n, n, 1);
  memory::desc bias = md3(1, 1, n, n, n, 1);
  bool hasBias = s.operands.size() == 3;
  if (hasBias && p.values[s.operands[2]].strides[0] != 1) return nullptr;
  return std::make_unique<MatmulStep>(src, wei, bias, dst, s.postOps, hasBias);
}

std::unique_ptr<LibraryStep> createMatmul(const Program &p, const Step &s) {
  const Value &a = p.values[s.operands[0]];
  const Value &b = p.values[s.operands[1]];
  if (a.shape.size() < 2 || b.shape.size() < 2) return nullptr;
  if (a.shape.size() != b.shape.size()) return nullptr;
  for (size_t i = 0; i + 2 < a.shape.size(); ++i) {
    if (a.shape[i] != b.shape[i]) return nullptr; // broadcast batches go through eager
  }
  int64_t ba, sba, bb, sbb;
  if (!asBatched(a, ba, sba) || !asBatched(b, bb, sbb) || ba != bb) return nullptr;
  size_t r = a.shape.size();
  int64_t m = a.shape[r - 2], k = a.shape[r - 1], n = b.shape[r - 1];
  memory::desc src = md3(ba, m, k, ba > 1 ? sba : m * k, a.strides[r - 2], a.strides[r - 1]);
  memory::desc wei = md3(bb, k, n, bb > 1 ? sbb : k * n, b.strides[r - 2], b.strides[r - 1]);
  memory::desc dst = md3(ba, m, n, m * n, n, 1);
  return std::make_unique<MatmulStep>(src, wei, memory::desc(), dst, s.postOps, false);
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
    if (s.op == OpKind::linear) return createLinear(p, s);
    if (s.op == OpKind::matmul) return createMatmul(p, s);
  } catch (const dnnl::error &) {
    return nullptr; // oneDNN declined this layout: the eager path runs it
  }
  return nullptr;
}

} // namespace rcjit::cpu
