// rcjit::compile's runtime: guard dispatch on each call; trace, optimize, lower and compile
// on a miss; the recompile limit and stances; stats and explain().
#include <atomic>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <utility>

#include <rcjit/Compile.h>

#include "autograd/Autograd.h"
#include "jit/CapturedVariables.h"
#include "jit/CompileGraph.h"
#include "jit/CompiledState.h"
#include "jit/Pipeline.h"
#include "jit/Sharding.h"
#include "jit/Tiered.h"
#include "jit/autograd/CompiledTraining.h"
#include "support/Events.h"
#include "support/Profiler.h"
#include "targets/cuda/CudaDriver.h"
#include "tracer/GraphIO.h"
#include "tracer/TensorImpl.h"
#include "tracer/Tracer.h"

namespace rcjit {

namespace detail {

namespace {

std::atomic<int> nextStateId{0};

// The inputs an entry checks and runs on: args, then each captured tensor's current value.
void gatherInputs(const Entry &e, const std::vector<Tensor> &args,
                  std::vector<const Tensor *> &out) {
  out.clear();
  for (const Tensor &a : args) out.push_back(&a);
  for (size_t j = 0; j < e.captured.size(); ++j) {
    out.push_back(e.slots[j] ? e.slots[j] : &e.captured[j]);
  }
  for (const GradGuard &g : e.gradGuards) { // a grad() the step accumulates into: the current one
    autograd::AutogradMeta *m = autograd::metaOf(g.leaf);
    if (g.captured >= 0 && m && m->grad.defined()) out[args.size() + g.captured] = &m->grad;
  }
}

// Whether each leaf's grad() is defined as it was when the whole step was traced; else why not.
std::string gradGuardFailure(const Entry &e) {
  for (const GradGuard &g : e.gradGuards) {
    autograd::AutogradMeta *m = autograd::metaOf(g.leaf);
    const bool defined = m && m->grad.defined();
    if (defined != g.defined) {
      return "grad() of a " + std::string(dtypeName(g.leaf.dtype())) + shapeStr(g.leaf.shape()) +
             " parameter: expected " + (g.defined ? "defined" : "undefined") + ", got " +
             (defined ? "defined" : "undefined") + " (the step accumulates into it)";
    }
  }
  return "";
}

bool entryMatches(const Entry &e, const std::vector<const Tensor *> &inputs) {
  if (!e.gradGuards.empty() && !gradGuardFailure(e).empty()) return false;
  return e.guards.check(inputs.data(), inputs.size());
}

std::vector<std::string> inputLabels(const Trace &t) {
  std::vector<std::string> labels;
  for (size_t i = 0; i < t.args.size(); ++i) labels.push_back("arg " + std::to_string(i));
  std::vector<std::string> names(t.captured.size());
  for (const Node &n : t.graph.nodes) {
    if (n.op == OpKind::input && n.inputKind == InputKind::captured) names[n.inputIndex] = n.name;
  }
  for (size_t j = 0; j < t.captured.size(); ++j) {
    labels.push_back("captured " + std::to_string(j) +
                     (names[j].empty() ? std::string() : " (" + names[j] + ")"));
  }
  return labels;
}

std::vector<logging::GraphBreak> graphBreaks(const Trace &t) {
  std::vector<logging::GraphBreak> out;
  for (const GraphBreak &b : t.breaks) {
    const Node &n = t.graph.nodes[b.node];
    std::optional<std::string> module;
    if (n.region >= 0) {
      const Region &r = t.graph.regions[n.region];
      module = (r.name.empty() ? std::string("<root>") : r.name) + " (" + r.type + ")";
    }
    logging::GraphBreak g{
        .op = b.op, .producer = std::string(opName(n.op)), .node = b.node, .module = module};
    if (!b.file.empty()) {
      g.file = b.file;
      g.line = b.line;
    }
    if (b.readRegion >= 0) {
      const Region &r = t.graph.regions[b.readRegion];
      g.readIn = (r.name.empty() ? std::string("<root>") : r.name) + " (" + r.type + ")";
    }
    out.push_back(std::move(g));
  }
  return out;
}

std::string describeBreaks(const Trace &t) {
  std::string s;
  for (const logging::GraphBreak &b : graphBreaks(t)) s += (s.empty() ? "" : "; ") + b.text();
  return s;
}

// The guards of an entry as the trace file's table: one row per input, and the guards on no
// input (autocast, where each symbol is read) as notes.
std::vector<logging::GuardRow> guardRows(const GuardSet &g) {
  std::vector<logging::GuardRow> rows;
  for (const TensorGuard &t : g.tensors()) {
    std::string sizes = "[", strides = t.contiguous ? "row-major" : "[";
    for (size_t d = 0; d < t.dims.size(); ++d) {
      const DimGuard &dg = t.dims[d];
      sizes += (d ? ", " : "") +
               (dg.sym >= 0 ? "s" + std::to_string(dg.sym) + " in " + rangeString(dg.min, dg.max)
                            : std::to_string(dg.size));
      if (!t.contiguous)
        strides += (d ? ", " : "") + (dg.checkStride ? std::to_string(dg.stride) : "*");
    }
    rows.push_back({.input = t.label,
                    .dtype = std::string(dtypeName(t.dtype)),
                    .device = t.device.str(),
                    .sizes = sizes + "]",
                    .strides = t.contiguous ? strides : strides + "]",
                    .requiresGrad = t.requiresGrad});
  }
  return rows;
}

std::vector<std::string> guardNotes(const GuardSet &g) {
  std::vector<std::string> notes;
  std::istringstream in(g.print());
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("arg ", 0) != 0 && line.rfind("captured ", 0) != 0) notes.push_back(line);
  }
  return notes;
}

// What to compile for: the target, and for cuda the device the tensors are on (all on one:
// compiling for cuda with a CPU tensor among the inputs is an Error naming it).
ExecutableOptions executableOptions(const CompileOptions &o, const std::vector<Tensor> &inputs) {
  ExecutableOptions exec;
  exec.target = o.target;
  exec.cudaGraphs = o.cuda_graphs || o.reduce_overhead;
  exec.autotune = o.max_autotune;
  exec.tiered = tieredEnabled(o);
  if (o.target != Target::cuda) return exec;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].device().is_cuda()) {
      throw Error("compile: Target::cuda needs every input on the GPU, but input " +
                  std::to_string(i) + " is on " + inputs[i].device().str() +
                  " (move it with .to(rcjit::Device::cuda()), modules with .to(...))");
    }
  }
  if (!inputs.empty()) exec.device = inputs[0].device().index;
  return exec;
}

double secondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// A new entry's guards: one per input (args, then captured tensors), the world size where
// collectives bake it into the graph, and a whole step's grad() guards; each lambda
// capture's variable is read per call.
std::shared_ptr<Entry> guardedEntry(const CompiledState &s, const Trace &t,
                                    const std::string &reason, const std::vector<Tensor> &inputs) {
  auto e = std::make_shared<Entry>();
  e->id = static_cast<int>(s.entries.size());
  e->reason = reason;
  e->guards = GuardSet::fromInputs(inputs, inputLabels(t), t.args.size());
  for (const Node &n : t.graph.nodes) { // collectives bake the world size into the graph
    if (opInfo(n.op).category == OpCategory::Collective) {
      e->guards.requireWorldSize(static_cast<int>(n.attrs.world));
      break;
    }
  }
  e->captured = t.captured;
  e->slots = t.capturedSlots;
  for (size_t j = 0; j < e->slots.size(); ++j) { // lambda captures: read the variable per call
    if (!e->slots[j]) e->slots[j] = findCapturedVariable(e->captured[j], s.fnObject, s.fnBytes);
  }
  e->graphBreaks = static_cast<int>(t.breaks.size());
  if (t.mutates()) e->gradGuards = t.gradGuards;
  return e;
}

// The sharded parameters (ZeRO-3) among b's inputs: the compiled code takes their shards in
// their place, for static shapes. Throws where the entry's kind cannot take them.
void bindSharding(EntryBuild &b) {
  b.sharding = shardingOf(b.inputs);
  if (b.sharding.empty()) return;
  if (b.sharding.stage < 3) {
    // ZeRO stages 1 and 2: the parameters are whole; a full-mode training entry's backward
    // may reduce-scatter their gradients into the shards (the zero1 / zero2 passes); any
    // other entry reads them as plain inputs and the optimizer reduces after backward()
    if (!b.training || b.s.opts.mode != Mode::full || b.t.mutates() ||
        b.s.opts.target != Target::cpu)
      b.sharding = {};
    return;
  }
  if (b.t.mutates() || b.s.opts.target != Target::cpu) {
    throw Error("compile: " + b.s.label() + " reads the sharded parameter " +
                b.sharding.inputs.front().param.name +
                "; sharded parameters compile in full or regional mode on the CPU, as a "
                "forward or a training entry (not a whole step or cuda)");
  }
  for (const ShardedInput &in : b.sharding.inputs) b.strides[static_cast<size_t>(in.input)] = {1};
  if (!b.dynamic.empty()) {
    b.e.dynamicNotes.push_back(
        {.why = "a function reading sharded parameters compiles for static shapes"});
    b.dynamic.clear();
  }
}

