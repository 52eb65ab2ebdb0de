// Checks an op's inputs and computes its output dtype and shape: shared by eager and trace.
#pragma once
#include <vector>

#include <rcjit/Types.h>

#include "tracer/Graph.h"

namespace rcjit {

/// dtype and concrete shape of a value.
struct TensorMeta {
  DType dtype = DType::f32;
  Shape shape;
};

/// Validates the inputs of `op` (count, dtypes, shapes, attrs) and returns the result's
/// dtype and shape. Inputs of Binary/Compare/Where ops must already share one dtype (the
/// public ops insert casts). Throws rcjit::Error naming the op and the shapes/dtypes.
TensorMeta inferMeta(OpKind op, const std::vector<TensorMeta> &in, const Attrs &a);

/// NumPy broadcast of two shapes; throws an Error naming `op` when incompatible.
Shape broadcastShapes(const Shape &a, const Shape &b, const char *op);

/// PyTorch's result_type for a binary op's operands; `aScalar`/`bScalar` mark wrapped
/// numbers, and 0-dim tensors rank below dimensioned ones.
DType promoteTypes(DType a, bool aZeroDim, bool aScalar, DType b, bool bZeroDim, bool bScalar);

} // namespace rcjit
