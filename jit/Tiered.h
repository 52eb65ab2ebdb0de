// Tiered compilation (CompileOptions::tiered): a CPU graph's first calls run a program that
// compiles in milliseconds while the optimized one compiles on a background thread.
//
// A forward program's fast tier (CompileRequest::interpretFirst) runs its traced graph on the
// eager kernels, nothing compiled to code (jit/TierControl.h, interpretedFirstTier); any
// other fast tier lowers every matmul to a oneDNN library call (no generated small-matmul
// kernels) and compiles its loop kernels through a short LLVM pipeline with cheap code
// generation (LlvmOptimize.h's optimizeModuleQuick). The optimized tier is the ordinary
// compile (generated small matmuls, O3, max_autotune's choices). The executable a compile
// returns runs the fast tier until the optimized one is ready, then switches between two
// calls (one atomic flag: a call runs wholly on one tier; the inputs' guards are the entry's,
// the same for both); the switch needs the optimized program's outputs to have the same
// shapes, strides and dtypes as the fast one's, else the fast tier stays (and says why).
//
// No call waits for the background compile. It runs on one thread of its own (one job at a
// time, OpenMP and the work pool at one thread on it, so a call's parallel work is never
// held up); at process exit an atexit handler stops it at its next step or kernel and joins
// it, so a process may exit with a compile in flight. A finished optimized compile records a
// marker in the compile cache (memory and disk), so a later compile of the same graph (a warm
// start) compiles the optimized tier at once, from the cache, and runs it from the first call.
#pragma once
#include <string>

#include <rcjit/Compile.h>

#include "jit/CompileGraph.h"
#include "jit/TierControl.h"
#include "targets/Executable.h"

namespace rcjit {

/// Whether a function compiled with `o` tiers its compiles: o.tiered on the CPU, unless env
/// RCJIT_TIERED=0 turns tiering off for every function (read once) or o.max_autotune asks for
/// the candidates timed on the first call.
bool tieredEnabled(const CompileOptions &o);

/// Whether compileGraph takes the tiered path for `r`: r.exec.tiered, a CPU request up to its
/// executable, no assembly kept (the CLI's dumps show the optimized code), no sharding and
/// no active pass schedule (the background thread runs neither's passes). With LLVM IR kept
/// (the output_code log), the entry logs the fast tier's and the switch the optimized one's.
bool tiersRequest(const CompileRequest &r);

/// compileGraph's tiered path (tiersRequest(r) holds): the optimized tier at once where the
/// compile cache says it was compiled before, else the fast tier, with the optimized one
/// queued on the background thread. Throws rcjit::Error as compileGraph does.
CompileResult compileTiered(const CompileRequest &r);

/// The interpreted first tier's executable (compileTiered makes one for a forward program):
/// runs `traced` on the eager kernels and returns each output in the layout `lowered` (the
/// fast lowering of the same graph, never run) gives it, copying where the interpreter's
/// differs; an output of another shape or dtype is an rcjit::Error (internal error).
std::shared_ptr<Executable> makeInterpretedExecutable(Graph traced, Program lowered);

/// explain()'s line for a tiered executable: the tier each call ran and when the switch
/// came; "" for any other executable.
std::string tierNote(const Executable &e);

/// "12.3 ms": a duration in seconds as explain()'s tier and regional lines print it.
std::string explainMs(double seconds);

/// The tier the calls on this thread ran since the last take: "fast" where any tiered
/// program ran its fast tier, else "optimized" where one ran its optimized tier, else null
/// (no tiered program ran). Resets it.
const char *takeCallTier();

/// Holds the optimized-tier compiles that the compiles on this thread queue until the
/// outermost scope ends (callCompiled puts one around a call that compiles), so that the
/// call's first run has every core: on a machine of few cores the background compile took
/// one of them while the first run ran (gpt2's first run 542 ms against eager's 435 ms on
/// 2 cores). The optimized tier is then ready that much later. Scopes nest.
class TierHoldScope {
public:
  TierHoldScope();
  ~TierHoldScope();
  TierHoldScope(const TierHoldScope &) = delete;
  TierHoldScope &operator=(const TierHoldScope &) = delete;
};

} // namespace rcjit