// The runner of the entry's kind, compiled: graph-break segments, a whole step (backward
// and updates are in its graph already), regional stages, or a training plan or a program
// (either with sharded parameters bound in front).
std::unique_ptr<EntryRunner> buildRunner(EntryBuild &b) {
  if (!b.t.breaks.empty()) return makeSegmentRunner(b);
  for (const Tensor &in : b.inputs) b.strides.push_back(in.strides());
  bindSharding(b);
  b.moduleId = "rcjit_f" + std::to_string(b.s.id) + "_e" + std::to_string(b.e.id);
  b.exec = executableOptions(b.s.opts, b.inputs);
  b.exec.keepLlvmIr = logging::wanted(logging::Kind::output_code);
  b.label = b.s.label() + " entry " + std::to_string(b.e.id);
  if (b.t.mutates()) return makeWholeStepRunner(b);
  std::unique_ptr<EntryRunner> r = b.s.opts.mode == Mode::regional ? makeRegionalRunner(b)
                                   : b.training                    ? makeTrainingRunner(b)
                                                                   : makeStaticRunner(b);
  // stage 3: the shards bound in the parameters' place (stages 1 and 2 read the parameters)
  return b.sharding.empty() || b.sharding.stage < 3 ? std::move(r)
                                                    : makeShardedRunner(b, std::move(r));
}

std::shared_ptr<Entry> buildEntry(CompiledState &s, Trace &t, const std::string &reason,
                                  const TracedFn &fn, const std::vector<DynSymbol> &dynamic) {
  std::vector<Tensor> inputs = t.args;
  inputs.insert(inputs.end(), t.captured.begin(), t.captured.end());
  std::shared_ptr<Entry> e = guardedEntry(s, t, reason, inputs);
  if (!t.breaks.empty() && s.opts.target == Target::cuda) {
    throw Error("compile: Target::cuda does not support graph breaks yet: the function reads "
                "tensor values on the host (" +
                describeBreaks(t) + "); keep host reads outside the compiled function");
  }
  EntryBuild b{.s = s, .t = t, .fn = fn, .e = *e, .dynamic = dynamic, .inputs = inputs};
  for (const TensorGuard &g : e->guards.tensors()) {
    b.wantGrad.push_back(g.requiresGrad);
    b.training = b.training || g.requiresGrad;
  }
  if (t.mutates()) b.training = false; // a whole step: backward and updates are in the graph
  e->runner = buildRunner(b);
  return e;
}

