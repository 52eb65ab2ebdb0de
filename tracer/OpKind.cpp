// The op table's rows and its per-category op lists, generated from Ops.def.
#include "tracer/OpKind.h"

#include <array>
#include <cassert>

namespace rcjit {

namespace {
constexpr std::array<OpInfo, kNumOps> kOpTable = {{
#define RCJIT_OP(name, cat, arity, attrs, props) {#name, OpCategory::cat, arity, attrs, props},
#include <rcjit/ir/Ops.def>
#undef RCJIT_OP
}};

constexpr std::array<OpKind, kNumOps> kAllOps = {{
#define RCJIT_OP(name, cat, arity, attrs, props) OpKind::name,
#include <rcjit/ir/Ops.def>
#undef RCJIT_OP
}};

constexpr size_t kNumCategories = static_cast<size_t>(OpCategory::Collective) + 1;

// All ops ordered by category (a stable sort of the table), and where each category starts.
struct ByCategory {
  std::array<OpKind, kNumOps> ops{};
  std::array<size_t, kNumCategories + 1> begin{};
};

constexpr ByCategory byCategory() {
  ByCategory r;
  size_t k = 0;
  for (size_t c = 0; c < kNumCategories; ++c) {
    r.begin[c] = k;
    for (size_t i = 0; i < kOpTable.size(); ++i) {
      if (static_cast<size_t>(kOpTable[i].category) == c) r.ops[k++] = static_cast<OpKind>(i);
    }
  }
  r.begin[kNumCategories] = k;
  return r;
}

constexpr ByCategory kByCategory = byCategory();
static_assert(kByCategory.begin[kNumCategories] == kNumOps,
              "an op's category is past OpCategory::Collective: update kNumCategories");
} // namespace

const OpInfo &opInfo(OpKind op) { return kOpTable[static_cast<size_t>(op)]; }

bool opFromName(std::string_view name, OpKind &out) {
  for (size_t i = 0; i < kOpTable.size(); ++i) {
    if (kOpTable[i].name == name) {
      out = static_cast<OpKind>(i);
      return true;
    }
  }
  return false;
}

std::span<const OpKind> opsOfCategory(OpCategory category) {
  const auto c = static_cast<size_t>(category);
  return std::span<const OpKind>(kByCategory.ops)
      .subspan(kByCategory.begin[c], kByCategory.begin[c + 1] - kByCategory.begin[c]);
}

std::span<const OpKind> allOps() { return kAllOps; }

std::string_view categoryName(OpCategory category) {
  switch (category) {
  case OpCategory::Source:
    return "Source";
  case OpCategory::Unary:
    return "Unary";
  case OpCategory::Binary:
    return "Binary";
  case OpCategory::Compare:
    return "Compare";
  case OpCategory::Where:
    return "Where";
  case OpCategory::Reduce:
    return "Reduce";
  case OpCategory::Normalize:
    return "Normalize";
  case OpCategory::Matmul:
    return "Matmul";
  case OpCategory::Nn:
    return "Nn";
  case OpCategory::View:
    return "View";
  case OpCategory::Copy:
    return "Copy";
  case OpCategory::Collective:
    return "Collective";
  }
  assert(false && "categoryName: not an OpCategory");
  return "?";
}

} // namespace rcjit
