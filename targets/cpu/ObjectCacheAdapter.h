// Plugs rcjit's object cache (cache/, bytes only) into the CPU JIT as an llvm::ObjectCache.
#pragma once
#include <memory>

#include "targets/cpu/CpuJit.h"

namespace rcjit::cpu {

/// Installs the process-wide persistent object cache on `jit` and returns it. The cache
/// serves modules whose identifier is a content key (cache::contentKey); modules named
/// otherwise are compiled as before and never stored. Thread-safe; the adapter lives for the
/// whole process.
/// A cached object that fails structural validation (ObjectCheck.h) is evicted and the
/// module compiled afresh.
std::unique_ptr<CpuJit> withObjectCache(std::unique_ptr<CpuJit> jit);

/// Called when linking or looking up module `moduleId` failed with `why`: if its object
/// came from the cache, evicts it and returns true (the caller compiles the module again);
/// otherwise false. Thread-safe.
bool forgetCachedObject(const std::string &moduleId, const std::string &why);

} // namespace rcjit::cpu