void logNewEntry(const CompiledState &s, const Entry &e, const Graph &traced) {
  if (logging::wanted(logging::Kind::graph)) {
    logging::emit(logging::GraphDumpEvent{
        .function = s.id,
        .name = s.name,
        .entry = e.id,
        .graph = printGraph(e.graph) + e.fusion + e.runner->graphLog(),
        .traced = printGraph(traced),
        .fusion = e.fusion.empty() ? std::nullopt : std::optional<std::string>(e.fusion)});
  }
  if (logging::wanted(logging::Kind::output_code)) {
    if (std::optional<std::string> ir =
            e.runner->llvmIr(s.label() + " entry " + std::to_string(e.id))) {
      logging::emit(logging::OutputCodeEvent{
          .function = s.id, .name = s.name, .entry = e.id, .llvmIr = std::move(*ir)});
    }
  }
  if (logging::wanted(logging::Kind::dynamic)) {
    for (size_t i = 0; i < e.symbols.size(); ++i) {
      logging::emit(logging::DynamicSymbolEvent{.function = s.id,
                                                .name = s.name,
                                                .entry = e.id,
                                                .symbol = static_cast<int64_t>(i),
                                                .dims = dimRefs(e.symbols[i]),
                                                .min = e.symbols[i].range.min,
                                                .max = e.symbols[i].range.max,
                                                .why = e.symbols[i].why});
    }
    for (logging::StaticDimEvent note : e.dynamicNotes) {
      note.function = s.id;
      note.name = s.name;
      note.entry = e.id;
      logging::emit(note);
    }
  }
  if (logging::wanted(logging::Kind::guards)) {
    logging::emit(logging::GuardsEvent{.function = s.id,
                                       .name = s.name,
                                       .entry = e.id,
                                       .guards = e.guards.print(),
                                       .table = guardRows(e.guards),
                                       .notes = guardNotes(e.guards)});
  }
  logging::emit(logging::CompileEvent{.function = s.id,
                                      .name = s.name,
                                      .entry = e.id,
                                      .seconds = e.compileSeconds,
                                      .reason = e.reason,
                                      .nodes = static_cast<int64_t>(e.graph.nodes.size()),
                                      .kernels = e.runner->kernels(),
                                      .regionsCompiled = e.runner->regions().first,
                                      .regionsReused = e.runner->regions().second});
}

std::vector<Tensor> runEntry(const Entry &e, const std::vector<const Tensor *> &guarded,
                             const std::vector<Tensor> &args, const TracedFn &fn) {
  return e.runner->run(guarded, args, fn);
}

// runEntry, timed and logged as a CallEvent when a trace file records it (the first calls
// of each entry, then powers of two).
std::vector<Tensor> runEntryLogged(const CompiledState &s, const Entry &e,
                                   const std::vector<const Tensor *> &inputs,
                                   const std::vector<Tensor> &args, const TracedFn &fn) {
  if (!logging::wanted(logging::Kind::compile)) return runEntry(e, inputs, args, fn);
  auto t0 = std::chrono::steady_clock::now();
  takeCallTier(); // what earlier calls on this thread left
  std::vector<Tensor> out = runEntry(e, inputs, args, fn);
  const double seconds = secondsSince(t0);
  const char *tier = takeCallTier();
  const int64_t call = e.calls.fetch_add(1, std::memory_order_relaxed) + 1;
  if (logging::tracedCall(call)) {
    logging::emit(
        logging::CallEvent{.function = s.id,
                           .name = s.name,
                           .entry = e.id,
                           .call = call,
                           .seconds = seconds,
                           .tier = tier ? std::optional<std::string>(tier) : std::nullopt});
  }
  return out;
}

// A new entry, with the trace it was built from (whose outputs a call that traced eagerly
// returns) and whether that trace was shapes-only.
struct CompiledEntry {
  std::shared_ptr<const Entry> entry;
  Trace trace;
  bool meta = false;
};

CompiledEntry compileEntry(CompiledState &s, const std::vector<Tensor> &args, const TracedFn &fn,
                           const std::vector<std::shared_ptr<const Entry>> &entries,
                           const std::string &reason, std::chrono::steady_clock::time_point t0,
                           ActiveSchedule &schedule, bool scheduled);

