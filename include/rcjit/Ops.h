// The tensor ops: free functions with NumPy broadcasting and PyTorch type promotion.
//
// Every op validates its inputs and throws rcjit::Error naming the op and the offending
// shapes or dtypes. Outside a traced function an op runs eagerly (the eager target);
// inside one it also records itself into the trace. All ops are thread-safe.
#pragma once
#include <vector>

#include <rcjit/Tensor.h>

namespace rcjit {

// elementwise, unary (float ops on integer inputs give f32, like PyTorch)
Tensor neg(const Tensor &x);
Tensor abs(const Tensor &x);
Tensor exp(const Tensor &x);
Tensor log(const Tensor &x);
Tensor sqrt(const Tensor &x);
Tensor rsqrt(const Tensor &x);
Tensor reciprocal(const Tensor &x);
Tensor tanh(const Tensor &x);
Tensor sigmoid(const Tensor &x);
Tensor relu(const Tensor &x);
Tensor gelu(const Tensor &x); // erf form
Tensor silu(const Tensor &x);
Tensor erf(const Tensor &x);
Tensor sin(const Tensor &x);
Tensor cos(const Tensor &x);

// elementwise, binary; a Scalar (any C++ number) may stand on either side
#define RCJIT_DECLARE_BINARY(name)                                                                 \
  Tensor name(const Tensor &a, const Tensor &b);                                                   \
  Tensor name(const Tensor &a, Scalar b);                                                          \
  Tensor name(Scalar a, const Tensor &b);
RCJIT_DECLARE_BINARY(add)
RCJIT_DECLARE_BINARY(sub)
RCJIT_DECLARE_BINARY(mul)
RCJIT_DECLARE_BINARY(div) // true division: integers divide to f32
RCJIT_DECLARE_BINARY(pow)
RCJIT_DECLARE_BINARY(maximum)
RCJIT_DECLARE_BINARY(minimum)
RCJIT_DECLARE_BINARY(eq) // comparisons give DType::boolean
RCJIT_DECLARE_BINARY(ne)
RCJIT_DECLARE_BINARY(lt)
RCJIT_DECLARE_BINARY(le)
RCJIT_DECLARE_BINARY(gt)
RCJIT_DECLARE_BINARY(ge)
#undef RCJIT_DECLARE_BINARY
/// Elementwise cond ? a : b, broadcasting all three; cond must be boolean.
Tensor where(const Tensor &cond, const Tensor &a, const Tensor &b);
Tensor where(const Tensor &cond, const Tensor &a, Scalar b);
Tensor where(const Tensor &cond, Scalar a, const Tensor &b);

Tensor operator+(const Tensor &a, const Tensor &b);
Tensor operator+(const Tensor &a, Scalar b);
Tensor operator+(Scalar a, const Tensor &b);
Tensor operator-(const Tensor &a, const Tensor &b);
Tensor operator-(const Tensor &a, Scalar b);
Tensor operator-(Scalar a, const Tensor &b);
Tensor operator*(const Tensor &a, const Tensor &b);
Tensor operator*(const Tensor &a, Scalar b);
Tensor operator*(Scalar a, const Tensor &b);
Tensor operator/(const Tensor &a, const Tensor &b);
Tensor operator/(const Tensor &a, Scalar b);
Tensor operator/(Scalar a, const Tensor &b);
Tensor operator-(const Tensor &x);

// reductions (empty dims = all dims)
Tensor sum(const Tensor &x, Dims dims = {}, bool keepdim = false);  // ints/bool sum to i64
Tensor mean(const Tensor &x, Dims dims = {}, bool keepdim = false); // floating only
Tensor amax(const Tensor &x, Dims dims = {}, bool keepdim = false);
Tensor argmax(const Tensor &x, int64_t dim, bool keepdim = false); // DType::i64
Tensor softmax(const Tensor &x, int64_t dim);
Tensor log_softmax(const Tensor &x, int64_t dim);

// linear algebra
/// Matrix product with NumPy semantics: 1-D operands are promoted and the added dim
/// removed; batch dims broadcast.
Tensor matmul(const Tensor &a, const Tensor &b);
/// x @ w^T + b with w [out, in]; b may be an undefined Tensor().
Tensor linear(const Tensor &x, const Tensor &w, const Tensor &b = Tensor());

// nn
/// Normalizes over the trailing w.dim() dims; w and b (b may be undefined) have those dims.
Tensor layer_norm(const Tensor &x, const Tensor &w, const Tensor &b, double eps);
Tensor rms_norm(const Tensor &x, const Tensor &w, double eps);
/// Rows of weight [num, dim] picked by integer ids: result shape ids.shape + [dim].
Tensor embedding(const Tensor &weight, const Tensor &ids);
/// The gradient of embedding's weight: rows of grad [..., dim] summed into row ids[...] of
/// a zero [num, dim] tensor (a scatter-add; embedding's gradient rule calls it). With
/// `base` ([num, dim], grad's dtype), the rows are summed into a copy of `base` instead:
/// base + embedding_backward(grad, ids, num) in one pass (a tied embedding's two
/// gradients).
Tensor embedding_backward(const Tensor &grad, const Tensor &ids, int64_t num,
                          const Tensor &base = Tensor());
/// softmax(q k^T / sqrt(head_dim) [+ causal mask]) v over [..., seq, head_dim] operands.
Tensor scaled_dot_product_attention(const Tensor &q, const Tensor &k, const Tensor &v, bool causal);
/// NCHW convolution, w [out, in, kh, kw]; b may be undefined.
Tensor conv2d(const Tensor &x, const Tensor &w, const Tensor &b, int64_t stride = 1,
              int64_t padding = 0);
/// conv2d's gradients (its gradient rule calls them): the gradient of the input x of shape
/// `x_shape` and of the weight of shape `w_shape` given grad, the gradient of conv2d's output.
Tensor conv2d_backward_input(const Tensor &grad, const Tensor &w, const Shape &x_shape,
                             int64_t stride = 1, int64_t padding = 0);
Tensor conv2d_backward_weight(const Tensor &grad, const Tensor &x, const Shape &w_shape,
                              int64_t stride = 1, int64_t padding = 0);

// shape (views share storage where the strides allow; reshape copies otherwise)
Tensor reshape(const Tensor &x, Dims shape); // -1 infers one dim
Tensor view(const Tensor &x, Dims shape);    // like reshape, but an Error if it must copy
Tensor permute(const Tensor &x, Dims order);
Tensor transpose(const Tensor &x, int64_t d0, int64_t d1);
Tensor unsqueeze(const Tensor &x, int64_t dim);
Tensor squeeze(const Tensor &x, int64_t dim);
Tensor expand(const Tensor &x, Dims shape); // size-1 dims broadcast; -1 keeps a dim
Tensor slice(const Tensor &x, int64_t dim, int64_t start, int64_t end);
Tensor cat(const std::vector<Tensor> &xs, int64_t dim);
Tensor contiguous(const Tensor &x);

// losses (composed of the ops above, so they fuse when compiled)
/// Mean over the targets that are not ignore_index of -log_softmax(logits)[target]; logits
/// [..., C] floating, target integer [...] with values in [0, C) or ignore_index. When every
/// target is ignored the result is NaN (0/0, like PyTorch) and the gradient is zero.
Tensor cross_entropy(const Tensor &logits, const Tensor &target, int64_t ignore_index = -100);
/// Mean of (input - target)^2 over the broadcast shape.
Tensor mse_loss(const Tensor &input, const Tensor &target);

} // namespace rcjit
