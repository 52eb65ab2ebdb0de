// A Program compiled for the CPU: JIT-compiled kernels, prepared oneDNN calls, and the
// executor that runs the steps over a reusable scratch arena.
#pragma once
#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include <rcjit/Tensor.h>

#include "targets/Executable.h"
#include "targets/Program.h"
#include "targets/ProgramRun.h"
#include "targets/cpu/LibraryStep.h"

namespace rcjit::cpu {

struct CpuProgramOptions {
  bool keepLlvmIr = false;   // keep the optimized LLVM IR (output_code log, --dump llvm)
  bool keepAssembly = false; // keep the host assembly (--dump asm)
  /// max_autotune: the first call at each set of sizes times every kernel on one thread and
  /// on all, and every oneDNN step with a primitive made for all threads and one made for
  /// one, on the call's real inputs, and keeps the fastest per step; the choice is stored
  /// in the cache (memory and disk) under the program's text, sizes and host, so a later
  /// compile of the same program skips the timing.
  bool autotune = false;
  /// The fast tier (jit/Tiered.h): kernels through the cheap LLVM pipeline (CpuJit), keyed
  /// apart from the optimized ones in the memo and the object cache.
  bool quick = false;
  /// How many times a call runs the program (ExecutableOptions::runsPerCall).
  int runsPerCall = 1;
};

class CpuProgram;

/// Defers the loop-kernel code generation of the CpuPrograms created on this thread, while
/// the outermost open batch lives, to its finish(): there the modules of all of them compile
/// concurrently on the work pool. Each program's new kernels (those neither in the kernel
/// memo nor in an earlier program of the batch) are cut into modules as its own compile
/// would cut them, so the object cache's keys are the ones a compile outside a batch (a
/// tiered optimized tier's, on the background thread) makes. A regional plan opens one
/// around its stages: a stage's program is needed (its output strides key the next stage)
/// before its code is, so without the batch a small stage's one module (gpt2's embedding)
/// compiled alone on one core before the next stage's could start (docs/first-call.md,
/// "Regional against full").
/// A program created in a batch must not run before finish() returns (it throws
/// rcjit::Error if it does); one whose batch ends without finish() (an exception) never
/// runs. Programs that keep their LLVM IR or assembly compile at once. Not thread-safe:
/// one thread's scope; batches on other threads are their own.
class KernelBatch {
public:
  KernelBatch();
  ~KernelBatch();
  KernelBatch(const KernelBatch &) = delete;
  KernelBatch &operator=(const KernelBatch &) = delete;
  /// Compiles the deferred kernels and completes their programs (an inner batch: nothing,
  /// its outermost one does). Returns the kernels compiled and the seconds it took (0, 0
  /// for an inner batch or none deferred). Throws rcjit::Error as CpuProgram::create would.
  std::pair<size_t, double> finish();
  struct State; // the deferred kernels and the programs waiting on them (KernelCompile.cpp)

private:
  State *state_ = nullptr; // null for an inner batch
};

/// Immutable once created; run() is thread-safe (each concurrent call gets its own arena
/// from a pool, so steady-state calls allocate nothing but their outputs; an arena in the
/// pool is not counted by memory_stats, like the block cache's blocks). Output buffers are
/// allocated at the step that first writes them, not when the call starts.
class CpuProgram final : public Executable {
public:
  /// Compiles `p`'s kernels and prepares its library calls. `moduleId` names the LLVM
  /// module (the object-cache key). Throws rcjit::Error.
  static std::shared_ptr<CpuProgram> create(Program p, const std::string &moduleId,
                                            const CpuProgramOptions &opts = {});
  ~CpuProgram() override;

  /// Runs the program on `inputs` (args then captured tensors, already guarded). A symbolic
  /// program reads its sizes from the inputs and runs the sizes' specialization (values,
  /// arena plan, oneDNN primitives), made on first use and kept for later calls.
  std::vector<Tensor> run(const Tensor *const *inputs, size_t n) const override;
  std::vector<Tensor> runConsuming(std::vector<Tensor> &inputs) const override;
  /// An output of `into` is written in place of its input when it is the whole of its own
  /// output buffer, first written by a kernel, the input is no output's, and either no step
  /// reads the input from that kernel on and only kernel and library steps read it before (a
  /// regional stage's result over the stage output it read), or that kernel is the input's
  /// last reader and is purely elementwise, reading the input only at the index it writes
  /// and loading it before storing (a whole step's update over its parameter).
  using Executable::runInto;
  void runInto(const Tensor *const *inputs, size_t n, const std::vector<std::pair<int, int>> &into,
               std::vector<Tensor> &outs) const override;

