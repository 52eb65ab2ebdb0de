// The static program entry: the graph passes once, then the rest of the compile path for a
// static or a symbolic program; a call runs the program.
#include "jit/runners/StaticRunner.h"

#include <sstream>

#include "jit/CompileGraph.h"
#include "jit/CompiledState.h"
#include "jit/Sharding.h"
#include "jit/Tiered.h"
#include "tracer/GraphIO.h"

namespace rcjit::detail {

std::vector<Tensor> StaticRunner::run(const std::vector<const Tensor *> &inputs,
                                      const std::vector<Tensor> &, const TracedFn &) const {
  return program_->run(inputs.data(), inputs.size());
}

std::string StaticRunner::printPrograms() const {
  const std::string tier = tierNote(*program_);
  std::string out = (tier.empty() ? "" : tier + "\n") + printProgram(program_->program());
  const std::string notes = program_->libraryNotes();
  if (!notes.empty()) {
    out += "library steps run as:\n";
    std::istringstream lines(notes);
    for (std::string line; std::getline(lines, line);) out += "  " + line + "\n";
  }
  return out;
}

std::shared_ptr<Executable> compileProgram(EntryBuild &b) {
  Entry &e = b.e;
  CompileRequest r;
  r.exec = b.exec;
  r.label = b.label;
  r.samples.push_back({b.t.graph, b.strides});
  r.sharding = b.sharding;
  r.interpretFirst = !b.t.mutates(); // a whole step keeps a compiled fast tier
  // a static tiered compile runs the graph passes once per tier, inside compileGraph
  const bool passesInside = b.exec.tiered && b.dynamic.empty() && b.sharding.empty();
  if (passesInside) {
    r.moduleId = b.moduleId;
    CompileResult c = compileGraph(std::move(r));
    e.graph = std::move(c.graphs.at(0)); // the fast tier's (library matmuls)
    e.fusion = printFusionPlan(c.fusion, e.graph);
    return std::move(c.executable);
  }
  // the graph passes first: the symbolic attempt starts from their graph
  e.graph = std::move(optimizeGraphs(r).graphs.at(0));
  checkShardedInputs(e.graph, b.sharding, b.label);
  r.samples[0] = {e.graph, b.strides, {}, true};
  if (!b.dynamic.empty()) {
    SymbolicResult sym = makeSymbolic(b.fn, b.t, b.strides, b.dynamic, b.exec.target);
    e.dynamicNotes = std::move(sym.notes);
    if (!sym.symbols.empty()) {
      r.samples = std::move(sym.request.samples);
      r.symbolic = std::move(sym.request.symbolic);
      e.graph = std::move(sym.graph);
      e.symbols = std::move(sym.symbols);
      applySymbolicGuards(e.guards, e.symbols);
    }
  }
  r.moduleId = b.moduleId;
  // max_autotune of a static program: compileGraph tries each lowering of the traced graph
  // (small matmuls generated or library calls), so it starts again before the passes; so
  // does a tiered one (its fast tier lowers every matmul to a library call)
  if ((b.exec.autotune || b.exec.tiered) && r.samples.size() == 1 && b.sharding.empty())
    r.samples[0] = {b.t.graph, b.strides};
  CompileResult c = compileGraph(std::move(r));
  e.fusion = printFusionPlan(c.fusion, c.graphs.at(0));
  return std::move(c.executable);
}

std::unique_ptr<EntryRunner> makeStaticRunner(EntryBuild &b) {
  return std::make_unique<StaticRunner>(compileProgram(b));
}

} // namespace rcjit::detail
