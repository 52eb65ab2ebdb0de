// Element types, devices, shapes and scalars: the small value types every tensor carries.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace rcjit {

/// Element type of a tensor. `boolean` is stored as one byte (0 or 1).
enum class DType : uint8_t { f32, f64, f16, bf16, i32, i64, boolean };

using Shape = std::vector<int64_t>;
using Dims = std::vector<int64_t>;

/// Bytes per element of `t`.
size_t dtypeSize(DType t);
/// "f32", "f64", "f16", "bf16", "i32", "i64", "bool".
std::string_view dtypeName(DType t);
/// Parses a name printed by dtypeName; throws rcjit::Error on an unknown name.
DType dtypeFromName(std::string_view name);
bool isFloating(DType t);
bool isIntegral(DType t); // i32, i64 (not bool)

/// Where a tensor's storage lives. Value type; cheap to copy.
struct Device {
  enum class Kind : uint8_t { cpu, cuda };
  Kind kind = Kind::cpu;
  int index = 0;
  static Device cpu() { return {}; }
  static Device cuda(int index = 0) { return {Kind::cuda, index}; }
  bool is_cuda() const { return kind == Kind::cuda; }
  bool is_cpu() const { return kind == Kind::cpu; }
  std::string str() const; // "cpu", "cuda:0"
  friend bool operator==(const Device &, const Device &) = default;
};

/// A number standing in for a tensor operand ("a wrapped number" in PyTorch's promotion
/// rules): an integral or a floating value. Implicit from the C++ arithmetic types.
class Scalar {
public:
  Scalar(double v) : f_(v), i_(0), isFloat_(true) {}  // NOLINT(google-explicit-constructor)
  Scalar(float v) : Scalar(static_cast<double>(v)) {} // NOLINT(google-explicit-constructor)
  Scalar(int v) : Scalar(static_cast<int64_t>(v)) {}  // NOLINT(google-explicit-constructor)
  Scalar(long v) : f_(static_cast<double>(v)), i_(v), isFloat_(false) {}      // NOLINT
  Scalar(long long v) : f_(static_cast<double>(v)), i_(v), isFloat_(false) {} // NOLINT
  Scalar(bool v) : Scalar(static_cast<int64_t>(v)) {} // NOLINT(google-explicit-constructor)
  bool isFloating() const { return isFloat_; }
  double toDouble() const { return f_; }
  int64_t toInt() const { return isFloat_ ? static_cast<int64_t>(f_) : i_; }

private:
  double f_;
  int64_t i_;
  bool isFloat_;
};

/// "[2, 3, 4]": used in every error message that names a shape.
std::string shapeStr(const Shape &s);

} // namespace rcjit