  const Program &program() const override { return program_; }
  const std::string &llvmIr() const override { return llvmIr_; }
  const std::string &assembly() const { return assembly_; }
  int cacheHits() const override { return cacheHits_; }
  std::string libraryNotes() const override;

private:
  friend class KernelBatch;
  struct Arena; // a call's scratch memory and per-buffer vectors (CpuCall.h)
  // The program at one assignment of its symbols: concrete values, buffers and arena plan,
  // and the library calls prepared for those shapes.
  struct Spec {
    std::vector<int64_t> syms;
    Program layout;                                    // no kernels
    std::vector<std::unique_ptr<LibraryStep>> library; // per step; null = eager path
    std::vector<std::vector<int>> outputsAt;           // per step: output buffers it opens
    std::vector<std::vector<int>> inputsDone;          // per step: inputs used last there
    std::vector<std::vector<int>> dynamicDone;         // per step: dynamic buffers freed after it
    std::vector<std::vector<int>> largeAt;             // per step: large buffers allocated there
    std::vector<int> outputOver;                       // per buffer: outputsOverDying
    std::vector<char> intoBase;                        // per step: eagerIntoBase
    // max_autotune's choice per step: 0 the default heuristic, 1 one thread, n n threads;
    // written once (under tuneMu) before `tuned` is set, read-only after
    mutable std::mutex tuneMu;
    mutable std::atomic<bool> tuned{false};
    mutable std::vector<int> threads;
    mutable std::vector<std::unique_ptr<LibraryStep>> serialLibrary; // one-thread primitives
    std::vector<int> defaultThreads; // per step: 1 where the cost model says one thread
    std::vector<int> runs;           // per step: end of the steps run with it as one pool job
    // per kernel step: its outer points and element operations at these sizes (0 for
    // other steps); per value: its byte offset in its buffer
    std::vector<int64_t> kernelOuter, kernelWork, valueBytes;
    // the address of value `v` in a call whose buffers start at `bases`
    char *address(char *const *bases, int v) const {
      return bases[layout.values[static_cast<size_t>(v)].buffer] +
             valueBytes[static_cast<size_t>(v)];
    }
    // the input buffers, and the output and dynamic ones (which a call binds as it opens
    // them): what a call binds again in an arena that its last call bound for this spec
    std::vector<int> inputBuffers, openedBuffers;
    bool hasCollectives = false; // a collective start step (their handles are kept per call)
    bool hasDynamic = false;     // a dynamic buffer (a call's `dynamic` tensors are indexed)
    // runInto: per buffer, the input an output buffer is written into (-1: none), and the
    // launch runs under it, for one `into` list
    struct IntoPlan {
      std::vector<std::pair<int, int>> key;
      std::vector<int> alias, runs, over; // over: outputsOverDying under alias
    };
    // the plans of the first kMaxIntoPlans lists asked for, kept as long as the spec (a
    // call reads the one it finds without a lock); the last one used is `intoLast`
    static constexpr size_t kMaxIntoPlans = 16;
    mutable std::mutex intoMu;
    mutable std::vector<std::unique_ptr<const IntoPlan>> intoPlans;
    mutable std::atomic<const IntoPlan *> intoLast{nullptr};
  };
  struct Tuner;
  class Call; // one call's frame: buffers bound, steps run, outputs collected (CpuCall.cpp)
  // One call's arguments.
  struct CallArgs {
    const Tensor *const *inputs = nullptr;
    size_t n = 0;
    // the inputs themselves, reset after their last use (runConsuming), or null
    Tensor *consumed = nullptr;
    // the call's symbol values and their spec where the caller looked them up already
    // (runInto; it holds the spec for the call), or null for the call to look them up
    const int64_t *syms = nullptr;
    const Spec *spec = nullptr;
    // per buffer, the input whose storage an output buffer is (runInto), or null
    const std::vector<int> *alias = nullptr;
    // per step, the end of its launch run (launchRuns), or null for the spec's own
    const std::vector<int> *runs = nullptr;
    // per buffer, the dynamic buffer an output is written over (outputsOverDying), or null
    // for the spec's own
    const std::vector<int> *over = nullptr;
  };
  // Runs one call; its outputs go into `outs` (emptied first).
  void runImpl(const CallArgs &args, std::vector<Tensor> &outs) const;
  // Fills kernels_, code_, cacheHits_ and the kept LLVM IR and assembly for `p`
  // (KernelCompile.cpp): from the kernel memo, compiled now, or in an open KernelBatch at its
  // finish() (awaitingBatch_ until then).
  static void compileKernelsOf(const std::shared_ptr<CpuProgram> &cp, const Program &p,
                               const std::string &moduleId, const CpuProgramOptions &opts);
  // `costModel`: small oneDNN steps get a one-thread primitive and run on the calling
  // thread (max_autotune measures instead)
  static std::shared_ptr<const Spec> makeSpec(const Program &p, const int64_t *syms,
                                              bool costModel);
  std::unique_ptr<Arena> acquireArena(int64_t bytes) const;
  void releaseArena(std::unique_ptr<Arena> a) const;
  // step i of `spec`; `threads`: 0 the default heuristic, else that many threads (at most
  // the outer size)
  void runKernel(const Spec &spec, size_t i, char *const *bases, const int64_t *syms,
                 int threads = 0) const;
  // steps [first, last) of a launch run: one job of the work pool, each chunk its share of
  // the run's total work, member by member
  void runKernels(const Spec &spec, size_t first, size_t last, char *const *bases,
                  const int64_t *syms) const;
  void runLibrary(const Spec &spec, size_t i, char *const *operands, char *result, int threads,
                  const Tensor *const *inputs) const;
  // max_autotune: the cache key of `spec`'s choices, and reading them back
  std::string tuningKey(const Spec &spec) const;
  bool loadTuning(const Spec &spec) const;

