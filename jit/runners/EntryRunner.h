// EntryRunner: how one compiled entry runs a call and reports itself, one implementation per
// entry kind (each in its own file here), and the factories that compile each kind.
//
// The kinds: a static (or symbolic) program (StaticRunner.cpp), a whole step whose program
// writes back what the function mutated (WholeStepRunner.cpp), regional stages
// (RegionalRunner.cpp), graph-break segments (SegmentRunner.cpp), a compiled forward and
// backward (TrainingRunner.cpp), and sharded parameters bound in front of another runner
// (ShardedRunner.cpp). jit/Compile.cpp's buildEntry picks the kind; the entry holds its
// guards and one runner, and a call is one virtual run().
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <rcjit/Compile.h>
#include <rcjit/Passes.h>

#include "jit/Dynamic.h"
#include "targets/Executable.h"
#include "tracer/Graph.h"
#include "tracer/Tracer.h"

namespace rcjit::detail {

struct Entry;
class CompiledState;

/// How an entry runs a call whose guards passed, and what stats(), explain() and the logs
/// say of it. Built once with its entry and immutable after; run() is thread-safe as the
/// compiled programs are (several threads may run one entry at once).
class EntryRunner {
public:
  virtual ~EntryRunner() = default;
  /// Runs the call. `inputs`: the program inputs as guarded (args, then each captured
  /// tensor's current value), borrowed for the call; `args` and `fn` for the kinds that run
  /// the function's C++ again (graph breaks). Returns the function's outputs.
  virtual std::vector<Tensor> run(const std::vector<const Tensor *> &inputs,
                                  const std::vector<Tensor> &args, const TracedFn &fn) const = 0;
  /// False where the call runs the function's C++ (graph-break segments), not compiled code.
  virtual bool compiled() const { return true; }
  /// True where a call that compiled the entry (tracing with eager values) runs again through
  /// it instead of returning the trace's outputs (training segments: those carry no grads).
  virtual bool runsAgainAfterTrace() const { return false; }
  /// Programs compiled, and taken from the caches, when the entry was built.
  virtual int64_t compiles() const = 0;
  virtual int64_t cacheHits() const = 0;
  /// Adds what was compiled and reused since (graph-break segments compile as calls reach
  /// them) to `st`. The caller holds the function's lock.
  virtual void addLaterStats(CompileStats &) const {}
  /// What explain() says after "entry N (reason; time)" (graph breaks), or "".
  virtual std::string explainNote() const { return ""; }
  /// The compiled programs as explain() prints them ("" where none).
  virtual std::string printPrograms() const = 0;
  /// What the graph log prints after the entry's graph and fusion plan.
  virtual std::string graphLog() const { return printPrograms(); }
  /// The LLVM IR the output_code log shows (`entry` names the entry: "function 3 entry 0"),
  /// or nullopt where there is none to log.
  virtual std::optional<std::string> llvmIr(const std::string &entry) const = 0;
  /// The compile event's kernels (of a whole program) and regions compiled and reused.
  virtual int64_t kernels() const { return 0; }
  virtual std::pair<int64_t, int64_t> regions() const { return {0, 0}; }
};

/// What compiling one entry's runner reads, and the entry whose graph, fusion plan, symbols
/// and notes it fills. Lives for one buildEntry call; not thread-safe.
struct EntryBuild {
  const CompiledState &s;
  const Trace &t;
  const TracedFn &fn;
  Entry &e;
  std::vector<DynSymbol> dynamic; // the symbolic candidates (none where the kind is static)
  std::vector<Tensor> inputs;     // the program inputs: args, then captured
  std::vector<Shape> strides;     // of each input; a sharded parameter's is its shard's
  std::vector<bool> wantGrad;     // per input: it requires grad
  bool training = false;          // some input requires grad (not a whole step)
  ShardingState sharding;         // the sharded parameters among the inputs
  std::string moduleId;           // "rcjit_f<function>_e<entry>"
  std::string label;              // "function 3 (file:line) entry 0"
  ExecutableOptions exec;
};

/// Compiles the function's graph as one program (static, or symbolic where b.dynamic
/// allows), filling the entry's graph, fusion plan and symbols. Throws rcjit::Error.
std::shared_ptr<Executable> compileProgram(EntryBuild &b);

/// The factories, one per kind; each compiles what its kind runs and throws rcjit::Error.
std::unique_ptr<EntryRunner> makeStaticRunner(EntryBuild &b);
std::unique_ptr<EntryRunner> makeWholeStepRunner(EntryBuild &b);
std::unique_ptr<EntryRunner> makeRegionalRunner(EntryBuild &b);
std::unique_ptr<EntryRunner> makeSegmentRunner(EntryBuild &b);
std::unique_ptr<EntryRunner> makeTrainingRunner(EntryBuild &b);
/// `inner` run with each sharded parameter's shard bound in its place (b.sharding).
std::unique_ptr<EntryRunner> makeShardedRunner(const EntryBuild &b,
                                               std::unique_ptr<EntryRunner> inner);

} // namespace rcjit::detail
