// Where a lambda keeps a captured Tensor, so compiled calls read the variable, not a copy.
#pragma once
#include <cstddef>

#include <rcjit/Tensor.h>

namespace rcjit::detail {

/// The Tensor variable through which the callable object [fnObject, fnObject + fnBytes)
/// reaches `t`, or nullptr: a member of the object holding t's handle (a by-value capture),
/// or a Tensor that one of the object's pointer-sized words points to and that holds t's
/// handle (a by-reference capture, [&w] or [&]). Compiled calls then read the variable's
/// current tensor, so reassigning it is seen. Not found: tensors reached any other way (a
/// global, a member of a captured struct or container, a pointer chain). Candidate pointers
/// are read with process_vm_readv, so a word that is no pointer cannot fault. Thread-safe.
Tensor *findCapturedVariable(const Tensor &t, const void *fnObject, size_t fnBytes);

} // namespace rcjit::detail
