// Dynamic shapes: candidate symbols per policy, probe traces, and the fitted program.
#include "jit/Dynamic.h"

#include <functional>
#include <map>

#include <rcjit/Error.h>

#include "jit/CompiledState.h"
#include "jit/Pipeline.h"
#include "targets/Lower.h"
#include "targets/SymbolicProgram.h"
#include "tracer/TensorImpl.h"

namespace rcjit::detail {

namespace {

// The most recent entry whose argument guards differ from `args` at most in sizes.
const Entry *sizeOnlyMiss(const std::vector<Tensor> &args,
                          const std::vector<std::shared_ptr<const Entry>> &entries) {
  for (auto it = entries.rbegin(); it != entries.rend(); ++it) {
    const std::vector<TensorGuard> &tg = (*it)->guards.tensors();
    if (tg.size() < args.size()) continue;
    bool same = true;
    for (size_t i = 0; i < args.size() && same; ++i) {
      same = tg[i].dtype == args[i].dtype() && tg[i].device == args[i].device() &&
             tg[i].dims.size() == static_cast<size_t>(args[i].dim());
    }
    if (same) return it->get();
  }
  return nullptr;
}

struct Candidate {
  SymSource at;
  int64_t size = 0;
  std::string group; // candidates with equal size and group share a symbol
  Symbol range;
  std::string why;
};

} // namespace

std::vector<logging::DimRef> dimRefs(const DynSymbol &s) {
  std::vector<logging::DimRef> out;
  for (const SymSource &src : s.sources) out.push_back({.arg = src.input, .dim = src.dim});
  return out;
}

std::vector<DynSymbol> dynamicCandidates(const CompileOptions &opts,
                                         const std::vector<Tensor> &args,
                                         const std::vector<std::shared_ptr<const Entry>> &entries,
                                         std::vector<logging::StaticDimEvent> &notes) {
  std::vector<Candidate> cands;
  auto marked = [&](size_t i, int d, bool dynamic) {
    for (const DimMark &m : args[i].impl()->marks) {
      if (m.dim == d && m.dynamic == dynamic) return &m;
    }
    return static_cast<const DimMark *>(nullptr);
  };
  const Entry *prev = opts.dynamic == Dynamic::automatic ? sizeOnlyMiss(args, entries) : nullptr;
  for (size_t i = 0; i < args.size(); ++i) {
    const Shape &shape = args[i].shape();
    for (int d = 0; d < args[i].dim(); ++d) {
      SymSource at{static_cast<int>(i), d};
      int64_t size = shape[static_cast<size_t>(d)];
      if (const DimMark *m = marked(i, d, true)) {
        cands.push_back({at, size, "", Symbol{m->min, m->max}, "mark_dynamic"});
        continue;
      }
      if (marked(i, d, false) || size < 2) continue;
      if (opts.dynamic == Dynamic::always) {
        cands.push_back({at, size, "", Symbol{}, "Dynamic::always"});
        continue;
      }
      if (!prev) continue;
      const DimGuard &dg = prev->guards.tensors()[i].dims[static_cast<size_t>(d)];
      if (dg.sym >= 0) {
        cands.push_back({at, size, "s" + std::to_string(dg.sym), Symbol{dg.min, dg.max},
                         "automatic: symbolic in entry " + std::to_string(prev->id)});
      } else if (dg.size != size) {
        cands.push_back({at, size, std::to_string(dg.size), Symbol{},
                         "automatic: changed from " + std::to_string(dg.size) + " to " +
                             std::to_string(size) + " since entry " + std::to_string(prev->id)});
      }
    }
  }
  // Compiled code computes the strides of an argument with symbolic sizes: it must be
  // row-major.
  std::vector<Candidate> kept;
  for (const Candidate &c : cands) {
    const Tensor &a = args[static_cast<size_t>(c.at.input)];
    if (!a.is_contiguous()) {
      notes.push_back({.dims = {{.arg = c.at.input, .dim = c.at.dim}},
                       .why = "arg " + std::to_string(c.at.input) +
                              " is not contiguous (symbolic sizes need row-major strides)"});
      continue;
    }
    kept.push_back(c);
  }
  std::map<std::pair<int64_t, std::string>, size_t> groupOf;
  std::vector<DynSymbol> out;
  for (const Candidate &c : kept) {
    auto key = std::make_pair(c.size, c.group);
    auto it = groupOf.find(key);
    if (it == groupOf.end()) {
      groupOf[key] = out.size();
      out.push_back({{c.at}, c.range, c.why});
      continue;
    }
    DynSymbol &s = out[it->second];
    s.sources.push_back(c.at);
    s.range.min = std::max(s.range.min, c.range.min);
    s.range.max = std::min(s.range.max, c.range.max);
    if (s.why != c.why) s.why += "; " + c.why;
  }
  return out;
}

namespace {

// Lowers `optimized` with the strides of this call, except that arguments with symbolic
// dims get row-major strides (equal for their data, and what the probes use).
std::vector<Shape> loweringStrides(const std::vector<Shape> &strides,
                                   const std::vector<DynSymbol> &syms,
                                   const std::vector<Tensor> &args) {
  std::vector<Shape> out = strides;
  for (const DynSymbol &s : syms) {
    for (const SymSource &src : s.sources) {
      out[static_cast<size_t>(src.input)] =
          contiguousStrides(args[static_cast<size_t>(src.input)].shape());
    }
  }
  return out;
}

// Traces fn on shapes only at one probe assignment of the symbols: the raw graph and the
// strides of its program inputs (args then captured).
bool traceProbe(const TracedFn &fn, const Trace &t, const std::vector<Shape> &strides,
                const std::vector<DynSymbol> &syms, const std::vector<int64_t> &values,
                Graph &graph, std::vector<Shape> &inputStrides, std::string &why) {
  std::vector<Tensor> args = t.args;
  std::vector<Shape> shapes;
  for (const Tensor &a : t.args) shapes.push_back(a.shape());
  for (size_t s = 0; s < syms.size(); ++s) {
    for (const SymSource &src : syms[s].sources) shapes[src.input][src.dim] = values[s];
  }
  for (const DynSymbol &s : syms) {
    for (const SymSource &src : s.sources) {
      size_t i = static_cast<size_t>(src.input);
      if (args[i].impl() == t.args[i].impl()) args[i] = makeTensor(shapes[i], t.args[i].dtype());
    }
  }
  std::string at;
  for (size_t s = 0; s < syms.size(); ++s) {
    at += (s ? ", s" : "s") + std::to_string(s) + "=" + std::to_string(values[s]);
  }
  Trace pt;
  try {
    pt = traceFunction(fn, args, true);
  } catch (const MetaTraceAbort &a) {
    why = "the function reads a traced value on the host (" + a.op + ")";
    return false;
  } catch (const std::exception &e) {
    why = "the function fails at " + at + ": " + e.what();
    return false;
  } catch (...) {
    why = "the function throws at " + at;
    return false;
  }
  bool same = pt.captured.size() == t.captured.size();
  for (size_t j = 0; j < pt.captured.size() && same; ++j)
    same = pt.captured[j].impl() == t.captured[j].impl();
  if (!same) {
    why = "the function reads other tensors at " + at;
    return false;
  }
  inputStrides = strides;
  for (size_t i = 0; i < args.size(); ++i) inputStrides[i] = args[i].strides();
  graph = std::move(pt.graph);
  return true;
}

// Marks the dims of `g` that equal one symbol exactly, fitted over the graphs of the samples.
void markGraph(Graph &g, const std::vector<Graph> &graphs,
               const std::vector<std::vector<int64_t>> &syms, const std::vector<Symbol> &ranges) {
  g.symbols = ranges;
  for (const Graph &o : graphs) {
    if (o.nodes.size() != g.nodes.size()) return;
  }
  std::vector<int64_t> values(graphs.size());
  for (size_t n = 0; n < g.nodes.size(); ++n) {
    for (size_t d = 0; d < g.nodes[n].shape.size(); ++d) {
      bool ok = true;
      for (size_t s = 0; s < graphs.size() && ok; ++s) {
        ok = graphs[s].nodes[n].shape.size() == g.nodes[n].shape.size();
        if (ok) values[s] = graphs[s].nodes[n].shape[d].value;
      }
      SizeExpr e;
      if (ok && fitSize(values, syms, e) && e.c == 1 && e.syms.size() == 1) {
        g.nodes[n].shape[d].sym = e.syms[0];
      }
    }
  }
}

// The symbols' trace-time values and ranges, and two probe assignments; false when a
// range cannot hold probe values.
bool symbolValues(const Trace &t, const std::vector<DynSymbol> &syms, std::vector<int64_t> &traced,
                  std::vector<Symbol> &ranges, std::vector<std::vector<int64_t>> &probes,
                  std::string &why) {
  for (const DynSymbol &s : syms) {
    const SymSource &src = s.sources[0];
    traced.push_back(t.args[static_cast<size_t>(src.input)].shape()[static_cast<size_t>(src.dim)]);
    ranges.push_back(s.range);
  }
  if (chooseProbes(traced, ranges, 2, probes)) return true;
  why = "its range is too small to probe with other sizes";
  return false;
}

// Tries symbol sets: all candidates, else each alone, then as many of those together as
// work. `attempt` builds and keeps the result for a set (the last successful call is the
// chosen set); returns the chosen symbols and notes why the others stay static.
std::vector<DynSymbol>
chooseSymbols(const std::vector<DynSymbol> &candidates,
              const std::function<bool(const std::vector<DynSymbol> &, std::string &)> &attempt,
              std::vector<logging::StaticDimEvent> &notes) {
  std::string why;
  if (attempt(candidates, why)) return candidates;
  if (candidates.size() == 1) {
    notes.push_back({.dims = dimRefs(candidates[0]), .why = why});
    return {};
  }
  std::vector<DynSymbol> alone;
  for (const DynSymbol &c : candidates) {
    if (attempt({c}, why)) {
      alone.push_back(c);
    } else {
      notes.push_back({.dims = dimRefs(c), .why = why});
    }
  }
  std::vector<DynSymbol> chosen;
  for (const DynSymbol &c : alone) {
    std::vector<DynSymbol> trial = chosen;
    trial.push_back(c);
    if (attempt(trial, why)) {
      chosen = std::move(trial);
    } else {
      notes.push_back({.dims = dimRefs(c), .why = "together with the other symbols, " + why});
    }
  }
  if (!chosen.empty() && chosen.size() != alone.size()) attempt(chosen, why); // keep its result
  return chosen;
}

} // namespace

SymbolicResult makeSymbolic(const TracedFn &fn, const Trace &t, const std::vector<Shape> &strides,
                            const std::vector<DynSymbol> &candidates, Target target) {
  SymbolicResult res;
  auto attempt = [&](const std::vector<DynSymbol> &syms, std::string &why) {
    std::vector<int64_t> traced;
    std::vector<Symbol> ranges;
    std::vector<std::vector<int64_t>> probes;
    if (!symbolValues(t, syms, traced, ranges, probes, why)) return false;
    CompileRequest r;
    r.exec.target = target;
    // sample 0 from the traced graph again: a symbolic program lowers its small matmuls
    // as library calls (compileGraph), where the static entry's graph may generate them
    r.samples.push_back({t.graph, loweringStrides(strides, syms, t.args), traced, false});
    for (size_t p = 0; p < probes.size(); ++p) {
      GraphSample probe;
      if (!traceProbe(fn, t, strides, syms, probes[p], probe.graph, probe.strides, why))
        return false;
      probe.syms = probes[p];
      r.samples.push_back(std::move(probe));
    }
    r.symbolic.ranges = ranges;
    for (const DynSymbol &s : syms) r.symbolic.sources.push_back(s.sources);
    CompileResult c;
    try {
      c = lowerGraphs(r); // the entry compiles the fitted samples for the target
    } catch (const std::exception &e) {
      why = std::string("lowering fails at other sizes: ") + e.what();
      return false;
    }
    if (!c.notSymbolic.empty()) {
      why = c.notSymbolic;
      return false;
    }
    std::vector<std::vector<int64_t>> symValues;
    for (const GraphSample &s : r.samples) symValues.push_back(s.syms);
    res.graph = c.graphs[0];
    markGraph(res.graph, c.graphs, symValues, ranges);
    // what the entry compiles: the same samples, optimized already
    for (size_t k = 0; k < r.samples.size(); ++k) {
      r.samples[k].graph = std::move(c.graphs[k]);
      r.samples[k].optimized = true;
    }
    res.request = std::move(r);
    return true;
  };
  res.symbols = chooseSymbols(candidates, attempt, res.notes);
  return res;
}

namespace {

// chooseSymbols with an attempt that traces the function at the probe values of a symbol
// set and hands the traces to `build` (traced values, ranges, probes), which makes the
// result or throws why it cannot.
template <class Build>
std::vector<DynSymbol>
chooseWithProbes(const TracedFn &fn, const Trace &t, const std::vector<Shape> &strides,
                 const std::vector<DynSymbol> &candidates,
                 std::vector<logging::StaticDimEvent> &notes, Build &&build) {
  auto attempt = [&](const std::vector<DynSymbol> &syms, std::string &why) {
    std::vector<int64_t> traced;
    std::vector<Symbol> ranges;
    std::vector<std::vector<int64_t>> probes;
    if (!symbolValues(t, syms, traced, ranges, probes, why)) return false;
    std::vector<RegionalProbe> rp(probes.size());
    for (size_t p = 0; p < probes.size(); ++p) {
      if (!traceProbe(fn, t, strides, syms, probes[p], rp[p].graph, rp[p].inputStrides, why))
        return false;
      rp[p].syms = probes[p];
    }
    try {
      build(syms, traced, ranges, std::move(rp));
    } catch (const std::exception &e) {
      why = e.what();
      return false;
    }
    return true;
  };
  return chooseSymbols(candidates, attempt, notes);
}

} // namespace

SymbolicRegional makeSymbolicRegional(const TracedFn &fn, const Trace &t,
                                      const std::vector<Shape> &strides,
                                      const std::vector<DynSymbol> &candidates,
                                      const std::string &idPrefix, const ExecutableOptions &exec,
                                      const RegionalTraining *training) {
  SymbolicRegional res;
  res.symbols =
      chooseWithProbes(fn, t, strides, candidates, res.notes,
                       [&](const std::vector<DynSymbol> &syms, const std::vector<int64_t> &traced,
                           const std::vector<Symbol> &ranges, std::vector<RegionalProbe> probes) {
                         res.plan = std::make_shared<RegionalPlan>(
                             buildRegionalPlan(t.graph, loweringStrides(strides, syms, t.args),
                                               idPrefix, exec, probes, traced, ranges, training));
                       });
  if (res.symbols.empty()) res.plan.reset();
  return res;
}

SymbolicTraining makeSymbolicTraining(const TracedFn &fn, const Trace &t,
                                      const std::vector<Shape> &strides,
                                      const std::vector<DynSymbol> &candidates,
                                      const TrainingRequest &base) {
  SymbolicTraining res;
  res.symbols =
      chooseWithProbes(fn, t, strides, candidates, res.notes,
                       [&](const std::vector<DynSymbol> &syms, const std::vector<int64_t> &traced,
                           const std::vector<Symbol> &ranges, std::vector<RegionalProbe> probes) {
                         TrainingRequest r = base;
                         r.samples[0].strides = loweringStrides(strides, syms, t.args);
                         r.samples[0].syms = traced;
                         for (RegionalProbe &p : probes) {
                           // the inputs whose shape did not change stand for themselves
                           r.samples.push_back({std::move(p.graph), std::move(p.inputStrides),
                                                p.syms, base.samples[0].inputs});
                         }
                         r.symbolic.ranges = ranges;
                         for (const DynSymbol &s : syms) r.symbolic.sources.push_back(s.sources);
                         res.plan = TrainingPlan::create(std::move(r));
                       });
  if (res.symbols.empty()) res.plan.reset();
  return res;
}

void applySymbolicGuards(GuardSet &guards, const std::vector<DynSymbol> &symbols) {
  for (size_t s = 0; s < symbols.size(); ++s) {
    for (const SymSource &src : symbols[s].sources) {
      guards.makeSymbolic(src.input, src.dim, static_cast<int>(s), symbols[s].range.min,
                          symbols[s].range.max);
    }
  }
}

} // namespace rcjit::detail
