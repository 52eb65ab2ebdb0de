// The eager target: runs one op on concrete tensors. The baseline and the fallback.
#pragma once
#include <vector>

#include <rcjit/Tensor.h>

#include "tracer/Graph.h"
#include "tracer/ShapeInference.h"

namespace rcjit::eager {

/// Computes `op` on `in` with attrs `a`; `out` is the result meta from inferMeta (already
/// validated). Ops on device tensors go to their device's backend (tracer/DeviceBackend.h). View
/// ops return views sharing storage; every other op returns a new contiguous tensor. Thread-safe.
Tensor run(OpKind op, const std::vector<Tensor> &in, const Attrs &a, const TensorMeta &out);

// The families run() dispatches to, one file each.
Tensor runElementwise(OpKind op, const std::vector<Tensor> &in, const TensorMeta &out);
Tensor runReduce(OpKind op, const Tensor &x, const Attrs &a, const TensorMeta &out);
Tensor runMatmul(OpKind op, const std::vector<Tensor> &in, const Attrs &a, const TensorMeta &out);
Tensor runNn(OpKind op, const std::vector<Tensor> &in, const Attrs &a, const TensorMeta &out);
/// conv2d_backward_input / conv2d_backward_weight (ConvBackward.cpp).
Tensor runConv2dBackward(OpKind op, const std::vector<Tensor> &in, const Attrs &a,
                         const TensorMeta &out);
/// check_target: throws cross_entropy's Error for a value outside [0, dims[0]) other than
/// dims[1]; else a copy of `target` (on the CPU) or `target` itself (a device tensor, read
/// back to the host for the check).
Tensor runCheckTarget(const Tensor &target, const Attrs &a);
/// embedding_backward with a base, written into the base: adds each row of `grad` into row
/// ids[i] of `acc` (a contiguous CPU [num, dim] f32 or f64 tensor, the base itself), so a
/// tied weight's two gradients need no third block for their sum. Throws like
/// embedding_backward for an id out of range, before writing anything.
void embeddingBackwardInto(const Tensor &acc, const Tensor &grad, const Tensor &ids);
/// linear_ce_pick and linear_ce_pick_backward (LinearCe.cpp).
Tensor runLinearCePick(OpKind op, const std::vector<Tensor> &in, const TensorMeta &out);
Tensor runShape(OpKind op, const std::vector<Tensor> &in, const Attrs &a, const TensorMeta &out);

/// Copies src into dst elementwise (same shape, any strides, dtypes converted).
void copyInto(const Tensor &dst, const Tensor &src);
/// acc += g elementwise, in place: host tensors of one dtype, acc contiguous, g of acc's
/// shape (any strides). Autograd sums a second gradient into the first's own block with it.
void addInto(const Tensor &acc, const Tensor &g);
/// t itself where it is contiguous and of dtype dt, else a contiguous copy converted to dt.
Tensor contiguousAs(const Tensor &t, DType dt);

} // namespace rcjit::eager