// A miss on every entry: decide between compiling, falling back and failing.
std::vector<Tensor> onMiss(CompiledState &s, const std::vector<Tensor> &args, const TracedFn &fn) {
  std::lock_guard<std::mutex> compiling(s.compileMu);
  std::vector<const Tensor *> inputs;
  std::string lastWhy, allWhy;
  std::vector<std::shared_ptr<const Entry>> entries;
  std::string scheduled; // a pass schedule step dropped the entries: why this compile
  ActiveSchedule schedule;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    entries = s.entries;
    scheduled = std::exchange(s.scheduleReason, "");
    if (s.scheduleAt >= 0) {
      schedule = {.function = s.label(),
                  .step = s.calls - 1,
                  .passes = s.opts.schedule[static_cast<size_t>(s.scheduleAt)].passes,
                  .memoryBudget = s.opts.memory_budget};
    }
  }
  ScheduleScope scheduleScope(schedule.passes.empty() ? nullptr : &schedule);
  if (!scheduled.empty()) {
    logging::emit(
        logging::RecompileEvent{.function = s.id, .name = s.name, .entry = 0, .guard = scheduled});
  }
  for (const auto &e : entries) { // another thread may have compiled meanwhile
    gatherInputs(*e, args, inputs);
    if (entryMatches(*e, inputs)) return runEntry(*e, inputs, args, fn);
    // the newest entry's failure explains best (automatic dynamic makes it the most general)
    if (std::string why = gradGuardFailure(*e); !why.empty()) {
      lastWhy = why;
      allWhy += "  entry " + std::to_string(e->id) + ": " + why + "\n";
      continue;
    }
    lastWhy = e->guards.firstFailure(inputs.data(), inputs.size());
    allWhy += "  entry " + std::to_string(e->id) + ": " +
              e->guards.allFailures(inputs.data(), inputs.size());
  }
  const std::string fname = s.label();
  if (!entries.empty()) {
    if (s.opts.stance == Stance::fail_on_recompile) {
      throw Error("compiled " + fname +
                  " would recompile, but its stance is fail_on_recompile: " + lastWhy);
    }
    bool limit = static_cast<int>(entries.size()) >= s.opts.recompile_limit;
    if (limit || s.opts.stance == Stance::eager_on_recompile) {
      bool firstFallback;
      {
        std::lock_guard<std::mutex> lock(s.mu);
        firstFallback = s.stats.fallbacks == 0;
        ++s.stats.fallbacks;
      }
      if (limit && firstFallback) {
        logging::emit(logging::RecompileLimitEvent{
            .function = s.id, .name = s.name, .limit = s.opts.recompile_limit, .guard = lastWhy});
        logging::emit(logging::PerfHintEvent{
            .function = s.id,
            .name = s.name,
            .hint = "falls back to eager: raise recompile_limit, or mark the changing dims "
                    "dynamic (mark_dynamic) so one entry serves them"});
      }
      return fn(args);
    }
    logging::emit(logging::RecompileEvent{.function = s.id,
                                          .name = s.name,
                                          .entry = static_cast<int64_t>(entries.size()),
                                          .guard = lastWhy});
    logging::emit(
        logging::FailingGuardsEvent{.function = s.id, .name = s.name, .failures = allWhy});
  }
  auto t0 = std::chrono::steady_clock::now();
  std::string reason = !scheduled.empty() ? scheduled : entries.empty() ? "first call" : lastWhy;
  const int64_t entryId = static_cast<int64_t>(entries.size());
  // the compile path's steps name this entry in the trace; a compile that throws is logged
  logging::CompileScope scope({.function = s.id, .name = s.name, .entry = entryId});
  CompiledEntry c;
  try {
    c = compileEntry(s, args, fn, entries, reason, t0, schedule, !scheduled.empty());
  } catch (const std::exception &ex) {
    logging::emit(logging::CompileFailedEvent{.function = s.id,
                                              .name = s.name,
                                              .entry = entryId,
                                              .seconds = secondsSince(t0),
                                              .reason = reason,
                                              .error = ex.what()});
    throw;
  }
  const Entry &e = *c.entry;
  if (c.meta && e.compiled()) {
    gatherInputs(e, args, inputs);
    return runEntryLogged(s, e, inputs, args, fn);
  }
  // the trace's outputs carry no autograd nodes: training segments run the call again
  if (e.runner->runsAgainAfterTrace()) return runEntryLogged(s, e, inputs, args, fn);
  return c.trace.outputs;
}

