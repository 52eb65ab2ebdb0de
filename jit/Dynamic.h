// Dynamic shapes for compile(): which argument dims become symbolic for a new entry, and
// the symbolic program that serves them.
//
// Policy (CompileOptions::dynamic, overridden per tensor by mark_dynamic / mark_static):
//   never     - only mark_dynamic dims are symbolic;
//   automatic - the first entry is static; when a call misses an entry only because some
//               argument sizes changed, the next entry makes exactly those dims symbolic
//               (plus the dims that entry already had symbolic);
//   always    - every argument dim of size >= 2 is symbolic from the first compile.
// Sizes 0 and 1 stay specialized unless a mark_dynamic range covers them. Dims with the
// same size at this call (and, for automatic, the same size before) share one symbol, and
// the guards then check that they stay equal.
//
// The program comes from SymbolicProgram: the function is traced on shapes only at two
// probe sizes, lowered, and fitted with the real trace. A symbol the function specializes
// (a size it checks, reshapes by, or takes a different path for) is dropped and stays
// static; the `dynamic` log says which and why.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include <rcjit/Compile.h>

#include "guards/GuardSet.h"
#include "jit/CompileGraph.h"
#include "jit/Regional.h"
#include "support/Events.h"
#include "targets/Program.h"
#include "tracer/Tracer.h"

namespace rcjit::detail {

struct Entry;

/// One symbol of a new entry: where it is read, its range, and why it is symbolic.
struct DynSymbol {
  std::vector<SymSource> sources; // argument dims (input = argument index)
  Symbol range;
  std::string why; // "mark_dynamic", "Dynamic::always", "automatic: changed from 8 to 9"
};

/// The symbols a new entry for `args` should try, given the function's existing entries.
/// `notes` gets one event per dim that was a candidate but cannot be symbolic.
std::vector<DynSymbol> dynamicCandidates(const CompileOptions &opts,
                                         const std::vector<Tensor> &args,
                                         const std::vector<std::shared_ptr<const Entry>> &entries,
                                         std::vector<logging::StaticDimEvent> &notes);

/// The result of making an entry symbolic.
struct SymbolicResult {
  std::vector<DynSymbol> symbols; // the ones kept (symbol i is SizeExpr sym i)
  CompileRequest request;         // compiles the symbolic program (meaningful when
                                  // `symbols` is not empty; the caller sets ids and flags)
  Graph graph;                    // the optimized graph with symbolic dims marked
  // why each dropped symbol stays static
  std::vector<logging::StaticDimEvent> notes;
};

/// Finds the symbolic program for trace `t` of `fn` with as many of `candidates` as the
/// function allows. `strides` are the strides of every program input at this call (args
/// then captured). The samples go through the graph passes here, with small matmuls kept
/// library calls (the same lowering at every size).
SymbolicResult makeSymbolic(const TracedFn &fn, const Trace &t, const std::vector<Shape> &strides,
                            const std::vector<DynSymbol> &candidates, Target target);

/// A plan made symbolic: the symbols kept, the plan (null when no symbol could be kept), and
/// why each dropped symbol stays static.
template <class Plan> struct SymbolicPlan {
  std::vector<DynSymbol> symbols;
  std::shared_ptr<Plan> plan;
  std::vector<logging::StaticDimEvent> notes;
};

/// The regional counterpart: a plan whose stages are symbolic programs.
using SymbolicRegional = SymbolicPlan<RegionalPlan>;
SymbolicRegional makeSymbolicRegional(const TracedFn &fn, const Trace &t,
                                      const std::vector<Shape> &strides,
                                      const std::vector<DynSymbol> &candidates,
                                      const std::string &idPrefix, const ExecutableOptions &exec,
                                      const RegionalTraining *training = nullptr);

/// The training counterpart (full mode): a TrainingPlan whose forward and backward are
/// symbolic programs. `base` is the static request (one sample: t.graph at this call); the
/// samples at other sizes are added here.
using SymbolicTraining = SymbolicPlan<TrainingPlan>;
SymbolicTraining makeSymbolicTraining(const TracedFn &fn, const Trace &t,
                                      const std::vector<Shape> &strides,
                                      const std::vector<DynSymbol> &candidates,
                                      const TrainingRequest &base);

/// Applies the kept symbols to an entry's guards.
void applySymbolicGuards(GuardSet &guards, const std::vector<DynSymbol> &symbols);

/// The sources of a symbol as the dims of a trace event.
std::vector<logging::DimRef> dimRefs(const DynSymbol &s);

} // namespace rcjit::detail
