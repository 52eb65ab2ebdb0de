// Library steps on the CPU: matmul and linear through a oneDNN primitive created once at
// compile time, with the step's bias and eltwise post-ops fused into the call.
#pragma once
#include <memory>
#include <vector>

#include "targets/Program.h"

namespace rcjit::cpu {

/// One prepared library call. Thread-safe: concurrent runs use separate oneDNN memory
/// objects and scratchpads from a small pool.
class LibraryStep {
public:
  virtual ~LibraryStep() = default;
  /// Runs with the addresses of the step's operands (in op order) and its result.
  virtual void run(char *const *operands, char *result) const = 0;
  /// Multiply-adds of one run (the executor's cost model for threads).
  virtual double macs() const = 0;
  /// How many independent blocks a run is cut into, each run by a one-thread primitive
  /// through the work pool (support/WorkPool.h); 1: one oneDNN call.
  virtual int blocks() const { return 1; }

  /// A direct oneDNN call for `step` when its layouts allow one, else nullptr (the caller
  /// then runs it through the eager target). `sizeFree`: the program is specialized per
  /// size (symbolic dims), so a small GEMM uses one oneDNN primitive with runtime dims,
  /// shared by every size and program, instead of creating one per size (which costs far
  /// more than such a multiply).
  static std::unique_ptr<LibraryStep> create(const Program &p, const Step &step,
                                             bool sizeFree = false);
};

} // namespace rcjit::cpu
