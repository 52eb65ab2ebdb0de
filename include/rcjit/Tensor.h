// rcjit::Tensor: a strided view of reference-counted storage on a device.
#pragma once
#include <cstdint>
#include <cstring>
#include <memory>
#include <new>
#include <source_location>
#include <stdexcept>
#include <type_traits>
#include <vector>

#include <rcjit/Error.h>
#include <rcjit/Types.h>

namespace rcjit {

namespace detail {
struct TensorImpl;
template <class T> constexpr DType dtypeOf();
template <> constexpr DType dtypeOf<float>() { return DType::f32; }
template <> constexpr DType dtypeOf<double>() { return DType::f64; }
template <> constexpr DType dtypeOf<int32_t>() { return DType::i32; }
template <> constexpr DType dtypeOf<int64_t>() { return DType::i64; }
template <> constexpr DType dtypeOf<uint8_t>() { return DType::boolean; }
template <> constexpr DType dtypeOf<bool>() { return DType::boolean; }
} // namespace detail

/// A tensor: shape, strides (in elements), offset and dtype over shared storage.
///
/// Copying a Tensor copies a handle (like torch::Tensor): both refer to the same storage,
/// and views (reshape, permute, slice, ...) share storage too. A default-constructed Tensor
/// is undefined (`defined()` is false). Handles may be used from several threads as long as
/// no thread writes elements another reads.
class Tensor {
public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<detail::TensorImpl> impl) : impl_(std::move(impl)) {}

  // Factories. Storage on the CPU is 64-byte aligned; `empty` leaves it uninitialised.
  static Tensor empty(Shape shape, DType dtype = DType::f32, Device device = Device::cpu());
  static Tensor zeros(Shape shape, DType dtype = DType::f32, Device device = Device::cpu());
  static Tensor ones(Shape shape, DType dtype = DType::f32, Device device = Device::cpu());
  static Tensor full(Shape shape, double value, DType dtype = DType::f32,
                     Device device = Device::cpu());
  /// Standard normal values from a counter-based generator: the same seed gives the same
  /// values on every machine and thread count.
  static Tensor randn(Shape shape, uint64_t seed, DType dtype = DType::f32,
                      Device device = Device::cpu());
  static Tensor arange(int64_t n, DType dtype = DType::i64, Device device = Device::cpu());
  static Tensor from_vector(const std::vector<float> &values, Shape shape);   // copies
  static Tensor from_vector(const std::vector<int64_t> &values, Shape shape); // copies
  /// Wraps caller-owned CPU memory without copying; the caller keeps it alive (and
  /// contiguous, row-major) for as long as any Tensor refers to it.
  static Tensor from_blob(void *data, Shape shape, DType dtype);

  bool defined() const { return impl_ != nullptr; }
  const Shape &shape() const;
  const Shape &strides() const;
  int64_t offset() const;      // in elements, from the start of the storage
  int64_t size(int dim) const; // negative dims count from the end
  int dim() const;
  int64_t numel() const;
  DType dtype() const;
  Device device() const;
  bool is_contiguous() const;
  /// Address of element 0 (storage start + offset). CPU tensors only for host access.
  void *data_ptr() const;
  template <class T> T *data() const { return static_cast<T *>(data_ptr()); }
  /// True when both tensors view the same storage.
  bool sharesStorage(const Tensor &other) const;

  /// Copies the elements, converted to T, to a host vector in row-major order. Inside a
  /// traced function this is a host read (a graph break), logged with `where` (the caller's
  /// file and line). A vector too large for the host's memory is an rcjit::Error (its size).
  template <class T>
  std::vector<T>
  to_vector(const std::source_location &where = std::source_location::current()) const;
  /// The value of a one-element tensor as a double (a host read, like to_vector).
  double item(const std::source_location &where = std::source_location::current()) const;

  /// Copies unless already there. Not recorded for autograd (the copy is a new leaf).
  Tensor to(Device device) const;
  Tensor to(DType dtype) const; // converts unless already that dtype
  Tensor contiguous() const;    // copies only when not contiguous
  Tensor reshape(Dims shape) const;
  /// Always copies into new contiguous storage (recorded for autograd like an op).
  Tensor clone() const;
  /// Copies src's elements into this tensor (same shape; dtypes converted). Not recorded
  /// for autograd: it bumps the storage's version, so a value saved for a pending backward
  /// that it overwrites makes that backward an Error.
  void copy_(const Tensor &src);

  // Autograd (see rcjit/Autograd.h for grad mode, NoGradGuard and rcjit::grad).
  /// Marks a leaf whose gradient backward() accumulates into grad(). Only floating tensors
  /// can require gradients; a non-leaf (an op's result) cannot be switched off (detach() it).
  Tensor &requires_grad_(bool on = true);
  /// True for a leaf marked with requires_grad_ and for results recorded from one.
  bool requires_grad() const;
  /// True unless this tensor is the recorded result of an op (then it has a grad_fn).
  bool is_leaf() const;
  /// The gradient accumulated by backward() into this leaf; undefined before any (and
  /// after zero_grad()). The returned handle shares the gradient's storage.
  Tensor grad() const;
  /// Backpropagates from this tensor into every leaf it depends on, accumulating their
  /// grad(). `grad` (this tensor's shape) may be omitted for a one-element tensor. The saved
  /// values of the graph are freed afterwards unless retain_graph is true; a second
  /// backward through a freed graph is an Error. Not thread-safe for one graph.
  void backward(const Tensor &grad = Tensor(), bool retain_graph = false) const;
  /// A new handle on the same storage that is not part of any autograd graph.
  Tensor detach() const;

  /// The implementation, for rcjit's own components.
  const std::shared_ptr<detail::TensorImpl> &impl() const { return impl_; }

private:
  void copyToHost(DType as, void *dst, const std::source_location &where) const;
  /// to_vector's host buffer could not be allocated: an rcjit::Error with the size.
  [[noreturn]] void hostAllocFailed(size_t elementBytes) const;
  Tensor cloneData() const;
  std::shared_ptr<detail::TensorImpl> impl_;
};

template <class T> std::vector<T> Tensor::to_vector(const std::source_location &where) const {
  static_assert(std::is_arithmetic_v<T>, "to_vector<T>: T must be an arithmetic type");
  if constexpr (std::is_same_v<T, bool>) {
    std::vector<uint8_t> bytes = to_vector<uint8_t>(where);
    return std::vector<bool>(bytes.begin(), bytes.end());
  } else {
    std::vector<T> out;
    try {
      out.resize(static_cast<size_t>(numel()));
    } catch (const std::bad_alloc &) {
      hostAllocFailed(sizeof(T));
    } catch (const std::length_error &) {
      hostAllocFailed(sizeof(T));
    }
    copyToHost(detail::dtypeOf<T>(), out.data(), where);
    return out;
  }
}

/// True when a and b have broadcast-compatible shapes and every element differs by at
/// most atol + rtol*|b| (NaNs in the same places count as equal).
bool allclose(const Tensor &a, const Tensor &b, double rtol = 1e-5, double atol = 1e-6);

} // namespace rcjit
