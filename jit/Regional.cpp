// Regional compilation: cut the graph into glue and region stages, compile each distinct
// stage once, and run the stages in order over a table of values.
#include "jit/Regional.h"

#include <algorithm>
#include <map>
#include <optional>
#include <sstream>
#include <tuple>

#include "cache/ClearHooks.h"
#include "jit/CompileGraph.h"
#include "jit/Pipeline.h"
#include "jit/Sharding.h"
#include "jit/Tiered.h"
#include "targets/SymbolicProgram.h"
#include "targets/Target.h"
#include "targets/cpu/CpuProgram.h"
#include "tracer/GraphIO.h"

namespace rcjit {

namespace {

// Compiled stage programs of this process, by stage key.
struct StageTableTag;
using StageTable =
    cache::detail::ProcessMemo<StageTableTag, std::string, std::shared_ptr<Executable>, 4096>;
// Compiled training stages (forward and backward) of this process, by stage key.
struct TrainingStageTableTag;
using TrainingStageTable = cache::detail::ProcessMemo<TrainingStageTableTag, std::string,
                                                      std::shared_ptr<TrainingPlan>, 4096>;

// Per node of `g`: it needs a gradient (a program input that wants one, or a floating value
// computed from one).
std::vector<bool> needsGrad(const Graph &g, const std::vector<bool> &wantGrad) {
  std::vector<bool> needs(g.nodes.size(), false);
  std::vector<int> inputs = g.programInputs();
  for (size_t i = 0; i < inputs.size() && i < wantGrad.size(); ++i) needs[inputs[i]] = wantGrad[i];
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node &n = g.nodes[i];
    if (n.op == OpKind::input || !isFloating(n.dtype)) continue;
    for (int in : n.inputs) needs[i] = needs[i] || needs[in];
  }
  return needs;
}

bool inside(const Region &inner, const Region &outer) {
  return inner.begin >= outer.begin && inner.end <= outer.end;
}

// Program input order of a sub-graph's inputs: args by inputIndex, then captured.
std::vector<int> programOrder(const Graph &sub, const std::vector<int> &boundary) {
  std::vector<int> inputNodes = sub.inputNodes(); // boundary follows this order
  std::vector<int> order = sub.programInputs();
  for (int &id : order) {
    id = boundary[std::find(inputNodes.begin(), inputNodes.end(), id) - inputNodes.begin()];
  }
  return order;
}

} // namespace

std::vector<int> selectRegions(const Graph &g) {
  std::vector<int> picked;
  for (size_t r = 0; r < g.regions.size(); ++r) {
    const Region &reg = g.regions[r];
    if (!(reg.inList || reg.type == "region") || reg.begin == reg.end) continue;
    bool nested = false;
    for (int p : picked) nested |= inside(reg, g.regions[p]);
    if (!nested) picked.push_back(static_cast<int>(r));
  }
  std::sort(picked.begin(), picked.end(),
            [&](int a, int b) { return g.regions[a].begin < g.regions[b].begin; });
  return picked;
}

namespace {

// The stage graph's cut: g with a "glue" region for each stretch between selected regions,
// so that every stage, glue or region, is extracted the same way. Returns the stage region
// indices in node order.
std::vector<int> cutStages(const Graph &g, Graph &cut) {
  cut = g;
  std::vector<int> stages;
  auto addGlue = [&](int begin, int end) {
    Region r;
    r.name = r.type = "glue";
    r.begin = begin;
    r.end = end;
    cut.regions.push_back(r);
    stages.push_back(static_cast<int>(cut.regions.size()) - 1);
  };
  int at = 0;
  for (int r : selectRegions(g)) {
    if (at < g.regions[r].begin) addGlue(at, g.regions[r].begin);
    stages.push_back(r);
    at = g.regions[r].end;
  }
  if (at < static_cast<int>(g.nodes.size())) addGlue(at, static_cast<int>(g.nodes.size()));
  return stages;
}

} // namespace

