// The fixed cache-entry secret shared by the cache entry harness and the seed generator.
#pragma once
#include <cstddef>
#include <cstdint>

#include "cache/EntryFormat.h"

namespace rcjit::fuzz {

inline cache::Secret fuzzSecret() {
  cache::Secret s{};
  for (size_t i = 0; i < s.size(); ++i) s[i] = static_cast<uint8_t>(0x5a ^ i);
  return s;
}

} // namespace rcjit::fuzz
