// OpKind and its table (name, category, arity, attrs, props), generated from Ops.def.
#pragma once
#include <cstdint>
#include <span>
#include <string_view>

namespace rcjit {

/// Which fields of Attrs an op uses.
enum AttrBit : uint32_t {
  kDims = 1u << 0,
  kDim = 1u << 1,
  kStart = 1u << 2,
  kEnd = 1u << 3,
  kStride = 1u << 4,
  kPadding = 1u << 5,
  kValue = 1u << 6,
  kEps = 1u << 7,
  kKeepdim = 1u << 8,
  kCausal = 1u << 9,
  kReduce = 1u << 10, // collectives: Attrs::reduce (sum, mean, max)
  kRoot = 1u << 11,   // broadcast: Attrs::root
  kWorld = 1u << 12,  // collectives: Attrs::world, the number of ranks the graph was made for
};
/// The highest AttrBit: loops over the bits run `bit <= kLastAttrBit`.
constexpr uint32_t kLastAttrBit = kWorld;

/// What the compiler may assume of an op: the props column of Ops.def (which says what each
/// flag means). cmake/OpCases.cmake knows these names too: a new flag goes there as well.
enum OpProp : uint32_t {
  kFloatOnly = 1u << 0, // defined on floating point only
  kPostOp = 1u << 1,    // fusible into a oneDNN library call as an eltwise post-op
};

enum class OpCategory : uint8_t {
  Source,
  Unary,
  Binary,
  Compare,
  Where,
  Reduce,
  Normalize,
  Matmul,
  Nn,
  View,
  Copy,
  Collective
};

enum class OpKind : uint8_t {
#define RCJIT_OP(name, cat, arity, attrs, props) name,
#include <rcjit/ir/Ops.def>
#undef RCJIT_OP
};

constexpr int kNumOps = 0
#define RCJIT_OP(name, cat, arity, attrs, props) +1
#include <rcjit/ir/Ops.def>
#undef RCJIT_OP
    ;

struct OpInfo {
  std::string_view name;
  OpCategory category;
  int arity;      // -1: variadic
  uint32_t attrs; // AttrBit mask
  uint32_t props; // OpProp mask
};

/// The row of the op table for `op`.
const OpInfo &opInfo(OpKind op);
inline std::string_view opName(OpKind op) { return opInfo(op).name; }
/// Whether `op` has every OpProp flag of `prop` (its Ops.def row). Thread-safe.
inline bool opHas(OpKind op, OpProp prop) { return (opInfo(op).props & prop) == prop; }
/// Looks an op up by its IR name; false when there is none.
bool opFromName(std::string_view name, OpKind &out);

/// Every op of `category`, in table order (a static table: thread-safe, never dangles).
std::span<const OpKind> opsOfCategory(OpCategory category);
/// Every op, in table order.
std::span<const OpKind> allOps();
/// The category's name as Ops.def spells it ("Unary").
std::string_view categoryName(OpCategory category);

} // namespace rcjit
