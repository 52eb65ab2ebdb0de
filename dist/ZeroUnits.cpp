// Moves between a ZeRO unit's parameters and flat buffers, freeing a parameter's memory in
// place while values saved for backward still refer to it, the stage-3 blocks of a model,
// and clipping the sharded gradient.
#include "dist/ZeroUnits.h"

#include <cmath>
#include <cstring>

#include <rcjit/Ops.h>

#include "tracer/TensorImpl.h"

namespace rcjit::dist::detail {

void packRange(const ZeroUnit &u, const std::vector<Tensor> &tensors, int64_t lo, int64_t hi,
               float *dst) {
  std::memset(dst, 0, static_cast<size_t>(hi - lo) * sizeof(float));
  forEachOverlap(u, lo, hi, [&](size_t k, int64_t at, int64_t to, int64_t n) {
    const Tensor &t = tensors[k];
    if (!t.defined()) return;
    std::memcpy(dst + to, t.data<float>() + at, static_cast<size_t>(n) * sizeof(float));
  });
}

void unpackRange(const ZeroUnit &u, const std::vector<Tensor> &tensors, int64_t lo, int64_t hi,
                 const float *src) {
  forEachOverlap(u, lo, hi, [&](size_t k, int64_t at, int64_t from, int64_t n) {
    std::memcpy(tensors[k].data<float>() + at, src + from, static_cast<size_t>(n) * sizeof(float));
  });
}

void releaseStorage(const Tensor &t) {
  rcjit::detail::Storage &s = *t.impl()->storage;
  if (!s.data) return;
  if (s.release) s.release(s.data);
  s.data = nullptr;
  s.release = nullptr;
}

void refillStorage(const Tensor &t) {
  rcjit::detail::Storage &s = *t.impl()->storage;
  if (s.data) return;
  std::shared_ptr<rcjit::detail::Storage> fresh =
      rcjit::detail::allocateStorage(s.nbytes, s.device);
  s.data = fresh->data;
  s.release = std::move(fresh->release);
  fresh->data = nullptr;
  fresh->release = nullptr;
}

void collectBlocks(nn::ModuleBase &m, std::vector<nn::ModuleBase *> &out) {
  for (const auto &[name, child] : m.children()) {
    if (m.isModuleList()) {
      out.push_back(child);
    } else {
      collectBlocks(*child, out);
    }
  }
}

bool within(const nn::ModuleBase *m, const nn::ModuleBase *root) {
  for (; m; m = m->parent()) {
    if (m == root) return true;
  }
  return false;
}

double clipSliceGradients(std::vector<ZeroUnit> &units, double maxNorm) {
  std::vector<Tensor> slices;
  for (const ZeroUnit &u : units) {
    if (u.slice.grad().defined()) slices.push_back(u.slice);
  }
  const Tensor local = get_total_norm(grads_of(slices));
  Tensor squares = local * local;
  all_reduce(squares, ReduceOp::sum);
  const double norm = std::sqrt(squares.item());
  if (maxNorm / (norm + 1e-6) < 1) {
    clip_grads_with_norm_(slices, maxNorm, Tensor::full({}, norm, DType::f64));
  }
  return norm;
}

} // namespace rcjit::dist::detail