  Program program_;
  std::string moduleId_;
  bool autotune_ = false;
  std::vector<KernelFn> kernels_;
  std::vector<std::shared_ptr<const void>> code_; // the modules kernels_ live in (KernelMemo)
  std::string llvmIr_, assembly_;
  int cacheHits_ = 0;
  bool awaitingBatch_ = false; // created in a KernelBatch not finished yet: kernels_ unset
  std::unique_ptr<SpecTable<Spec>> specs_;
  // idle arenas: one in `spare_`, taken and given back without a lock (a stage of a
  // regional call, run 64 times a call, locked the pool twice a run), the rest in `pool_`
  mutable std::atomic<Arena *> spare_{nullptr};
  mutable std::mutex poolMu_;
  mutable std::vector<std::unique_ptr<Arena>> pool_;
};

/// Horizontal fusion at launch: per step of `p` (a layout: concrete sizes), the end of the
/// run of steps that starts there and runs as one job of the work pool (i + 1: alone). A run
/// is consecutive purely elementwise kernel steps with the default thread choice
/// (`defaultThreads[i] == 0`) whose memory is independent: no member reads or writes what
/// an earlier member writes, and none writes what an earlier one reads. Arena buffers
/// compare by byte range (the planner reuses memory); an output buffer written in place
/// of an input (`alias`, per buffer, as runInto computes it; null for none) counts as
/// that input, and one written over a dynamic buffer (`over`, per buffer, as
/// outputsOverDying computes it; null for none) counts as that buffer. Symbolic programs
/// get no runs.
std::vector<int> launchRuns(const Program &p, const std::vector<LoopKernel> &kernels,
                            const std::vector<int> &defaultThreads, const std::vector<int> *alias,
                            const std::vector<int> *over = nullptr);

/// Per buffer of `p` (a layout), the dynamic buffer an output buffer may be written over
/// (-1: none): the output's first writer is a purely elementwise kernel step that reads
/// the dynamic buffer for the last time, at the output's own offsets and before it stores,
/// and the two are the same size. The call takes the dynamic buffer's storage when it is
/// the only owner at that step (a large intermediate, or an eager step's fresh result),
/// so an output such as a tied weight's gradient sum needs no third block beside its
/// two addends. `kernels`: the program's; none for symbolic programs. `alias` (runInto's
/// plan): outputs written in place of an input take no dynamic buffer, which goes to
/// another output of the step instead (an optimizer update that writes the parameter and
/// its state over themselves and a clipped gradient over the unclipped one).
std::vector<int> outputsOverDying(const Program &p, const std::vector<LoopKernel> &kernels,
                                  const std::vector<int> *alias = nullptr);

/// Per step of `p` (a layout), whether it is an eager embedding_backward with a base
/// (jit/passes/EmbeddingGradSum.h) whose base is a dynamic buffer that dies there, the whole
/// of it or its contiguous front (a tied head's weight gradient at the front of
/// linear_ce_pick_backward's packed result), shaped as the result, f32 or f64 (the
/// scatter's own types): the call may scatter into the base's block and hand that block on
/// as the result (CpuCall.cpp) when it holds the block alone.
std::vector<char> eagerIntoBase(const Program &p);

} // namespace rcjit::cpu
