// Tensor geometry helpers: strides, contiguity, new tensors and views, dim normalization.
#include "tracer/TensorImpl.h"

#include <string>

#include "tracer/CheckedSize.h"

namespace rcjit::detail {

Shape contiguousStrides(const Shape &shape) {
  Shape strides(shape.size());
  int64_t s = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    strides[i] = s;
    s *= shape[i];
  }
  return strides;
}

bool isContiguous(const Shape &shape, const Shape &strides) {
  int64_t expected = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    if (shape[i] == 0) return true;
    if (shape[i] != 1 && strides[i] != expected) return false;
    expected *= shape[i];
  }
  return true;
}

Tensor makeTensor(const Shape &shape, DType dtype, Device device) {
  auto impl = std::make_shared<TensorImpl>();
  const int64_t bytes = checkedBytes(shape, dtype, "tensor");
  try {
    impl->storage = allocateStorage(static_cast<size_t>(bytes), device);
  } catch (const AllocationError &e) {
    throw AllocationError("cannot allocate a " + std::string(dtypeName(dtype)) +
                          " tensor of shape " + shapeStr(shape) + " (" + std::to_string(bytes) +
                          " bytes): " + e.what());
  }
  impl->shape = shape;
  impl->strides = contiguousStrides(shape);
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

Tensor makeMetaTensor(const Shape &shape, DType dtype, Device device) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::make_shared<Storage>();
  impl->storage->nbytes = static_cast<size_t>(checkedBytes(shape, dtype, "tensor"));
  impl->storage->device = device;
  impl->shape = shape;
  impl->strides = contiguousStrides(shape);
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

Tensor makeView(const Tensor &base, Shape shape, Shape strides, int64_t offset) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = base.impl()->storage;
  impl->shape = std::move(shape);
  impl->strides = std::move(strides);
  impl->offset = offset;
  impl->dtype = base.dtype();
  return Tensor(std::move(impl));
}

int64_t spannedElements(const Shape &shape, const Shape &strides) {
  int64_t span = 1;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 0) return 0;
    span += (shape[d] - 1) * strides[d];
  }
  return span;
}

int64_t normalizeDim(int64_t dim, int64_t rank, const char *op) {
  int64_t r = rank == 0 ? 1 : rank; // a 0-dim tensor accepts dim 0 and -1
  if (dim < -r || dim >= r) {
    throw Error(std::string(op) + ": dim " + std::to_string(dim) +
                " is out of range for a tensor of rank " + std::to_string(rank) + " (expected [" +
                std::to_string(-r) + ", " + std::to_string(r - 1) + "])");
  }
  return dim < 0 ? dim + r : dim;
}

bool computeViewStrides(const Shape &shape, const Shape &strides, const Shape &newShape,
                        Shape &newStrides) {
  int64_t numel = 1;
  for (int64_t d : shape) numel *= d;
  if (shape.empty() || numel == 0) {
    newStrides = contiguousStrides(newShape);
    return true;
  }
  newStrides.assign(newShape.size(), 1);
  int64_t viewD = static_cast<int64_t>(newShape.size()) - 1;
  int64_t chunkBaseStride = strides.back();
  int64_t tensorNumel = 1, viewNumel = 1;
  for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
    tensorNumel *= shape[d];
    if (d == 0 || (shape[d - 1] != 1 && strides[d - 1] != tensorNumel * chunkBaseStride)) {
      while (viewD >= 0 && (viewNumel < tensorNumel || newShape[viewD] == 1)) {
        newStrides[viewD] = viewNumel * chunkBaseStride;
        viewNumel *= newShape[viewD];
        --viewD;
      }
      if (viewNumel != tensorNumel) return false;
      if (d > 0) {
        chunkBaseStride = strides[d - 1];
        tensorNumel = 1;
        viewNumel = 1;
      }
    }
  }
  return viewD == -1;
}

} // namespace rcjit::detail