namespace {

// The stages one plan compiled, by stage key: its later identical stages reuse them, and
// they enter the process's tables only once the plan's kernels have compiled.
struct PlanStages {
  std::map<std::string, std::shared_ptr<Executable>> programs;
  std::map<std::string, std::shared_ptr<TrainingPlan>> training;
};

// What every stage of one plan is compiled with: the target, the symbol ranges and each
// sample's symbol values, and (training) the call's inputs.
struct StageContext {
  const ExecutableOptions &exec;
  const std::vector<Symbol> &ranges;
  const std::vector<std::vector<int64_t>> &symValues;
  const RegionalTraining *training;
  const std::vector<int> &graphInputs; // the plan's program inputs
  const ShardingState *sharding;       // the plan's sharded program inputs (ZeRO-3), or null
};

// One stage to compile: its sub-graph and input strides at each sample's sizes.
struct StageSamples {
  std::vector<Graph> subs;
  std::vector<std::vector<Shape>> strides;
  std::vector<bool> wantGrad; // per stage input: it wants a gradient
  bool trains = false;
  ShardingState sharding; // the stage's own inputs that are sharded parameters
  std::string shardingKey;
};

// The sharded parameters among a stage's inputs (`inputs`: graph node ids), numbered by the
// stage's input order, and their part of the stage key: what the zero3 pass reads (offsets,
// shapes, shard size, world, each unit's rank among the stage's units), not which unit or
// shard, so every identical layer shares one compiled stage.
ShardingState stageSharding(const StageContext &c, const std::vector<int> &inputs,
                            std::string &keyPart) {
  ShardingState out;
  if (!c.sharding || c.sharding->empty()) return out;
  out.world_size = c.sharding->world_size;
  out.rank = c.sharding->rank;
  out.stage = c.sharding->stage;
  for (size_t j = 0; j < inputs.size(); ++j) {
    auto at = std::find(c.graphInputs.begin(), c.graphInputs.end(), inputs[j]);
    if (at == c.graphInputs.end()) continue;
    const int programInput = static_cast<int>(at - c.graphInputs.begin());
    for (const ShardedInput &in : c.sharding->inputs) {
      if (in.input == programInput)
        out.inputs.push_back({.input = static_cast<int>(j), .grad_output = -1, .param = in.param});
    }
  }
  std::vector<int> units;
  for (const ShardedInput &in : out.inputs) units.push_back(in.param.unit);
  std::sort(units.begin(), units.end());
  units.erase(std::unique(units.begin(), units.end()), units.end());
  std::ostringstream key;
  if (!out.empty()) key << "zero" << out.stage << "x" << out.world_size << ":";
  for (const ShardedInput &in : out.inputs) {
    const auto u = std::find(units.begin(), units.end(), in.param.unit) - units.begin();
    key << in.input << "@u" << u << "+" << in.param.offset << "/" << in.param.unit_numel << "/"
        << in.param.shard.numel() << shapeStr(in.param.shape) << ";";
  }
  keyPart = key.str();
  return out;
}

// The stage's key in the stage tables: the target and lowering, the pass schedule, which
// inputs train, and each sample's structural hash and input strides.
std::string stageKey(const ExecutableOptions &exec, const StageSamples &ss) {
  std::ostringstream key;
  key << (exec.target == Target::cuda ? "cuda:" + std::to_string(exec.device) : "cpu")
      << (exec.autotune ? "+autotune" : "") << "/mm" << smallMatmulMacsFor(exec.target) << "/"
      << scheduleKey();
  if (ss.trains) {
    key << "train:";
    for (bool w : ss.wantGrad) key << (w ? '1' : '0');
    key << "/";
  }
  if (!ss.sharding.empty()) key << ss.shardingKey << "/";
  for (size_t k = 0; k < ss.subs.size(); ++k) {
    key << (k ? "/" : "") << hashGraph(ss.subs[k]).hex();
    for (const Shape &st : ss.strides[k]) key << "|" << shapeStr(st);
  }
  return key.str();
}

// A training stage: its forward and backward, from the process's table or compiled.
void trainingStage(const StageContext &c, RegionalStage &st, size_t s, StageSamples ss,
                   const std::string &key, const std::string &moduleId, int runs,
                   RegionalPlan &plan, PlanStages &made) {
  auto mine = made.training.find(key);
  st.training =
      mine != made.training.end() ? mine->second : TrainingStageTable::instance().find(key);
  if (st.training) {
    st.reused = true;
    st.backwardAtBuild = st.training->backwardIfCompiled() != nullptr;
    plan.reused += st.backwardAtBuild ? 2 : 1;
    return;
  }
  TrainingRequest r;
  r.wantGrad = ss.wantGrad;
  r.exec = c.exec;
  r.exec.runsPerCall = runs;
  r.moduleId = moduleId;
  r.label = c.training->label + " stage " + std::to_string(s) + " (" + st.name + ")";
  for (size_t k = 0; k < ss.subs.size(); ++k) {
    TrainingSample sample{std::move(ss.subs[k]), std::move(ss.strides[k]), c.symValues[k], {}};
    // the stage inputs that are the call's inputs stand for themselves
    for (int id : st.inputs) {
      auto at = std::find(c.graphInputs.begin(), c.graphInputs.end(), id);
      sample.inputs.push_back(
          at == c.graphInputs.end() ? Tensor() : c.training->inputs.at(at - c.graphInputs.begin()));
    }
    r.samples.push_back(std::move(sample));
  }
  r.symbolic.ranges = c.ranges;
  r.symbolic.findSources = true;
  r.sharding = std::move(ss.sharding);
  try {
    st.training = TrainingPlan::create(std::move(r));
  } catch (const Error &e) {
    throw Error("stage " + st.name + ": " + e.what());
  }
  made.training[key] = st.training;
  st.backwardAtBuild = st.training->backwardIfCompiled() != nullptr;
  plan.compiled += st.backwardAtBuild ? 2 : 1;
}

// A forward-only stage: its program, from the process's table or compiled.
void programStage(const StageContext &c, RegionalStage &st, StageSamples ss, const std::string &key,
                  const std::string &moduleId, int runs, RegionalPlan &plan, PlanStages &made) {
  auto mine = made.programs.find(key);
  st.program = mine != made.programs.end() ? mine->second : StageTable::instance().find(key);
  if (st.program) {
    st.reused = true;
    ++plan.reused;
    return;
  }
  CompileRequest req;
  req.exec = c.exec;
  req.exec.runsPerCall = runs;
  req.moduleId = moduleId;
  req.label = req.moduleId + " (" + st.name + ")";
  for (size_t k = 0; k < ss.subs.size(); ++k)
    req.samples.push_back({std::move(ss.subs[k]), std::move(ss.strides[k]), c.symValues[k]});
  // a stage reads its symbolic sizes from its own inputs
  req.symbolic.ranges = c.ranges;
  req.symbolic.findSources = true;
  req.sharding = ss.sharding;
  req.interpretFirst = true;
  CompileResult res = compileGraph(std::move(req));
  if (!res.notSymbolic.empty()) throw Error("stage " + st.name + ": " + res.notSymbolic);
  if (!ss.sharding.empty())
    checkShardedInputs(res.graphs.at(0), ss.sharding, moduleId + " (" + st.name + ")");
  st.program = std::move(res.executable);
  made.programs[key] = st.program;
  ++plan.compiled;
}

// The strides the stage's outputs have at each sample's sizes, for the stages after it.
void recordOutputStrides(const RegionalStage &st,
                         const std::vector<std::vector<int64_t>> &symValues,
                         std::vector<std::vector<Shape>> &strides) {
  const Program &prog = st.training ? st.training->forward().program() : st.program->program();
  for (size_t k = 0; k < strides.size(); ++k) {
    Program spec = prog.symbols.empty() ? Program{} : specializeProgram(prog, symValues[k].data());
    const Program &at = prog.symbols.empty() ? prog : spec;
    for (size_t o = 0; o < st.outputs.size(); ++o)
      strides[k][st.outputs[o]] = at.values[at.outputs[o]].strides;
  }
}

// Per stage of `cut` (`stages`: its stage regions; those below `selected` are g's own), how
// many stages of the plan are likely the same layer: regions of one type (and name, for an
// rcjit::region) over as many nodes. The fast tier weighs a stage's kernels by it (a guess:
// it only chooses which kernels the quick pipeline vectorizes).
std::vector<int> stageRuns(const Graph &cut, const std::vector<int> &stages, size_t selected) {
  auto like = [&](int r) {
    const Region &reg = cut.regions[static_cast<size_t>(r)];
    return reg.type + "/" + (reg.type == "region" ? reg.name : "") + "/" +
           std::to_string(reg.end - reg.begin);
  };
  std::map<std::string, int> count;
  for (int r : stages) {
    if (static_cast<size_t>(r) < selected) ++count[like(r)];
  }
  std::vector<int> runs;
  for (int r : stages) runs.push_back(static_cast<size_t>(r) < selected ? count[like(r)] : 1);
  return runs;
}

} // namespace

