// Tensor: factories, accessors, conversions and host access.
#include <cmath>
#include <cstring>

#include <rcjit/Ops.h>
#include <rcjit/Tensor.h>

#include "tracer/AutogradHook.h"
#include "tracer/CheckedSize.h"
#include "tracer/DeviceBackend.h"
#include "tracer/EagerHook.h"
#include "tracer/OpsInternal.h"
#include "tracer/ShapeInference.h"
#include "tracer/TensorImpl.h"
#include "tracer/Tracer.h"

namespace rcjit {

namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// A uniform double in (0, 1) for element i of stream (seed, lane).
double uniformAt(uint64_t seed, uint64_t i, uint64_t lane) {
  uint64_t h = splitmix64(splitmix64(seed * 2 + lane) ^ (i * 0xd1b54a32d192ed03ull));
  return (static_cast<double>(h >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

// Fills a new f64 tensor from gen(i) and converts it to dtype.
template <class Gen> Tensor generate(const Shape &shape, DType dtype, Gen gen) {
  Tensor t = detail::makeTensor(shape, DType::f64);
  double *p = t.data<double>();
  int64_t n = t.numel();
#pragma omp parallel for if (n > 65536)
  for (int64_t i = 0; i < n; ++i) p[i] = gen(static_cast<uint64_t>(i));
  if (dtype == DType::f64) return t;
  Tensor out = detail::makeTensor(shape, dtype);
  detail::copyEager(out, t);
  return out;
}

// A device tensor's values on the host (contiguous). A strided view copies the span of
// memory it covers, then gathers it on the host.
Tensor deviceToHost(const Tensor &t) {
  detail::DeviceBackend &dev = detail::deviceBackend(t.device());
  Tensor out = detail::makeTensor(t.shape(), t.dtype());
  if (t.numel() == 0) return out;
  const size_t size = dtypeSize(t.dtype());
  if (t.is_contiguous()) {
    dev.copyToHost(out.data_ptr(), t.data_ptr(), static_cast<size_t>(t.numel()) * size, t.device());
    return out;
  }
  const int64_t span = detail::spannedElements(t.shape(), t.strides());
  Tensor flat = detail::makeTensor({span}, t.dtype());
  dev.copyToHost(flat.data_ptr(), t.data_ptr(), static_cast<size_t>(span) * size, t.device());
  detail::copyEager(out, detail::makeView(flat, t.shape(), t.strides(), 0));
  return out;
}

} // namespace

namespace detail {
Tensor randUniform(const Shape &shape, uint64_t seed, double lo, double hi, DType dtype) {
  return generate(shape, dtype, [=](uint64_t i) { return lo + (hi - lo) * uniformAt(seed, i, 0); });
}
} // namespace detail

namespace {
Tensor fullNamed(const Shape &shape, double value, DType dtype, Device device, const char *name) {
  Attrs a;
  a.value = value;
  return detail::applySource(OpKind::full, shape, dtype, a, device, name);
}
} // namespace

Tensor Tensor::empty(Shape shape, DType dtype, Device device) {
  detail::checkedBytes(shape, dtype, "empty");
  try {
    return detail::makeTensor(shape, dtype, device);
  } catch (const detail::AllocationError &e) {
    throw detail::AllocationError(std::string("empty: ") + e.what());
  }
}
Tensor Tensor::zeros(Shape shape, DType dtype, Device device) {
  return fullNamed(shape, 0.0, dtype, device, "zeros");
}
Tensor Tensor::ones(Shape shape, DType dtype, Device device) {
  return fullNamed(shape, 1.0, dtype, device, "ones");
}
Tensor Tensor::full(Shape shape, double value, DType dtype, Device device) {
  return fullNamed(shape, value, dtype, device, "full");
}
Tensor Tensor::randn(Shape shape, uint64_t seed, DType dtype, Device device) {
  if (device.is_cuda()) return randn(std::move(shape), seed, dtype).to(device); // same values
  if (!isFloating(dtype)) {
    throw Error("randn: dtype must be floating, got " + std::string(dtypeName(dtype)));
  }
  return generate(shape, dtype, [=](uint64_t i) {
    double u1 = uniformAt(seed, i, 0), u2 = uniformAt(seed, i, 1);
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  });
}
Tensor Tensor::arange(int64_t n, DType dtype, Device device) {
  if (n < 0) throw Error("arange: n must be >= 0, got " + std::to_string(n));
  return detail::applySource(OpKind::arange, {n}, dtype, Attrs{}, device);
}

namespace {
template <class T> Tensor fromValues(const std::vector<T> &values, Shape shape, DType dtype) {
  const int64_t n = detail::checkedNumel(shape, "from_vector");
  if (n != static_cast<int64_t>(values.size())) {
    throw Error("from_vector: " + std::to_string(values.size()) + " values do not fill shape " +
                shapeStr(shape) + " (" + std::to_string(n) + " elements)");
  }
  Tensor t = detail::makeTensor(shape, dtype);
  if (n) std::memcpy(t.data_ptr(), values.data(), values.size() * sizeof(T));
  return t;
}
} // namespace

Tensor Tensor::from_vector(const std::vector<float> &values, Shape shape) {
  return fromValues(values, std::move(shape), DType::f32);
}
Tensor Tensor::from_vector(const std::vector<int64_t> &values, Shape shape) {
  return fromValues(values, std::move(shape), DType::i64);
}

Tensor Tensor::from_blob(void *data, Shape shape, DType dtype) {
  if (!data) throw Error("from_blob: data is null");
  auto impl = std::make_shared<detail::TensorImpl>();
  impl->storage = std::make_shared<detail::Storage>();
  impl->storage->data = data;
  impl->storage->nbytes = static_cast<size_t>(detail::checkedBytes(shape, dtype, "from_blob"));
  impl->strides = detail::contiguousStrides(shape);
  impl->shape = std::move(shape);
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

namespace {
const detail::TensorImpl &checked(const std::shared_ptr<detail::TensorImpl> &impl) {
  if (!impl) throw Error("use of an undefined Tensor (default-constructed)");
  return *impl;
}
} // namespace

const Shape &Tensor::shape() const { return checked(impl_).shape; }
const Shape &Tensor::strides() const { return checked(impl_).strides; }
int64_t Tensor::offset() const { return checked(impl_).offset; }
int Tensor::dim() const { return static_cast<int>(checked(impl_).shape.size()); }
int64_t Tensor::numel() const { return checked(impl_).numel(); }
DType Tensor::dtype() const { return checked(impl_).dtype; }
Device Tensor::device() const { return checked(impl_).storage->device; }
bool Tensor::is_contiguous() const {
  return detail::isContiguous(checked(impl_).shape, impl_->strides);
}
void *Tensor::data_ptr() const { return checked(impl_).ptr(); }
bool Tensor::sharesStorage(const Tensor &other) const {
  return impl_ && other.impl_ && impl_->storage == other.impl_->storage;
}
int64_t Tensor::size(int d) const {
  return shape()[static_cast<size_t>(detail::normalizeDim(d, dim(), "size"))];
}

void Tensor::hostAllocFailed(size_t elementBytes) const {
  const int64_t n = numel();
  char gib[32];
  std::snprintf(gib, sizeof gib, "%.1f GiB",
                static_cast<double>(n) * static_cast<double>(elementBytes) / (1 << 30));
  throw Error("to_vector: cannot allocate " + std::to_string(n) + " elements (" + gib +
              ") on the host for a tensor of shape " + shapeStr(shape()) + ": out of memory");
}

void Tensor::copyToHost(DType as, void *dst, const std::source_location &where) const {
  if (Tracer *tr = Tracer::current()) tr->hostRead("to_vector", *this, where);
  if (numel() == 0) return;
  if (device().is_cuda()) {
    deviceToHost(*this).copyToHost(as, dst, where);
    return;
  }
  if (as == dtype() && is_contiguous()) {
    std::memcpy(dst, data_ptr(), static_cast<size_t>(numel()) * dtypeSize(as));
    return;
  }
  detail::copyEager(from_blob(dst, shape(), as), *this);
}

double Tensor::item(const std::source_location &where) const {
  if (numel() != 1) {
    throw Error("item: expected a one-element tensor, got shape " + shapeStr(shape()));
  }
  if (Tracer *tr = Tracer::current()) tr->hostRead("item", *this, where);
  if (device().is_cuda()) return deviceToHost(*this).item(where);
  double v = 0;
  detail::copyEager(from_blob(&v, {}, DType::f64), detail::makeView(*this, {}, {}, offset()));
  return v;
}

Tensor Tensor::to(Device device) const {
  const Device from = this->device();
  if (device == from) return *this;
  if (Tracer *tr = Tracer::current()) tr->hostRead("to", *this, std::source_location());
  if (from.is_cuda() && device.is_cuda()) return deviceToHost(*this).to(device);
  if (from.is_cuda()) return deviceToHost(*this);
  Tensor src = is_contiguous() ? *this : cloneData();
  Tensor out = detail::makeTensor(shape(), dtype(), device);
  detail::deviceBackend(device).copyToDevice(
      out.data_ptr(), src.data_ptr(), static_cast<size_t>(numel()) * dtypeSize(dtype()), device);
  return out;
}
Tensor Tensor::to(DType dtype) const { return detail::castTo(*this, dtype); }
Tensor Tensor::contiguous() const { return rcjit::contiguous(*this); }
Tensor Tensor::reshape(Dims shape) const { return rcjit::reshape(*this, std::move(shape)); }

Tensor Tensor::clone() const {
  // traced: a recorded copy (a value of the graph, not a constant the trace would capture)
  // a value of the trace: a recorded copy (not a constant the trace would capture); a
  // tensor the trace has not seen (made on the host inside the function) is copied eagerly
  if (Tracer *tr = Tracer::current(); tr && tr->knows(*this))
    return detail::applyOp(OpKind::contiguous, {*this}, {});
  Tensor out = cloneData();
  if (!Tracer::current() && autograd::gradEnabled() && autograd::anyRequiresGrad({*this})) {
    autograd::recordOnTape(OpKind::contiguous, {*this}, {}, out); // differentiable, like PyTorch
  }
  return out;
}

Tensor Tensor::cloneData() const {
  if (device().is_cuda() && !is_contiguous()) {
    return detail::runEager(OpKind::contiguous, {*this}, {}, TensorMeta{dtype(), shape()});
  }
  Tensor out = detail::makeTensor(shape(), dtype(), device());
  if (device().is_cuda()) {
    detail::deviceBackend(device()).copyOnDevice(
        out.data_ptr(), data_ptr(), static_cast<size_t>(numel()) * dtypeSize(dtype()), device());
    return out;
  }
  detail::copyEager(out, *this);
  return out;
}

void Tensor::copy_(const Tensor &src) {
  if (src.shape() != shape()) {
    Shape b = src.shape();
    throw Error("copy_: source shape " + shapeStr(b) + " does not match destination shape " +
                shapeStr(shape()));
  }
  if (Tracer *tr = Tracer::current()) { // inside a compiled function: a recorded write
    tr->mutate(*this, src);
    return;
  }
  impl_->storage->version.fetch_add(1, std::memory_order_relaxed); // saved values go stale
  if (device().is_cpu()) {
    detail::copyEager(*this, src.device().is_cuda() ? deviceToHost(src) : src);
    return;
  }
  if (!is_contiguous()) {
    throw Error("copy_: the destination on " + device().str() +
                " is not contiguous (only contiguous GPU tensors can be written in place)");
  }
  Tensor s = src.to(device());
  if (s.dtype() != dtype())
    s = detail::runEager(OpKind::cast, {s}, {}, TensorMeta{dtype(), shape()});
  if (!s.is_contiguous()) s = s.clone();
  detail::deviceBackend(device()).copyOnDevice(
      data_ptr(), s.data_ptr(), static_cast<size_t>(numel()) * dtypeSize(dtype()), device());
}

bool allclose(const Tensor &a, const Tensor &b, double rtol, double atol) {
  Shape target;
  try {
    target = broadcastShapes(a.shape(), b.shape(), "allclose");
  } catch (const Error &) {
    return false;
  }
  Dims dims(target.begin(), target.end());
  std::vector<double> va = rcjit::expand(a, dims).to_vector<double>();
  std::vector<double> vb = rcjit::expand(b, dims).to_vector<double>();
  for (size_t i = 0; i < va.size(); ++i) {
    if (std::isnan(va[i]) || std::isnan(vb[i])) {
      if (std::isnan(va[i]) != std::isnan(vb[i])) return false;
      continue;
    }
    if (va[i] == vb[i]) continue; // equal infinities
    if (!(std::fabs(va[i] - vb[i]) <= atol + rtol * std::fabs(vb[i]))) return false;
  }
  return true;
}

} // namespace rcjit
