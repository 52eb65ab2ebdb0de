// The op table is public (include/rcjit/ir/OpKind.h); here it is, with internal helpers
// over it.
#pragma once
#include <rcjit/ir/OpKind.h>

namespace rcjit {

/// Whether `op` makes each element of its result from the same elements of its operands
/// (Unary, Binary, Compare, Where ops): what constant folding evaluates, and what a loop
/// kernel may compute again from its operands.
inline bool isElementwise(OpKind op) {
  switch (opInfo(op).category) {
  case OpCategory::Unary:
  case OpCategory::Binary:
  case OpCategory::Compare:
  case OpCategory::Where:
    return true;
  case OpCategory::Source:
  case OpCategory::Reduce:
  case OpCategory::Normalize:
  case OpCategory::Matmul:
  case OpCategory::Nn:
  case OpCategory::View:
  case OpCategory::Copy:
  case OpCategory::Collective:
    return false;
  }
  return false;
}

} // namespace rcjit
