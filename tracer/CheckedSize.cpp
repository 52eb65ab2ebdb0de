// Overflow-checked size arithmetic (see CheckedSize.h).
#include "tracer/CheckedSize.h"

#include <cstdio>
#include <string>

namespace rcjit::detail {

namespace {

// An approximate product of the non-zero sizes, for messages about sizes too big for int64.
std::string approxProduct(const Shape &shape, double factor) {
  double p = factor;
  for (int64_t s : shape) {
    if (s > 0) p *= static_cast<double>(s);
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", p);
  return buf;
}

} // namespace

int64_t checkedMul(int64_t a, int64_t b, std::string_view op, std::string_view what) {
  int64_t r = 0;
  if (a < 0 || b < 0 || __builtin_mul_overflow(a, b, &r)) {
    throw Error(std::string(op) + ": " + std::string(what) + " " + std::to_string(a) + " * " +
                std::to_string(b) + " is negative or overflows int64");
  }
  return r;
}

int64_t checkedNumel(const Shape &shape, std::string_view op) {
  int64_t nonZero = 1;
  bool empty = false;
  for (int64_t s : shape) {
    if (s < 0) {
      throw Error(std::string(op) + ": negative size in shape " + shapeStr(shape));
    }
    if (s == 0) {
      empty = true;
    } else if (__builtin_mul_overflow(nonZero, s, &nonZero)) {
      throw Error(std::string(op) + ": shape " + shapeStr(shape) + " has about " +
                  approxProduct(shape, 1) + " elements, more than int64 can count");
    }
  }
  return empty ? 0 : nonZero;
}

int64_t checkedBytes(const Shape &shape, DType dtype, std::string_view op) {
  int64_t n = checkedNumel(shape, op);
  int64_t bytes = 0;
  const auto size = static_cast<int64_t>(dtypeSize(dtype));
  if (__builtin_mul_overflow(n, size, &bytes) || bytes > kMaxTensorBytes) {
    throw Error(std::string(op) + ": a " + std::string(dtypeName(dtype)) + " tensor of shape " +
                shapeStr(shape) + " needs about " +
                approxProduct(shape, static_cast<double>(size)) +
                " bytes, more than the 2^62 bytes a tensor may span");
  }
  return bytes;
}

} // namespace rcjit::detail
