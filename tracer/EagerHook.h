// The eager kernels as the tensor runtime calls them: a hook that targets/eager installs.
//
// Why a hook: Tensor and the ops (tracer/) run each op eagerly, but the kernels live in
// targets/eager, a layer above (they use oneDNN and the collectives). The runtime declares
// the two entry points it needs here; targets/eager/Eager.cpp installs them when
// librcjit.so loads (both are in that library, and the slots are constant-initialized, so
// they are filled before any code outside the library runs). Device tensors still reach
// their DeviceBackend (tracer/DeviceBackend.h) through the eager entry point.
#pragma once
#include <vector>

#include <rcjit/Tensor.h>

#include "tracer/Graph.h"
#include "tracer/ShapeInference.h"

namespace rcjit::detail {

/// The eager target's entry points (targets/eager/Eager.h: eager::run, eager::copyInto,
/// eager::addInto, eager::embeddingBackwardInto).
struct EagerKernels {
  /// Computes `op` on `in` with attrs `a`; `out` is the validated result meta. Thread-safe.
  Tensor (*run)(OpKind op, const std::vector<Tensor> &in, const Attrs &a,
                const TensorMeta &out) = nullptr;
  /// Copies src into dst elementwise (same shape, any strides, dtypes converted; host
  /// tensors). Thread-safe for distinct destinations.
  void (*copyInto)(const Tensor &dst, const Tensor &src) = nullptr;
  /// acc += g in place (host tensors of one dtype; acc contiguous, g of its shape, any
  /// strides). Thread-safe for distinct accumulators.
  void (*addInto)(const Tensor &acc, const Tensor &g) = nullptr;
  /// Adds each row of `grad` into row ids[i] of acc, in place (acc a contiguous host
  /// [num, dim] f32 or f64 tensor; an id out of range throws before anything is written).
  void (*embeddingBackwardInto)(const Tensor &acc, const Tensor &grad, const Tensor &ids) = nullptr;
};

/// Installs the eager kernels (targets/eager, once, at library load). Thread-safe.
void installEagerKernels(const EagerKernels &kernels);

/// Runs one op eagerly through the installed kernels. Throws rcjit::Error when none are
/// installed (a broken build), and whatever the kernel throws.
Tensor runEager(OpKind op, const std::vector<Tensor> &in, const Attrs &a, const TensorMeta &out);
/// Copies src into dst through the installed kernels (see EagerKernels::copyInto).
void copyEager(const Tensor &dst, const Tensor &src);
/// acc += g through the installed kernels (see EagerKernels::addInto).
void addIntoEager(const Tensor &acc, const Tensor &g);
/// embedding_backward scattered into acc itself (see EagerKernels::embeddingBackwardInto).
void embeddingBackwardIntoEager(const Tensor &acc, const Tensor &grad, const Tensor &ids);

} // namespace rcjit::detail
