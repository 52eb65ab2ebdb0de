// oneDNN plumbing shared by the eager and compiled CPU targets: the engine, per-thread
// streams, a bounded primitive cache, and matmul / conv2d on strided tensor views.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include <oneapi/dnnl/dnnl.hpp>
#include <rcjit/Tensor.h>

namespace rcjit::eager {

/// A created primitive and what running it needs. `prim` is empty when oneDNN offers
/// nothing, or only its slow reference kernel, for the key: callers then retry with
/// operands in a layout or dtype it handles well. Immutable once cached.
struct DnnlPrimitive {
  dnnl::primitive prim;
  dnnl::memory::desc scratchpad;         // user-managed, allocated per call
  std::vector<dnnl::memory::desc> descs; // op-specific: the layouts the primitive expects
  bool usable() const { return static_cast<bool>(prim); }
};

/// The CPU engine and a bounded LRU cache of primitives keyed by op, dtypes, shapes and
/// strides. One per process; every member is thread-safe.
class DnnlContext {
public:
  using Key = std::vector<int64_t>;
  using Entry = std::shared_ptr<const DnnlPrimitive>;

  static DnnlContext &instance();
  const dnnl::engine &engine() const { return engine_; }
  /// This thread's stream on engine().
  dnnl::stream &stream();

  /// The entry cached under `key`, made by `create` on a miss (outside the lock, so two
  /// threads may both create; the first insert wins). Evicts the least recently used
  /// entry past capacity().
  Entry lookup(const Key &key, const std::function<DnnlPrimitive()> &create);
  /// Runs `p` on this thread's stream and waits, supplying a per-thread scratchpad.
  void execute(const DnnlPrimitive &p, std::unordered_map<int, dnnl::memory> args);

  size_t size() const;
  size_t capacity() const { return kCapacity; }
  /// Primitives created since the process started (cache misses); for tests.
  uint64_t created() const;
  void clear();

private:
  DnnlContext();
  struct KeyHash {
    size_t operator()(const Key &k) const;
  };
  using Lru = std::list<std::pair<Key, Entry>>;
  static constexpr size_t kCapacity = 512;

  dnnl::engine engine_;
  mutable std::mutex mutex_;
  Lru lru_; // most recently used first
  std::unordered_map<Key, Lru::iterator, KeyHash> index_;
  uint64_t created_ = 0;
};

/// The calling thread's buffer for one use: scratchpads of the primitives it runs, or a
/// weight it reorders for one call (the library steps' WeightPack::reorderNow). 64-byte
/// aligned, at least `bytes` long, grown on demand and kept until the thread ends; valid
/// until the thread's next call for the same use. Throws rcjit::Error when it cannot grow.
enum class ThreadBuffer { scratchpad = 0, reorderedWeight = 1 };
void *threadBuffer(ThreadBuffer which, size_t bytes);

/// out = a @ b (+ bias) through oneDNN. a is [..., M, K] and b [..., K, N] (ranks >= 2,
/// NumPy-broadcast batch dims); out is [..., M, N], the broadcast shape; bias, when given,
/// broadcasts to out's trailing [M, N] (typically [N]). Any strides; out must not overlap
/// the inputs. Every operand has one floating dtype among f32, bf16, f16: bf16 runs
/// natively where the CPU supports it, otherwise (and for f16) via f32 copies.
/// Thread-safe; primitives are cached per geometry.
void dnnlMatmul(const Tensor &a, const Tensor &b, const Tensor *bias, Tensor &out);

/// oneDNN's element type of `t`: f32, bf16, f16, or undef for the types oneDNN's float
/// primitives do not take.
dnnl::memory::data_type dnnlType(DType t);

/// Whether bf16 products run natively (oneDNN's ISA has avx512_core_bf16, or AMX), not in f32
/// over converted operands; RCJIT_BF16_MATMUL=f32|native overrides.
bool bf16MatmulsNative();

/// out = conv2d(x, w) (+ bias) through oneDNN: x [N, C, H, W], w [O, C, KH, KW], bias [O],
/// out [N, O, OH, OW] with symmetric `padding`. Floating dtypes; non-f32 run via f32
/// copies. Thread-safe.
void dnnlConv2d(const Tensor &x, const Tensor &w, const Tensor *bias, int64_t stride,
                int64_t padding, Tensor &out);

enum class ConvPass { forward, backwardData, backwardWeights };

/// A conv2d gradient through oneDNN's backward primitive, on f32 views of x [N, C, H, W], w
/// [O, C, KH, KW] and g [N, O, OH, OW] (the output's gradient): backwardData writes the
/// input's gradient into `x` from g and w, backwardWeights the weight's into `w` from x
/// and g. Thread-safe.
void dnnlConv2dBackward(ConvPass pass, const Tensor &x, const Tensor &w, const Tensor &g,
                        int64_t stride, int64_t padding);

} // namespace rcjit::eager
