// Guards: what a compiled entry assumed about its inputs, checked cheaply on every call.
//
// Built once from the example inputs of a trace; checking is a flat loop over
// precomputed arrays (no allocation, no strings). Explaining a failure builds the message
// ("input 0 dim 1: expected 128, got 77") only when asked.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <rcjit/Tensor.h>

#include "tracer/Graph.h"

namespace rcjit {

/// "[2, inf]": a symbol's range as guards and logs print it (INT64_MAX is "inf").
std::string rangeString(int64_t min, int64_t max);

/// What one dim of a guarded tensor must be.
struct DimGuard {
  int64_t size = 0; // static size (when sym < 0)
  int32_t sym = -1; // symbolic: any size in [min, max]
  int64_t min = 0;
  int64_t max = 0;
  int64_t stride = 0; // required stride (static layouts); ignored for size-1 dims
  bool checkStride = true;
};

/// Guards for one input (argument or captured tensor).
struct TensorGuard {
  std::string label;          // "arg 0", "captured 3 (layers.0.linear1.weight)"
  const void *impl = nullptr; // identity at trace time (captured tensors): passes at once
  DType dtype = DType::f32;
  Device device;
  std::vector<DimGuard> dims;
  bool contiguous = false; // has symbolic dims: strides must be row-major for its sizes
  bool requiresGrad = false; // grad mode on and the tensor requires grad (a training entry)
};

/// The guard set of one cache entry. Immutable after construction; thread-safe to check.
class GuardSet {
public:
  GuardSet() = default;
  /// Static guards for `inputs` (args then captured tensors), labelled by `labels`.
  /// Inputs from index `identityFrom` on also get an identity shortcut: the caller must
  /// keep those tensors alive as long as the GuardSet (so their address is not reused).
  static GuardSet fromInputs(const std::vector<Tensor> &inputs,
                             const std::vector<std::string> &labels, size_t identityFrom);

  /// Makes dim `dim` of input `input` symbol `sym` with range [min, max]: any size in the
  /// range passes, every dim of the same symbol must have the same size, and the input's
  /// strides must be row-major (compiled code computes them from the sizes).
  void makeSymbolic(int input, int dim, int sym, int64_t min, int64_t max);

  /// True when every input passes. `inputs` are args then captured tensors, `n` of them.
  bool check(const Tensor *const *inputs, size_t n) const;
  /// The first failing guard as "arg 0 dim 1: expected 128, got 77"; "" when all pass.
  std::string firstFailure(const Tensor *const *inputs, size_t n) const;
  /// Every failing guard, one per line.
  std::string allFailures(const Tensor *const *inputs, size_t n) const;
  /// Readable listing of every guard.
  std::string print() const;

  const std::vector<TensorGuard> &tensors() const { return tensors_; }
  std::vector<TensorGuard> &mutableTensors() { return tensors_; }

  /// The Autocast dtype the entry was traced under (-1: none); calls must match it.
  int autocast() const { return autocast_; }
  /// The entry's graph holds collectives made for a world of `world` ranks: calls must come
  /// from a job of that size (dist::world_size()). The rank is not guarded: every rank of a
  /// job shares one compiled entry.
  void requireWorldSize(int world) { world_ = world; }
  /// The world size guarded, or 0 when the entry holds no collective.
  int worldSize() const { return world_; }
  /// Number of symbols (0 for a static guard set).
  int numSymbols() const { return static_cast<int>(symbolAt_.size()); }

private:
  template <bool explain>
  std::string checkAll(const Tensor *const *inputs, size_t n, bool all) const;

  std::vector<TensorGuard> tensors_;
  int autocast_ = -1; // detail::autocastCode() at trace time
  int world_ = 0;     // > 0: the graph's collectives were made for this world size
  std::vector<std::string> symbolAt_; // per symbol: "arg 0 dim 1", where it is first read
};

} // namespace rcjit
