// The default pass order and the loop that runs a pass list.
#include "jit/Pipeline.h"

#include <map>
#include <mutex>

#include <rcjit/Passes.h>

#include "tracer/GraphIO.h"

#include <rcjit/Error.h>

#include "jit/Interpreter.h"
#include "jit/passes/ConstantFold.h"
#include "jit/passes/Cse.h"
#include "jit/passes/Dce.h"
#include "jit/passes/EmbeddingGradSum.h"
#include "jit/passes/LinearCeFold.h"
#include "jit/passes/Remat.h"
#include "jit/passes/Zero.h"
#include "targets/Target.h"

namespace rcjit {

namespace {
std::mutex &passesMutex() {
  static std::mutex mu;
  return mu;
}
std::vector<Pass> &userPasses() {
  static std::vector<Pass> passes;
  return passes;
}
// A copy, so a pipeline being built is not affected by later registrations.
std::vector<Pass> registeredPasses() {
  std::lock_guard<std::mutex> lock(passesMutex());
  return userPasses();
}
std::map<std::string, ScheduledPassFn> &scheduledRegistry() {
  static std::map<std::string, ScheduledPassFn> passes;
  return passes;
}
thread_local const ActiveSchedule *activeSchedule = nullptr;
} // namespace

void register_scheduled_pass(std::string name, ScheduledPassFn fn) {
  if (name.empty()) throw Error("register_scheduled_pass: a pass needs a name");
  if (!fn) throw Error("register_scheduled_pass: pass '" + name + "' has no function");
  if (builtinScheduledPasses().count(name)) {
    throw Error("register_scheduled_pass: '" + name + "' is a built-in pass of rcjit");
  }
  std::lock_guard<std::mutex> lock(passesMutex());
  if (!scheduledRegistry().emplace(name, std::move(fn)).second) {
    throw Error("register_scheduled_pass: a pass named '" + name + "' is already registered");
  }
}

bool has_scheduled_pass(const std::string &name) {
  if (builtinScheduledPasses().count(name)) return true;
  std::lock_guard<std::mutex> lock(passesMutex());
  return scheduledRegistry().count(name) > 0;
}

void clear_scheduled_passes() {
  std::lock_guard<std::mutex> lock(passesMutex());
  scheduledRegistry().clear();
}

ScheduleScope::ScheduleScope(const ActiveSchedule *a) : saved_(activeSchedule) {
  activeSchedule = a;
}
ScheduleScope::~ScheduleScope() { activeSchedule = saved_; }

void checkScheduledPasses(const std::vector<std::string> &names, const std::string &who) {
  std::lock_guard<std::mutex> lock(passesMutex());
  for (const std::string &n : names) {
    if (!scheduledRegistry().count(n) && !builtinScheduledPasses().count(n)) {
      throw Error(who + ": no scheduled pass named '" + n +
                  "' is registered (register_scheduled_pass before compiling)");
    }
  }
}

std::vector<Pass> scheduledPasses(const std::string &label, const ShardingState *sharding) {
  const ActiveSchedule *a = activeSchedule;
  if (!a || a->passes.empty()) return {};
  PassContext ctx;
  ctx.function = a->function;
  ctx.graph = label;
  ctx.backward = label.ends_with(" backward");
  ctx.step = a->step;
  ctx.passes = a->passes;
  ctx.memory_budget = a->memoryBudget;
  if (sharding) ctx.sharding = *sharding;
  // the graphs that take the call's inputs: the entry's own (or its training forward)
  if (!a->inputs.empty() && label.starts_with(a->function + " entry ") && !ctx.backward &&
      label.find(" stage ") == std::string::npos) {
    std::vector<Tensor> inputs = a->inputs;
    for (const ShardedInput &in : ctx.sharding.inputs) { // bound as the compiled code binds them
      if (ctx.sharding.stage >= 3 && in.input >= 0 && in.input < static_cast<int>(inputs.size()))
        inputs[static_cast<size_t>(in.input)] = in.param.shard.detach();
    }
    ctx.profile = [inputs](const Graph &g) { return profileGraph(g, inputs); };
  }
  std::vector<Pass> out;
  std::lock_guard<std::mutex> lock(passesMutex());
  for (const std::string &n : a->passes) {
    const ScheduledPassFn *found = nullptr;
    if (auto it = scheduledRegistry().find(n); it != scheduledRegistry().end()) {
      found = &it->second;
    } else if (auto b = builtinScheduledPasses().find(n); b != builtinScheduledPasses().end()) {
      found = &b->second;
    }
    if (!found) {
      throw Error(a->function + ": the pass schedule at step " + std::to_string(a->step) +
                  " names '" + n + "', which is no longer registered");
    }
    ScheduledPassFn fn = *found;
    out.push_back({n, [fn, ctx](const Graph &g) { return fn(g, ctx); }});
  }
  return out;
}

std::string scheduleKey() {
  const ActiveSchedule *a = activeSchedule;
  if (!a || a->passes.empty()) return "";
  std::string key = "passes:";
  for (size_t i = 0; i < a->passes.size(); ++i) key += (i ? "," : "") + a->passes[i];
  return key + "/";
}

bool outsidePassesActive() {
  if (!scheduleKey().empty()) return true;
  std::lock_guard<std::mutex> lock(passesMutex());
  return !userPasses().empty();
}

void register_graph_pass(std::string name, GraphPassFn fn) {
  if (!fn) throw Error("register_graph_pass: pass '" + name + "' has no function");
  std::lock_guard<std::mutex> lock(passesMutex());
  userPasses().push_back({std::move(name), std::move(fn)});
}

void clear_graph_passes() {
  std::lock_guard<std::mutex> lock(passesMutex());
  userPasses().clear();
}

std::string print_graph(const Graph &g) { return printGraph(g); }

PipelineOptions pipelineOptionsFor(Target t) {
  PipelineOptions o;
  o.decomposeOptions.splitLinearBias = targetInfo(t).splitLinearBias;
  o.decomposeOptions.dropDataChecks = !targetInfo(t).hostDataChecks;
  o.decomposeOptions.batchedGemm = targetInfo(t).batchedGemm;
  o.decomposeOptions.smallMatmulMacs = smallMatmulMacsFor(t);
  return o;
}

std::vector<Pass> defaultPasses(const PipelineOptions &opts, const std::string &label,
                                const ShardingState *sharding) {
  std::vector<Pass> passes;
  // decompose first: its scalars (eps, 1/sqrt(D)) then fold, and the casts and constants
  // it emits for each composite are merged by CSE.
  if (opts.decompose) {
    DecomposeOptions d = opts.decomposeOptions;
    passes.push_back({"decompose", [d](const Graph &g) { return decompose(g, d); }});
  }
  // fold before CSE: equal folded constants become mergeable.
  if (opts.constantFold) passes.push_back({"constant_fold", constantFold});
  if (opts.cse) passes.push_back({"cse", cse});
  // a tied embedding's gradient sum as one scatter into the other gradient (after CSE,
  // which could give the embedding gradient a second reader)
  if (opts.embeddingGradSum) passes.push_back({"embedding_grad_sum", foldEmbeddingGradSums});
  // the fused LM head's loss read off its gradient op where a graph holds both (a whole
  // training step; after CSE, which makes their x, w and target the same nodes)
  if (opts.linearCeFold) passes.push_back({"linear_ce_fold", foldLinearCePicks});
  // user passes see the canonical (decomposed, folded, deduplicated) graph
  for (Pass &p : registeredPasses()) passes.push_back(std::move(p));
  // then the pass schedule's, in its order (a schedule's passes build on the user's graph)
  for (Pass &p : scheduledPasses(label, sharding)) passes.push_back(std::move(p));
  // remat after every rewrite (it judges the final order of uses), before DCE, which drops
  // the originals it left without uses; after CSE, which would merge its clones back.
  if (opts.remat) passes.push_back({"remat", [](const Graph &g) { return remat(g); }});
  // DCE last: it removes what folding (the constants' operands) and decompose left unused.
  if (opts.dce) passes.push_back({"dce", dce});
  return passes;
}

Graph runPipeline(const Graph &g, const std::vector<Pass> &passes) {
  Graph cur = g;
  for (const Pass &p : passes) {
    try {
      cur = p.run(cur);
    } catch (const Error &e) {
      throw Error("pass " + p.name + ": " + e.what());
    }
  }
  return cur;
}

} // namespace rcjit