// A miss that compiles: trace, build the entry and add it to the function's entries.
CompiledEntry compileEntry(CompiledState &s, const std::vector<Tensor> &args, const TracedFn &fn,
                           const std::vector<std::shared_ptr<const Entry>> &entries,
                           const std::string &reason, std::chrono::steady_clock::time_point t0,
                           ActiveSchedule &schedule, bool scheduled) {
  const std::string fname = s.label();
  std::optional<profiler::Scope<std::function<std::string()>>> compileEvent;
  compileEvent.emplace("compile", [&s] { return s.label(); });
  // Trace on shapes only (no eager compute), then run the compiled code for this call's
  // values. A host read needs real values: trace again eagerly.
  bool meta = true;
  Trace t;
  try {
    t = traceFunction(fn, args, true, /*autograd=*/true);
  } catch (const MetaTraceAbort &) {
    meta = false;
  }
  if (!meta || !t.breaks.empty()) {
    meta = false;
    t = traceFunction(fn, args, false, /*autograd=*/true);
  }
  if (!schedule.passes.empty()) { // what PassContext::profile runs the graph on
    schedule.inputs = t.args;
    schedule.inputs.insert(schedule.inputs.end(), t.captured.begin(), t.captured.end());
  }
  if (logging::wanted(logging::Kind::passes)) {
    logging::emit(logging::CompileStepEvent{
        .graph = fname + " entry " + std::to_string(entries.size()),
        .step = meta ? "trace (shapes only)" : "trace (eager values: the function reads them)",
        .seconds = secondsSince(t0),
        .result = std::to_string(t.graph.nodes.size()) + " nodes, " +
                  std::to_string(t.breaks.size()) + " graph breaks\n",
        .phase = "trace"});
  }
  if (t.mutates() && !t.breaks.empty()) {
    throw Error("compiled " + fname +
                " is a whole step (it calls backward(), an optimizer step, set_lr(Tensor) or "
                "copy_) and reads "
                "traced values on the host (" +
                describeBreaks(t) +
                "): a whole step compiles as one graph; move the host reads (item(), "
                "clip_grad_norm_) out of the compiled function (to clip inside it: "
                "clip_grads_with_norm_(params, max_norm, get_total_norm(grads_of(params))), "
                "which reads nothing on the host)");
  }
  if (!t.breaks.empty()) {
    std::string where = describeBreaks(t);
    if (s.opts.fullgraph) {
      throw Error("graph break in a fullgraph compile of " + fname + ": " + where +
                  " reads a traced value on the host; remove the host read or set fullgraph = "
                  "false");
    }
    logging::emit(
        logging::GraphBreakEvent{.function = s.id, .name = s.name, .breaks = graphBreaks(t)});
  }
  std::vector<logging::StaticDimEvent> notes;
  std::vector<DynSymbol> dynamic = dynamicCandidates(s.opts, args, entries, notes);
  if (t.mutates() && !dynamic.empty()) { // its probe traces would run the step again
    dynamic.clear();
    notes.push_back({.why = "a whole step (backward() or an optimizer step inside) compiles "
                            "for static shapes"});
  }
  std::shared_ptr<Entry> e = buildEntry(s, t, reason, fn, dynamic);
  e->dynamicNotes.insert(e->dynamicNotes.begin(), notes.begin(), notes.end());
  e->compileSeconds = secondsSince(t0);
  compileEvent.reset(); // the compile's event ends here; the first run is the call's
  logNewEntry(s, *e, t.graph);
  {
    std::lock_guard<std::mutex> lock(s.mu);
    e->id = static_cast<int>(s.entries.size());
    s.entries.push_back(e);
    s.stats.compiles += e->runner->compiles();
    s.stats.cache_hits += e->runner->cacheHits();
    s.stats.recompiles += (!entries.empty() || scheduled) && e->compiled() ? 1 : 0;
    s.stats.graph_breaks += e->graphBreaks;
    s.stats.compile_seconds += e->compileSeconds;
    if (!entries.empty() || scheduled)
      s.history.push_back("entry " + std::to_string(e->id) + ": " + reason);
  }
  return {std::move(e), std::move(t), meta};
}

// mark_dynamic ranges are part of the contract even before dims become symbolic: a size
// outside its marked range is an Error, never a silent recompile.
void checkMarkedRanges(const std::vector<Tensor> &args) {
  for (size_t i = 0; i < args.size(); ++i) {
    if (!args[i].defined()) continue;
    for (const DimMark &m : args[i].impl()->marks) {
      if (!m.dynamic || m.dim >= args[i].dim()) continue;
      int64_t size = args[i].shape()[static_cast<size_t>(m.dim)];
      if (size < m.min || size > m.max) {
        throw Error("arg " + std::to_string(i) + " dim " + std::to_string(m.dim) + ": size " +
                    std::to_string(size) + " is outside its mark_dynamic range [" +
                    std::to_string(m.min) + ", " + std::to_string(m.max) + "]");
      }
    }
  }
}