RegionalPlan buildRegionalPlan(const Graph &g, const std::vector<Shape> &inputStrides,
                               const std::string &idPrefix, const ExecutableOptions &exec,
                               const std::vector<RegionalProbe> &probes,
                               const std::vector<int64_t> &syms, const std::vector<Symbol> &ranges,
                               const RegionalTraining *training, const ShardingState *sharding) {
  RegionalPlan plan;
  plan.numNodes = static_cast<int>(g.nodes.size());
  plan.graphOutputs = g.outputs;
  plan.graphInputs = g.programInputs();
  // sample 0 is g; then each probe: same nodes and regions, other sizes
  size_t ns = 1 + probes.size();
  std::vector<const Graph *> graphs = {&g};
  std::vector<const std::vector<Shape> *> inStrides = {&inputStrides};
  std::vector<std::vector<int64_t>> symValues = {syms};
  for (const RegionalProbe &pr : probes) {
    if (pr.graph.nodes.size() != g.nodes.size() || pr.graph.regions != g.regions) {
      throw Error("the traced graph at other sizes has other nodes or regions");
    }
    graphs.push_back(&pr.graph);
    inStrides.push_back(&pr.inputStrides);
    symValues.push_back(pr.syms);
  }
  // per sample, the strides of each node's value (inputs now, stage outputs as they compile)
  std::vector<std::vector<Shape>> strides(ns, std::vector<Shape>(g.nodes.size()));
  for (size_t k = 0; k < ns; ++k) {
    for (size_t i = 0; i < plan.graphInputs.size(); ++i)
      strides[k][plan.graphInputs[i]] = inStrides[k]->at(i);
  }
  std::vector<Graph> cuts(ns);
  std::vector<int> stages;
  for (size_t k = 0; k < ns; ++k) stages = cutStages(*graphs[k], cuts[k]);
  const std::vector<bool> needs = training ? needsGrad(g, training->wantGrad) : std::vector<bool>{};
  const StageContext context{exec, ranges, symValues, training, plan.graphInputs, sharding};
  // the CPU stages' kernels compile together once every stage is planned (a stage's program
  // is planned before its code: its output strides key the next stage)
  std::optional<cpu::KernelBatch> batch;
  if (exec.target == Target::cpu) batch.emplace();
  PlanStages made;
  const std::vector<int> runs = stageRuns(cuts[0], stages, g.regions.size());
  for (size_t s = 0; s < stages.size(); ++s) {
    std::vector<int> boundary, outs;
    StageSamples ss;
    ss.subs.resize(ns);
    ss.subs[0] = extractRegion(cuts[0], stages[s], &boundary, &outs);
    if (outs.empty()) continue; // only input nodes, or nothing used later
    for (size_t k = 1; k < ns; ++k) ss.subs[k] = extractRegion(cuts[k], stages[s]);
    RegionalStage st;
    st.region = stages[s] < static_cast<int>(g.regions.size());
    st.name = cuts[0].regions[stages[s]].name;
    st.inputs = programOrder(ss.subs[0], boundary);
    st.outputs = outs;
    for (int id : st.inputs) {
      ss.wantGrad.push_back(training && needs[id]);
      ss.trains = ss.trains || ss.wantGrad.back();
    }
    ss.sharding = stageSharding(context, st.inputs, ss.shardingKey);
    ss.strides.resize(ns);
    for (size_t k = 0; k < ns; ++k) {
      for (int id : st.inputs) ss.strides[k].push_back(strides[k][id]);
    }
    const std::string key = stageKey(exec, ss);
    const std::string moduleId = idPrefix + "_s" + std::to_string(s);
    if (ss.trains)
      trainingStage(context, st, s, std::move(ss), key, moduleId, runs[s], plan, made);
    else
      programStage(context, st, std::move(ss), key, moduleId, runs[s], plan, made);
    recordOutputStrides(st, symValues, strides);
    plan.stages.push_back(std::move(st));
  }
  if (batch) std::tie(plan.batchedKernels, plan.batchSeconds) = batch->finish();
  for (auto &[key, program] : made.programs) StageTable::instance().add(key, program);
  for (auto &[key, training] : made.training) TrainingStageTable::instance().add(key, training);
  plan.assignSlots(g);
  return plan;
}

