// Overflow-checked size arithmetic: every product of tensor sizes goes through here.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string_view>

#include <rcjit/Error.h>
#include <rcjit/Types.h>

namespace rcjit::detail {

/// The most bytes one tensor may span (2^62): offsets in bytes stay far from int64
/// overflow, and no machine has that much memory anyway.
inline constexpr int64_t kMaxTensorBytes = int64_t{1} << 62;

/// Thrown when memory for a tensor cannot be allocated (an rcjit::Error whose message
/// names the shape, dtype and bytes; the op entry points prefix the op's name).
class AllocationError : public Error {
public:
  using Error::Error;
};

/// a * b for sizes (both >= 0); throws an Error "<op>: <what> overflows ..." when the
/// product does not fit in int64.
int64_t checkedMul(int64_t a, int64_t b, std::string_view op, std::string_view what);

/// The element count of `shape`. Throws an Error naming `op` and the shape when a size is
/// negative or when the product of the non-zero sizes overflows int64 (so strides of any
/// dim fit too, even for a tensor with a 0-sized dim).
int64_t checkedNumel(const Shape &shape, std::string_view op);

/// The bytes of a row-major tensor of `shape` and `dtype` (checkedNumel times the element
/// size); throws an Error naming `op`, the shape and the bytes when they exceed
/// kMaxTensorBytes.
int64_t checkedBytes(const Shape &shape, DType dtype, std::string_view op);

} // namespace rcjit::detail