std::string passList(const CompileOptions &o, int at) {
  if (at < 0) return "none";
  std::string out = "[";
  const auto &names = o.schedule[static_cast<size_t>(at)].passes;
  for (size_t i = 0; i < names.size(); ++i) out += (i ? ", " : "") + names[i];
  return out + "]";
}

// Counts the call (a training step) and, where it reaches a step of the pass schedule,
// drops the compiled entries so this call recompiles with that step's pass list.
void advanceSchedule(CompiledState &s) {
  std::lock_guard<std::mutex> lock(s.mu);
  const int64_t step = s.calls++;
  int at = s.scheduleAt;
  while (at + 1 < static_cast<int>(s.opts.schedule.size()) &&
         s.opts.schedule[static_cast<size_t>(at + 1)].step <= step) {
    ++at;
  }
  if (at == s.scheduleAt) return;
  const std::string before = passList(s.opts, s.scheduleAt);
  s.scheduleAt = at;
  if (s.entries.empty()) return; // nothing compiled yet: the first compile uses the list
  s.entries.clear();
  s.scheduleReason = "the pass schedule reached step " + std::to_string(step) + ": passes " +
                     before + " -> " + passList(s.opts, at);
}

} // namespace

namespace {
// "model.cpp:42": the file's last component, which tells the compile() calls of a program
// apart without the build's directory layout.
std::string shortLocation(const std::source_location &where) {
  std::string_view file = where.file_name();
  if (size_t slash = file.find_last_of("/\\"); slash != std::string_view::npos)
    file.remove_prefix(slash + 1);
  if (file.empty()) return "";
  return std::string(file) + ":" + std::to_string(where.line());
}

std::string displayName(const CompileOptions &o, const std::source_location &where) {
  std::string loc = shortLocation(where);
  if (o.name.empty()) return loc;
  return loc.empty() ? o.name : o.name + ", " + loc;
}
} // namespace

CompiledState::CompiledState(const CompileOptions &o, const void *fnObject, size_t fnBytes,
                             const std::source_location &where)
    : opts(o), fnObject(fnObject), fnBytes(fnBytes), id(nextStateId++),
      name(displayName(o, where)) {
  if (o.recompile_limit < 1) {
    throw Error("compile: recompile_limit must be >= 1, got " + std::to_string(o.recompile_limit));
  }
  if (o.memory_budget < 0) {
    throw Error("compile: memory_budget must be >= 0 bytes, got " +
                std::to_string(o.memory_budget));
  }
  for (size_t i = 0; i < o.schedule.size(); ++i) {
    const ScheduleStep &st = o.schedule[i];
    if (st.step < 0 || (i > 0 && st.step <= o.schedule[i - 1].step)) {
      throw Error("compile: schedule steps must be >= 0 and increasing; step " + std::to_string(i) +
                  " is at " + std::to_string(st.step) +
                  (i > 0 ? " after " + std::to_string(o.schedule[i - 1].step) : ""));
    }
    checkScheduledPasses(st.passes, "compile: schedule step at " + std::to_string(st.step));
  }
  if (o.target == Target::cuda) {
    if (const std::string &why = cuda::unavailableReason(); !why.empty()) {
      throw Error("compile: Target::cuda needs an NVIDIA GPU: " + why);
    }
  }
}

std::shared_ptr<CompiledState> makeCompiledState(const CompileOptions &opts, const void *fnObject,
                                                 size_t fnBytes,
                                                 const std::source_location &where) {
  return std::make_shared<CompiledState>(opts, fnObject, fnBytes, where);
}

