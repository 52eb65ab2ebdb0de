// The op table's rows, generated from Ops.def.
#include "tracer/OpKind.h"

#include <array>

namespace rcjit {

namespace {
constexpr std::array<OpInfo, kNumOps> kOpTable = {{
#define RCJIT_OP(name, cat, arity, attrs) {#name, OpCategory::cat, arity, attrs},
#include <rcjit/ir/Ops.def>
#undef RCJIT_OP
}};
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

} // namespace rcjit
