// Moves between a ZeRO unit's parameters and flat buffers, and freeing a parameter's memory
// in place while values saved for backward still refer to it.
#include "dist/ZeroUnits.h"

#include <cstring>

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

} // namespace rcjit::dist::detail
