// Library steps on the CPU: matmul and linear through a oneDNN primitive created once at
// compile time, with the step's bias and eltwise post-ops fused into the call; f32, and
// bf16 where oneDNN runs bf16 natively (AVX512-BF16, AMX).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "targets/Program.h"

namespace rcjit::detail {
struct Storage;
}

namespace rcjit::cpu {

/// One prepared library call. Thread-safe: concurrent runs use separate oneDNN memory
/// objects and scratchpads from a small pool.
class LibraryStep {
public:
  virtual ~LibraryStep() = default;
  /// Runs with the addresses of the step's operands (in op order) and its result.
  void run(char *const *operands, char *result) const { runWith(operands, result, nullptr); }
  /// As run(). `weight`: the storage that operand 1 (the weight) lives in, when it is a
  /// program input (a parameter), or null. A step that packs its weight (packsWeights())
  /// reorders it once into oneDNN's blocked layout and reuses that copy while the weight
  /// has the same address in the same storage at the same version (Tensor::copy_ and the
  /// optimizers bump it; a write through data_ptr() does not, as for autograd's saved
  /// values); with no storage it packs on every call.
  virtual void runWith(char *const *operands, char *result,
                       const std::shared_ptr<detail::Storage> *weight) const = 0;
  /// Whether runs keep a packed copy of the weight (see runWith).
  virtual bool packsWeights() const { return false; }
  /// Multiply-adds of one run (the executor's cost model for threads).
  virtual double macs() const = 0;
  /// How many independent blocks a run is cut into, each run by a one-thread primitive
  /// through the work pool (support/WorkPool.h); 1: one oneDNN call.
  virtual int blocks() const { return 1; }
  /// How a run goes, for explain(): one oneDNN call and the OpenMP threads its primitive was
  /// made for, or blocks on the work pool, and whether it reads a packed weight copy.
  virtual std::string describe() const = 0;

  /// A direct oneDNN call for `step` when its layouts allow one, else nullptr (the caller
  /// then runs it through the eager target). `sizeFree`: the program is specialized per
  /// size (symbolic dims), so a small GEMM uses one oneDNN primitive with runtime dims,
  /// shared by every size and program, instead of creating one per size (which costs far
  /// more than such a multiply).
  ///
  /// A large GEMM (2^20 multiply-adds or more) is cut into blocks run through the work
  /// pool (blocks()) when the pool has several threads and the calling thread's OpenMP
  /// count is above 1: a batched product by batches (also one whose batch dims do not
  /// collapse into one: per index of its first dim); a product whose weight is a program
  /// input into blocks of weight columns (4 per thread) over a row-major copy of the
  /// weight (packsWeights(), runWith; the weight itself when row-major already; until it
  /// is packed, and past the process's budget RCJIT_PACK_WEIGHTS_MAX_MB, one plain call on
  /// oneDNN's threads), or with many rows and few columns into one block of rows per
  /// thread over the packed copy, or with K and N >= 2048 not at all (oneDNN's threads);
  /// a product with fewer than 32 rows by weight columns; a runtime-dims product
  /// (`sizeFree`) by batches or rows; any other keeps oneDNN's own threads. Without a
  /// split (one thread), a product
  /// whose weight is a program input, with 32 rows or more, still reads a packed copy.
  /// On AVX-512 hosts without AMX (setPlainOperandSplits) a product with a long inner dim
  /// (at least 4096 and 8 times its rows and columns; no bias or post-op) runs as one block
  /// of the inner dim per pool thread, summed in f32 after, and a weight gradient's
  /// product (A transposed, B row-major, the weight not a program input; bf16 only with 8
  /// times more rows than its inner dim and columns) as one block of rows per pool thread
  /// over its plain operands.
  /// RCJIT_GEMM_SPLIT=off keeps oneDNN's own threads; rows, cols or batch force that split
  /// where it applies (for measurements); RCJIT_PACK_WEIGHTS=0 turns packing off.
  static std::unique_ptr<LibraryStep> create(const Program &p, const Step &step,
                                             bool sizeFree = false);
  /// Overrides RCJIT_PACK_WEIGHTS for steps created from now on (tests). Thread-safe.
  static void setPackWeights(bool on);
  /// Overrides the host's choice of running weights in [N, K] order with oneDNN's own threads
  /// (below AVX-512; createSplitOrPacked) for steps created from now on: 1 on, 0 off (the
  /// cost model's splits and packs, as on AVX-512), -1 the host decides (tests). Thread-safe.
  static void setNkWeights(int on);
  /// Overrides the host's choice of one call on oneDNN's own threads over a packed weight
  /// (AVX-512 and AMX hosts: its brgemm kernels; createSplitOrPacked) for steps created
  /// from now on: 1 on, 0 off (the column and row blocks), -1 the host decides (tests).
  /// Thread-safe.
  static void setWholePackedGemms(int on);
  /// Overrides the host's choice of the inner-dim split and of row blocks over a weight
  /// gradient's plain operands (AVX-512 hosts without AMX; see create()) for steps created
  /// from now on: 1 on, 0 off, -1 the host decides (tests). Thread-safe.
  static void setPlainOperandSplits(int on);
};

} // namespace rcjit::cpu
