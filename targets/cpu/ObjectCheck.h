// Structural validation of object code before it is handed to the JIT linker.
#pragma once
#include <string>

namespace llvm {
class MemoryBufferRef;
class Triple;
} // namespace llvm

namespace rcjit::cpu {

/// Why `object` must not be linked for `target` ("" when it may): it must be a 64-bit
/// little-endian ELF relocatable for the target's architecture whose section headers,
/// section contents, symbols and relocations all lie within the file and refer to existing
/// sections and symbols, with a symbol table and some code or data. JITLink trusts much of
/// this and may crash on violations; a cached object that fails here is evicted and
/// recompiled. The code bytes themselves are not (and cannot be) checked: objects are
/// authenticated, not verified. Thread-safe.
std::string objectProblem(llvm::MemoryBufferRef object, const llvm::Triple &target);

} // namespace rcjit::cpu
