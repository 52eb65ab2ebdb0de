// The inside of a Tensor: storage, shape, strides, offset, dtype and dynamic-dim marks.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include <rcjit/Tensor.h>

namespace rcjit::autograd {
struct AutogradMeta;
} // namespace rcjit::autograd

namespace rcjit::detail {

/// A block of device memory. Owns it unless it wraps caller memory (from_blob).
struct Storage {
  void *data = nullptr;
  size_t nbytes = 0;
  Device device;
  std::function<void(void *)> release; // empty: not owned
  /// Bumped by every in-place write (Tensor::copy_); autograd checks it on saved values.
  std::atomic<uint32_t> version{0};
  Storage() = default;
  Storage(const Storage &) = delete;
  Storage &operator=(const Storage &) = delete;
  ~Storage() {
    if (release) release(data);
  }
};

/// Allocates `nbytes` on `device` (64-byte aligned on the CPU). Throws rcjit::Error when
/// the device cannot be used or memory runs out.
std::shared_ptr<Storage> allocateStorage(size_t nbytes, Device device);
/// Takes `bytes` of live storage on `device` out of memory_stats (`idle`: a block held for
/// reuse, as the CPU block cache holds freed blocks) or puts it back (updating the peak).
void countIdle(Device device, int64_t bytes, bool idle);
/// Bytes of packed weight copies alive in this process (MemoryStats::packed_weight_bytes):
/// the CPU target adds a copy's bytes when it makes one and takes them away when it frees
/// it. Thread-safe (an atomic).
std::atomic<int64_t> &packedWeightBytes();

/// mark_dynamic / mark_static on one dim of a tensor.
struct DimMark {
  int dim = 0;
  bool dynamic = true; // false: mark_static
  int64_t min = 2;
  int64_t max = INT64_MAX;
};

struct TensorImpl {
  std::shared_ptr<Storage> storage;
  Shape shape;
  Shape strides;      // in elements
  int64_t offset = 0; // in elements
  DType dtype = DType::f32;
  std::vector<DimMark> marks;
  /// Autograd state (tracer/AutogradHook.h); null for tensors that never required grad.
  std::shared_ptr<autograd::AutogradMeta> autograd;

  char *ptr() const {
    return static_cast<char *>(storage->data) + offset * static_cast<int64_t>(dtypeSize(dtype));
  }
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t s : shape) n *= s;
    return n;
  }
};

/// Row-major strides for `shape`.
Shape contiguousStrides(const Shape &shape);
/// True when strides are row-major for shape (size-1 dims may have any stride).
bool isContiguous(const Shape &shape, const Shape &strides);
/// A new tensor with fresh contiguous storage on `device` (uninitialised).
Tensor makeTensor(const Shape &shape, DType dtype, Device device = Device::cpu());
/// A tensor of `shape` with no memory behind it (null data, not counted by memory_stats):
/// what a shape-only trace produces. Views of it share its storage; nothing may read or
/// write its elements (a host read aborts a shape-only trace first).
Tensor makeMetaTensor(const Shape &shape, DType dtype, Device device);
/// A view of `base`'s storage with the given geometry.
Tensor makeView(const Tensor &base, Shape shape, Shape strides, int64_t offset);
/// The elements a view of (shape, strides) at offset 0 reaches: 1 + the offset of its last
/// element, 0 when a dim is 0 (non-negative strides).
int64_t spannedElements(const Shape &shape, const Shape &strides);
/// Whether `t` is the only tensor on its storage, no other handle on it, from the storage's
/// start: memory a call holding `t` may write over once it no longer reads `t`.
inline bool heldAlone(const Tensor &t) {
  return t.defined() && t.impl().use_count() == 1 && t.impl()->offset == 0 &&
         t.impl()->storage.use_count() == 1;
}
/// Normalizes a possibly negative dim for a tensor of rank `rank`; throws an Error naming
/// `op` when out of range.
int64_t normalizeDim(int64_t dim, int64_t rank, const char *op);

} // namespace rcjit::detail

namespace rcjit::detail {
/// Strides that view (shape, strides) as newShape without copying (PyTorch's rule);
/// false when the layout needs a copy.
bool computeViewStrides(const Shape &shape, const Shape &strides, const Shape &newShape,
                        Shape &newStrides);
} // namespace rcjit::detail