void RegionalPlan::assignSlots(const Graph &g) {
  std::vector<int> slot(static_cast<size_t>(numNodes), -1);
  numSlots = 0;
  for (int id : graphInputs) slot[id] = numSlots++;
  for (RegionalStage &s : stages) {
    s.outputSlots.clear();
    for (int id : s.outputs) {
      if (slot[id] < 0) slot[id] = numSlots++;
      s.outputSlots.push_back(slot[id]);
    }
  }
  auto slotsOf = [&](const std::vector<int> &ids, const char *what) {
    std::vector<int> out;
    for (int id : ids) {
      if (slot[id] < 0)
        throw Error(std::string("regional plan: ") + what + " node %" + std::to_string(id) +
                    " is neither a program input nor a stage output (internal error)");
      out.push_back(slot[id]);
    }
    return out;
  };
  for (RegionalStage &s : stages) s.inputSlots = slotsOf(s.inputs, "a stage's input");
  graphOutputSlots = slotsOf(graphOutputs, "an output");
  // a stage output is held until its last reader has run, not to the end of the call (a
  // deep model's every layer output at once, in inference)
  const int firstOut = static_cast<int>(graphInputs.size());
  std::vector<int> last(static_cast<size_t>(numSlots), -1); // the last stage reading a slot
  for (size_t i = 0; i < stages.size(); ++i) {
    for (int at : stages[i].outputSlots) last[static_cast<size_t>(at)] = static_cast<int>(i);
    for (int at : stages[i].inputSlots) last[static_cast<size_t>(at)] = static_cast<int>(i);
  }
  for (int at : graphOutputSlots) last[static_cast<size_t>(at)] = -1; // returned: kept
  for (RegionalStage &s : stages) s.lastUseSlots.clear();
  for (int at = firstOut; at < numSlots; ++at) {
    if (last[static_cast<size_t>(at)] >= 0)
      stages[static_cast<size_t>(last[static_cast<size_t>(at)])].lastUseSlots.push_back(at);
  }
  // each output over a dying input of its dtype and shape, at most one output per input
  for (size_t i = 0; i < stages.size(); ++i) {
    RegionalStage &s = stages[i];
    s.into.clear();
    if (!s.program) continue;
    std::vector<bool> taken(s.inputs.size(), false);
    for (size_t k = 0; k < s.outputs.size(); ++k) {
      const Node &out = g.nodes[static_cast<size_t>(s.outputs[k])];
      for (size_t j = 0; j < s.inputs.size(); ++j) {
        const int at = s.inputSlots[j];
        const Node &in = g.nodes[static_cast<size_t>(s.inputs[j])];
        if (taken[j] || at < firstOut || in.dtype != out.dtype || !(in.shape == out.shape) ||
            last[static_cast<size_t>(at)] != static_cast<int>(i) ||
            std::count(s.inputSlots.begin(), s.inputSlots.end(), at) != 1)
          continue;
        taken[j] = true;
        s.into.emplace_back(static_cast<int>(k), static_cast<int>(j));
        break;
      }
    }
  }
}

