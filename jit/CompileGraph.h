// The one compile path: every graph that runs compiled goes through compileGraph.
//
// A whole function, a region, a graph-break segment, an eager GPU op, a probe trace for
// symbolic sizes, a CLI dump: each builds a CompileRequest and calls compileGraph, which
// runs one straight-line list of announced steps (CompileGraph.cpp):
//
//   decompose → constant_fold → cse → user passes → dce   (the graph passes, jit/Pipeline)
//   → fuse → build kernels → plan buffers                 (lowering, targets/Lower.h)
//   → check target → fit symbolic sizes → target compile   (targets/Target.h)
//
// Each step is timed and, with RCJIT_LOGS=passes, logged with the graph (or fusion plan,
// or program) it produced; the IR verifier runs after every graph step in debug builds and
// under RCJIT_VERIFY_IR=1. The jit layer decides when and what to compile (entries, guards,
// policy); this decides how.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <rcjit/Compile.h>
#include <rcjit/Passes.h>

#include "targets/Executable.h"
#include "targets/Fuse.h"
#include "targets/Program.h"
#include "tracer/Graph.h"

namespace rcjit {

/// One graph to compile, with the strides of its program inputs (args then captured).
/// Symbolic compiles pass several: the same function traced at other symbol values.
struct GraphSample {
  Graph graph;
  std::vector<Shape> strides;
  std::vector<int64_t> syms; // the symbol values it was traced at (symbolic compiles)
  bool optimized = false;    // the graph already went through the graph passes
};

/// Where a symbolic program reads its sizes.
struct SymbolicSpec {
  std::vector<Symbol> ranges;                  // one per symbol
  std::vector<std::vector<SymSource>> sources; // per symbol; see findSources
  /// true: find each used symbol among the program inputs' dims (regional stages) and
  /// drop the symbols the program does not use; false: `sources` as given.
  bool findSources = false;
};

/// How far compileGraph goes: the CLI's dumps and tests stop before the target compile.
enum class CompileStop { optimized, fused, program, executable };

struct CompileRequest {
  ExecutableOptions exec;           // the target, device and what the target compile keeps
  std::string moduleId = "rcjit";   // names the compiled module
  std::string label;                // names the graph in the passes log ("function 3 entry 0")
  std::vector<GraphSample> samples; // [0] at the traced sizes; >= 3 for a symbolic program
  SymbolicSpec symbolic;
  CompileStop stop = CompileStop::executable;
  /// Generated matmul kernels up to this many multiply-adds (DecomposeOptions); -1: the
  /// target's cost model (smallMatmulMacsFor). With exec.autotune, a static CPU request
  /// that leaves it -1 compiles every distinct lowering of kAutotuneMatmulMacs and keeps
  /// the one fastest on the first call (targets/FastestOf.h).
  int64_t smallMatmulMacs = -1;
  /// The sharded parameters among the graph's inputs (ZeRO-3), told to scheduled passes.
  ShardingState sharding;
  /// A tiered compile of a graph that only computes (a forward program or stage, not a
  /// backward or a whole step): its first tier may run the traced graph on the eager
  /// kernels instead of compiling loop kernels (jit/Tiered.h, interpretedFirstTier).
  bool interpretFirst = false;
};

/// The thresholds max_autotune tries, in order (a lowering equal to an earlier one is
/// skipped): none (library calls only), the cost model's (-1), up to 2^22 multiply-adds.
constexpr int64_t kAutotuneMatmulMacs[] = {0, -1, int64_t{1} << 22};

struct CompileStepTime {
  std::string step;
  double seconds = 0;
};

struct CompileResult {
  std::vector<Graph> graphs; // each sample's graph after the graph passes
  FusionPlan fusion;         // sample 0's fusion plan
  Program program;           // the lowered program (symbolic when fitted); empty once it
                             // moved into `executable` (read executable->program())
  std::shared_ptr<Executable> executable; // when stop == executable
  std::string notSymbolic; // the samples could not be fitted to one program: why (then
                           // nothing after the fit ran)
  std::vector<CompileStepTime> times;
};

/// Runs the compile path for `r`: its stages in order, up to `r.stop` (the CLI's dumps and
/// tests stop early). Throws rcjit::Error naming the step that failed. Thread-safe.
CompileResult compileGraph(CompileRequest r);

/// The compile path's first stages, for a driver that composes them itself (an entry's
/// graph passes before its symbolic attempt, a symbolic attempt's lowering); `r.stop` is not
/// read. Each step is announced and timed as in compileGraph; throws rcjit::Error naming
/// the step that failed. Thread-safe; the result is the caller's.
/// Stage 1, the graph passes: CompileResult::graphs.
CompileResult optimizeGraphs(const CompileRequest &r);
/// Stages 1-3, the graph passes, lowering and the symbolic fit: CompileResult::program
/// (fitted when several samples), or CompileResult::notSymbolic saying why they do not fit;
/// no target compile.
CompileResult lowerGraphs(const CompileRequest &r);

} // namespace rcjit
