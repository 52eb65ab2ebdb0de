// Cache keys: a content hash of everything that shapes generated code, as a safe file name.
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace rcjit::cache {

/// "rcjit-" followed by the 32 hex digits of XXH3-128 over `parts` (each length-prefixed),
/// this rcjit's version and build id and the cache format version. Callers pass what else
/// changes the generated code (kernel text, target and host description). Thread-safe.
std::string contentKey(const std::vector<std::string_view> &parts);

/// Whether `key` has the form contentKey produces (so it is also a safe file name).
bool isContentKey(std::string_view key);

/// The GNU build id of the rcjit library (hex), or "" when the linker wrote none. Computed
/// once; thread-safe.
const std::string &buildId();

} // namespace rcjit::cache