namespace {
// Whether every input that stage `s` may write an output over (RegionalStage::into) is held
// by this call alone: a stage output no caller, saved value or other stage output shares.
bool intoHeldAlone(const RegionalStage &s, const std::vector<const Tensor *> &in) {
  if (s.into.empty()) return false;
  for (const auto &[k, j] : s.into) {
    if (!detail::heldAlone(*in[static_cast<size_t>(j)])) return false;
  }
  return true;
}

// RegionalPlan::run's per-call arrays
struct RegionalSlots {
  std::vector<Tensor> values, outs; // outs: a stage's outputs, moved into values
  std::vector<const Tensor *> ptr, in;
  bool busy = false;
};
} // namespace

std::vector<Tensor> RegionalPlan::run(const Tensor *const *inputs, size_t n) const {
  // slots [0, graphInputs.size()) are the program inputs, the rest the stages' outputs;
  // the slot arrays are kept per thread between calls (an allocation of a kilobyte or more
  // per call made glibc consolidate all the stages' small frees each time: ~5 % of a
  // tiny call), unless a stage calls a regional function again on this thread
  const size_t firstOut = graphInputs.size();
  thread_local RegionalSlots kept;
  RegionalSlots local;
  RegionalSlots &slots = kept.busy ? local : kept;
  struct Release {
    RegionalSlots &s;
    ~Release() {
      for (Tensor &t : s.values) t = Tensor();
      s.outs.clear();
      s.busy = false;
    }
  } release{slots};
  slots.busy = true;
  slots.values.resize(static_cast<size_t>(numSlots) - firstOut);
  slots.ptr.assign(static_cast<size_t>(numSlots), nullptr);
  std::vector<Tensor> &values = slots.values;
  std::vector<const Tensor *> &ptr = slots.ptr;
  for (size_t i = 0; i < firstOut && i < n; ++i) ptr[i] = inputs[i];
  std::vector<const Tensor *> &in = slots.in;
  std::vector<Tensor> &outs = slots.outs;
  static const std::vector<std::pair<int, int>> none;
  for (const RegionalStage &s : stages) {
    in.clear();
    for (int at : s.inputSlots) in.push_back(ptr[at]);
    if (s.training) {
      outs = s.training->run(in.data(), in.size());
    } else {
      s.program->runInto(in.data(), in.size(), intoHeldAlone(s, in) ? s.into : none, outs);
    }
    for (size_t o = 0; o < outs.size(); ++o) {
      const size_t at = static_cast<size_t>(s.outputSlots[o]);
      values[at - firstOut] = std::move(outs[o]);
      ptr[at] = &values[at - firstOut];
    }
    for (int at : s.lastUseSlots) values[static_cast<size_t>(at) - firstOut] = Tensor();
  }
  std::vector<Tensor> result;
  result.reserve(graphOutputSlots.size());
  for (int at : graphOutputSlots) result.push_back(*ptr[at]);
  return result;
}

std::string RegionalPlan::print() const {
  std::ostringstream os;
  os << "regional: " << stages.size() << " stages, " << compiled << " compiled, " << reused
     << " reused";
  if (batchedKernels > 0) {
    os << "; the stages' " << batchedKernels << " new loop kernels compiled together in "
       << explainMs(batchSeconds) << " (not in a stage's own compile time)";
  }
  os << "\n";
  for (size_t i = 0; i < stages.size(); ++i) {
    const RegionalStage &s = stages[i];
    os << "  stage " << i << ": " << s.name << (s.reused ? " (reused)" : " (compiled)") << ", ";
    if (s.training) {
      const Executable *b = s.training->backwardIfCompiled();
      os << s.training->forward().program().steps.size() << " forward steps, "
         << (b ? std::to_string(b->program().steps.size()) : std::string("(not yet compiled)"))
         << " backward steps, " << s.training->savedBytes() << " bytes saved\n";
    } else {
      const std::string tier = tierNote(*s.program);
      os << s.program->program().steps.size() << " steps" << (tier.empty() ? "" : "; " + tier)
         << "\n";
    }
  }
  return os.str();
}

} // namespace rcjit
