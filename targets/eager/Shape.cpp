// Eager source and shape ops: full, arange, views (reshape, permute, expand, slice), cat.
#include <cstring>

#include "targets/eager/Eager.h"
#include "tracer/Half.h"
#include "tracer/OpCases.h"
#include "tracer/TensorImpl.h"

namespace rcjit::eager {

namespace {

template <class T> void fillWith(void *p, int64_t n, T v) {
  T *q = static_cast<T *>(p);
#pragma omp parallel for if (n > 65536)
  for (int64_t i = 0; i < n; ++i) q[i] = v;
}

void fill(const Tensor &t, double value) {
  int64_t n = t.numel();
  void *p = t.data_ptr();
  switch (t.dtype()) {
  case DType::f32:
    return fillWith(p, n, static_cast<float>(value));
  case DType::f64:
    return fillWith(p, n, value);
  case DType::f16:
    return fillWith(p, n, floatToHalf(static_cast<float>(value)));
  case DType::bf16:
    return fillWith(p, n, floatToBf16(static_cast<float>(value)));
  case DType::i32:
    return fillWith(p, n, static_cast<int32_t>(value));
  case DType::i64:
    return fillWith(p, n, static_cast<int64_t>(value));
  case DType::boolean:
    return fillWith(p, n, static_cast<uint8_t>(value != 0));
  }
}

Tensor arange(const TensorMeta &out) {
  int64_t n = out.shape.at(0);
  Tensor idx = detail::makeTensor(out.shape, DType::i64);
  int64_t *p = idx.data<int64_t>();
  for (int64_t i = 0; i < n; ++i) p[i] = i;
  if (out.dtype == DType::i64) return idx;
  Tensor r = detail::makeTensor(out.shape, out.dtype);
  copyInto(r, idx);
  return r;
}

Tensor reshape(const Tensor &x, const Shape &shape) {
  Shape strides;
  if (detail::computeViewStrides(x.shape(), x.strides(), shape, strides)) {
    return detail::makeView(x, shape, strides, x.offset());
  }
  Tensor c = detail::makeTensor(x.shape(), x.dtype(), x.device());
  copyInto(c, x);
  return detail::makeView(c, shape, detail::contiguousStrides(shape), 0);
}

Tensor permute(const Tensor &x, const Dims &order) {
  Shape shape, strides;
  for (int64_t d : order) {
    shape.push_back(x.shape()[d]);
    strides.push_back(x.strides()[d]);
  }
  return detail::makeView(x, shape, strides, x.offset());
}

Tensor expand(const Tensor &x, const Shape &shape) {
  size_t lead = shape.size() - x.shape().size();
  Shape strides(shape.size(), 0);
  for (size_t i = 0; i < x.shape().size(); ++i) {
    strides[lead + i] = x.shape()[i] == shape[lead + i] ? x.strides()[i] : 0;
  }
  return detail::makeView(x, shape, strides, x.offset());
}

Tensor slice(const Tensor &x, const Attrs &a) {
  Shape shape = x.shape();
  shape[a.dim] = a.end - a.start;
  return detail::makeView(x, shape, x.strides(), x.offset() + a.start * x.strides()[a.dim]);
}

Tensor cat(const std::vector<Tensor> &in, const Attrs &a, const TensorMeta &out) {
  Tensor r = detail::makeTensor(out.shape, out.dtype);
  int64_t at = 0;
  for (const Tensor &t : in) {
    int64_t n = t.shape()[a.dim];
    if (n == 0) continue;
    Shape shape = out.shape;
    shape[a.dim] = n;
    copyInto(detail::makeView(r, shape, r.strides(), at * r.strides()[a.dim]), t);
    at += n;
  }
  return r;
}

} // namespace

Tensor runShape(OpKind op, const std::vector<Tensor> &in, const Attrs &a, const TensorMeta &out) {
  switch (op) {
  case OpKind::full: {
    Tensor t = detail::makeTensor(out.shape, out.dtype);
    fill(t, a.value);
    return t;
  }
  case OpKind::arange:
    return arange(out);
  case OpKind::reshape:
    return reshape(in.at(0), out.shape);
  case OpKind::permute:
    return permute(in.at(0), a.dims);
  case OpKind::expand:
    return expand(in.at(0), out.shape);
  case OpKind::slice:
    return slice(in.at(0), a);
  case OpKind::cat:
    return cat(in, a, out);
  case OpKind::contiguous: {
    Tensor t = detail::makeTensor(out.shape, out.dtype);
    copyInto(t, in.at(0));
    return t;
  }
  case OpKind::input: // an argument: never run
    RCJIT_OP_CASES(Unary, Binary, Compare, Where, Reduce, Normalize, Matmul, Nn, Collective)
    break;
  }
  throw Error("eager: " + std::string(opName(op)) + " is not a shape op");
}

} // namespace rcjit::eager
