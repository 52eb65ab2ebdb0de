// Shared pieces of the built-in model families: seeded weights, memory checks, inputs.
#pragma once
#include <cstdint>
#include <string>

#include <rcjit/rcjit.h>

namespace rcjit::tools {

struct ModelConfig;

/// Deterministic weights for one model: every call draws from the next per-parameter seed,
/// so a model built twice with the same seed (and construction order) has equal weights.
/// Values come from a counter-based hash (sum of four uniforms, scaled to the requested
/// standard deviation: bounded like a truncated normal) on up to 8 threads — far faster than
/// Tensor::randn, which makes building a 1B-parameter model a matter of seconds.
/// Not thread-safe; one instance per model build.
class ParamInit {
public:
  /// dtype must be f32 or bf16 (an rcjit::Error otherwise).
  ParamInit(uint64_t seed, DType dtype);
  DType dtype() const { return dtype_; }
  /// A new tensor of `shape` with mean 0 and standard deviation `stdev`.
  Tensor normal(const Shape &shape, double stdev = 0.02);
  Tensor zeros(const Shape &shape) const { return Tensor::zeros(shape, dtype_); }
  /// Gives `l` a weight [out, in] (normal) and, if it has one, a zero bias [out].
  void linear(nn::Linear &l, int64_t in, int64_t out, double stdev = 0.02);
  /// Gives `e` a weight [num, dim] (normal).
  void embedding(nn::Embedding &e, int64_t num, int64_t dim, double stdev = 0.02);
  /// Converts a norm's parameters (ones, zeros) to the model dtype.
  void norm(nn::RMSNorm &n) const;
  void norm(nn::LayerNorm &n) const;

private:
  uint64_t seed_;
  uint64_t counter_ = 0;
  DType dtype_;
};

/// Bytes of memory available for new allocations: MemAvailable of /proc/meminfo, or
/// INT64_MAX where that cannot be read.
int64_t availableMemoryBytes();
/// Throws an rcjit::Error naming `model` and both byte counts when `parameters` elements of
/// c.dtype do not fit in the available memory (c.memoryLimit when >= 0, else
/// availableMemoryBytes()). Called before anything is allocated.
void checkMemory(const std::string &model, int64_t parameters, const ModelConfig &c);
/// "1.24 GB" style rendering of a byte count (decimal units).
std::string formatBytes(int64_t bytes);
/// splitmix64's output function: a well-mixed 64-bit hash of x (the seeds of weights,
/// inputs and token streams).
uint64_t mix64(uint64_t x);
/// Token ids [batch, seq] (i64) uniformly in [0, vocab), deterministic in seed.
Tensor randomTokens(int64_t batch, int64_t seq, int64_t vocab, uint64_t seed);
/// [batch, seq, heads * headDim] -> [batch, heads, seq, headDim].
Tensor splitHeads(const Tensor &x, int64_t heads);
/// [batch, heads, seq, headDim] -> [batch, seq, heads * headDim].
Tensor mergeHeads(const Tensor &x);
/// Rotate-half RoPE tables cos and sin [seq, headDim] in dtype: frequency i of the
/// headDim/2 pairs is invFreq[i], position p's angle p * invFreq[i], repeated for both halves.
std::pair<Tensor, Tensor> ropeTables(const std::vector<double> &invFreq, int64_t seq, DType dtype);

} // namespace rcjit::tools
