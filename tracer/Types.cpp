// DType names and sizes, Device names, shape formatting.
#include <rcjit/Error.h>
#include <rcjit/Types.h>

#include <array>
#include <string>

namespace rcjit {

namespace {
struct DTypeRow {
  DType type;
  std::string_view name;
  size_t size;
};
constexpr std::array<DTypeRow, 7> kDTypes = {{{DType::f32, "f32", 4},
                                              {DType::f64, "f64", 8},
                                              {DType::f16, "f16", 2},
                                              {DType::bf16, "bf16", 2},
                                              {DType::i32, "i32", 4},
                                              {DType::i64, "i64", 8},
                                              {DType::boolean, "bool", 1}}};
} // namespace

size_t dtypeSize(DType t) { return kDTypes[static_cast<size_t>(t)].size; }
std::string_view dtypeName(DType t) { return kDTypes[static_cast<size_t>(t)].name; }

DType dtypeFromName(std::string_view name) {
  for (const DTypeRow &row : kDTypes) {
    if (row.name == name) return row.type;
  }
  throw Error("unknown dtype '" + std::string(name) +
              "' (expected one of f32, f64, f16, bf16, i32, i64, bool)");
}

bool isFloating(DType t) {
  return t == DType::f32 || t == DType::f64 || t == DType::f16 || t == DType::bf16;
}
bool isIntegral(DType t) { return t == DType::i32 || t == DType::i64; }

std::string Device::str() const {
  return is_cuda() ? "cuda:" + std::to_string(index) : std::string("cpu");
}

std::string shapeStr(const Shape &s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) {
    if (i) out += ", ";
    out += std::to_string(s[i]);
  }
  return out + "]";
}

} // namespace rcjit
