// A Program compiled for one target: what the jit layer (full mode, regional stages, graph-
// break segments) holds and runs, whichever target compiled it.
#pragma once
#include <cstddef>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <rcjit/Compile.h>
#include <rcjit/Tensor.h>

#include "targets/Program.h"

namespace rcjit {

class Executable {
public:
  virtual ~Executable() = default;
  /// Runs on `inputs` (args then captured tensors, already guarded: on the target's device,
  /// with the traced dtypes and layouts). Thread-safe.
  virtual std::vector<Tensor> run(const Tensor *const *inputs, size_t n) const = 0;
  /// The same, for a caller that no longer needs `inputs`: the target may reset each one
  /// after its last use, so that an input held nowhere else is freed during the run (a
  /// compiled backward drops its saved values as eager autograd does). By default it only
  /// runs.
  virtual std::vector<Tensor> runConsuming(std::vector<Tensor> &inputs) const {
    std::vector<const Tensor *> ptrs;
    for (const Tensor &t : inputs) ptrs.push_back(&t);
    return run(ptrs.data(), ptrs.size());
  }
  /// Runs like run(), except that each (output, input) pair of `into` asks for that output
  /// to be written straight into that input's storage (a whole step's update of a
  /// parameter or optimizer state), where the target can do so safely; the returned output
  /// then views the input's storage (it is the input tensor itself where the caller's
  /// argument is its only handle and it has no autograd state: a regional stage's dying
  /// input). By default it only runs.
  /// The outputs go into `outs` (emptied first): a caller that keeps it from call to call
  /// (a regional plan, once per stage) allocates nothing for it once it has grown. An empty
  /// `into` runs as run() does.
  virtual void runInto(const Tensor *const *inputs, size_t n,
                       const std::vector<std::pair<int, int>> &into,
                       std::vector<Tensor> &outs) const {
    (void)into;
    outs = run(inputs, n);
  }
  /// runInto() returning the outputs.
  std::vector<Tensor> runInto(const Tensor *const *inputs, size_t n,
                              const std::vector<std::pair<int, int>> &into) const {
    std::vector<Tensor> outs;
    runInto(inputs, n, into, outs);
    return outs;
  }
  virtual const Program &program() const = 0;
  /// The optimized LLVM IR when it was kept (output_code log, --dump llvm), else "".
  virtual const std::string &llvmIr() const = 0;
  /// Kernels served by the in-process memo or the compile cache instead of compiled.
  virtual int cacheHits() const = 0;
  /// How the program's library steps run, one line per step ("step 3: one oneDNN matmul
  /// made for 2 threads"), for explain(); "" when the target says nothing (or the program
  /// is symbolic: each size has its own).
  virtual std::string libraryNotes() const { return ""; }
};

/// How to compile a Program.
struct ExecutableOptions {
  Target target = Target::cpu;
  int device = 0;            // cuda: the device ordinal
  bool keepLlvmIr = false;   // keep the optimized LLVM IR
  bool keepAssembly = false; // cpu: keep the host assembly
  bool cudaGraphs = true;    // cuda: replay static programs as CUDA graphs
  bool autotune = false;     // cpu: time candidates per step on the first call (max_autotune)
  /// cpu: compile a fast first tier (library matmuls, a cheap LLVM pipeline) and the
  /// optimized program in the background (jit/Tiered.h; CompileOptions::tiered)
  bool tiered = false;
  bool quick = false; // cpu: this compile is the fast tier's: the cheap LLVM pipeline
  /// How many times one call runs this program (a regional stage that identical layers
  /// share: each of them): the fast tier weighs its kernels' work by it when it chooses
  /// which to vectorize, as a full program's identical layers add up.
  int runsPerCall = 1;
};

/// Compiles `p` for `o.target`; `moduleId` names the module. Throws rcjit::Error (for
/// cuda: when no GPU can be used, with the reason).
std::shared_ptr<Executable> compileProgram(Program p, const std::string &moduleId,
                                           const ExecutableOptions &o = {});

} // namespace rcjit