std::vector<Tensor> callCompiled(CompiledState &s, const std::vector<Tensor> &args,
                                 const TracedFn &fn) {
  profiler::Scope scope("call", [&s] { return s.label(); });
  if (s.opts.mode == Mode::eager || s.opts.stance == Stance::force_eager) return fn(args);
  checkMarkedRanges(args);
  if (!s.opts.schedule.empty()) advanceSchedule(s);
  thread_local std::vector<const Tensor *> inputs;
  std::shared_ptr<const Entry> hit;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    for (const auto &e : s.entries) {
      gatherInputs(*e, args, inputs);
      if (entryMatches(*e, inputs)) {
        hit = e;
        break;
      }
    }
  }
  if (hit) return runEntryLogged(s, *hit, inputs, args, fn);
  TierHoldScope hold; // the optimized tiers compile after this call, not beside its run
  return onMiss(s, args, fn);
}

namespace {

// The function's counters plus its graph-break entries' segment programs (compiled and
// reused as calls reach them): what stats() and explain() report. The caller holds s.mu.
CompileStats totalStats(const CompiledState &s) {
  CompileStats st = s.stats;
  for (const auto &e : s.entries) e->runner->addLaterStats(st);
  return st;
}

// "1 entry", "3 entries" (explain()'s wording).
std::string explainCount(int64_t n, const std::string &one, const std::string &many) {
  return std::to_string(n) + " " + (n == 1 ? one : many);
}

// Seconds as milliseconds with two decimals ("12.99 ms", not "12.9991 ms").
std::string explainMs(double seconds) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f ms", seconds * 1e3);
  return buf;
}

} // namespace

CompileStats statsOf(const CompiledState &s) {
  std::lock_guard<std::mutex> lock(s.mu);
  return totalStats(s);
}

std::string explainOf(const CompiledState &s) {
  std::lock_guard<std::mutex> lock(s.mu);
  std::ostringstream os;
  const CompileStats st = totalStats(s); // the figures stats() gives
  os << "compiled " << s.label() << ": "
     << explainCount(static_cast<int64_t>(s.entries.size()), "entry", "entries") << ", "
     << explainCount(st.compiles, "compile", "compiles") << " ("
     << explainCount(st.cache_hits, "cache hit", "cache hits") << "), "
     << explainCount(st.recompiles, "recompile", "recompiles") << ", "
     << explainCount(st.fallbacks, "eager fallback", "eager fallbacks") << ", "
     << explainCount(st.graph_breaks, "graph break", "graph breaks") << ", "
     << explainMs(st.compile_seconds) << " compiling\n";
  if (st.compiles != s.stats.compiles) {
    os << "(compiles count the segment programs between graph breaks: " << s.stats.compiles
       << " for the entries, " << st.compiles - s.stats.compiles << " for their segments)\n";
  }
  for (const auto &e : s.entries) {
    os << "\nentry " << e->id << " (" << e->reason << "; " << explainMs(e->compileSeconds) << ")";
    os << e->runner->explainNote() << "\n  guards:\n";
    std::istringstream g(e->guards.print());
    for (std::string line; std::getline(g, line);) os << "    " << line << "\n";
    if (e->compiled()) {
      std::istringstream pr(e->runner->printPrograms());
      for (std::string line; std::getline(pr, line);) os << "  " << line << "\n";
    }
  }
  if (!s.history.empty()) {
    os << "\nrecompiles:\n";
    for (const std::string &h : s.history) os << "  " << h << "\n";
  }
  return os.str();
}

} // namespace detail

void mark_dynamic(Tensor &t, int dim, int64_t min, int64_t max) {
  int64_t d = detail::normalizeDim(dim, t.dim(), "mark_dynamic");
  if (min < 0 || min > max) {
    throw Error("mark_dynamic: bad range [" + std::to_string(min) + ", " + std::to_string(max) +
                "]");
  }
  auto &marks = t.impl()->marks;
  std::erase_if(marks, [&](const detail::DimMark &m) { return m.dim == d; });
  marks.push_back({static_cast<int>(d), true, min, max});
}

void mark_static(Tensor &t, int dim) {
  int64_t d = detail::normalizeDim(dim, t.dim(), "mark_static");
  auto &marks = t.impl()->marks;
  std::erase_if(marks, [&](const detail::DimMark &m) { return m.dim == d; });
  marks.push_back({static_cast<int>(d), false, 0, 0});
}

} // namespace rcjit
