// Mixed precision: rcjit::Autocast, the RAII scope in which matmul-like ops run in bf16.
#pragma once
#include <optional>

#include <rcjit/Types.h>

namespace rcjit {

/// RAII mixed-precision scope (torch.autocast). While one lives, ops on this thread run
/// matmul, linear, conv2d and scaled_dot_product_attention in `dtype` (their floating
/// inputs are cast down), and softmax, log_softmax, layer_norm, rms_norm, sum, mean and the
/// losses in f32 (reduced-precision inputs are cast up); every other op follows type
/// promotion (bf16 with f32 gives f32). Parameters and optimizer state stay in their own
/// dtype (the f32 master copy): the casts are ops with gradients, so a parameter's gradient
/// comes back in its dtype. Gradient rules run without autocast (the backward computes in
/// the dtypes the forward chose). A compiled function guards on the scope: an entry traced
/// inside one does not serve calls outside it, and the recompile says so. Scopes nest;
/// each restores the previous state. `dtype` must be bf16 or f16 (else an rcjit::Error).
struct Autocast {
  explicit Autocast(DType dtype = DType::bf16);
  /// `enabled` false: a scope without autocast inside an enclosing one (a region that
  /// must stay in f32).
  Autocast(DType dtype, bool enabled);
  ~Autocast();
  Autocast(const Autocast &) = delete;
  Autocast &operator=(const Autocast &) = delete;

private:
  std::optional<DType> prev_;
};

/// The reduced dtype of the innermost Autocast scope on this thread; nullopt outside one
/// (or in a disabled scope).
std::optional<DType> autocast_dtype();

} // namespace rcjit
