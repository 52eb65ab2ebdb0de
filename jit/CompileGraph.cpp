// compileGraph: the compile path as one straight-line list of announced steps.
#include "jit/CompileGraph.h"

#include <algorithm>
#include <chrono>
#include <iterator>
#include <sstream>

#include <omp.h>

#include <rcjit/Error.h>

#include "cache/Key.h"
#include "cache/ObjectStore.h"
#include "jit/Pipeline.h"
#include "jit/Tiered.h"
#include "support/CompileCancel.h"
#include "support/Events.h"
#include "support/Log.h"
#include "targets/FastestOf.h"
#include "targets/Lower.h"
#include "targets/SymbolicProgram.h"
#include "targets/Target.h"
#include "targets/cpu/CpuKernels.h"
#include "tracer/GraphIO.h"
#include "tracer/GraphVerify.h"

namespace rcjit {

namespace {

using Clock = std::chrono::steady_clock;

// Times and announces the steps of one compile.
class Steps {
public:
  Steps(const CompileRequest &r, CompileResult &res) : r_(r), res_(res) {}

  // Runs `fn` as step `name` of `phase` (passes, lower, target: the report's compile-time
  // split); `show` gives the text the passes log prints after it.
  template <class Fn, class Show>
  auto run(const std::string &name, const char *phase, Fn &&fn, Show &&show) {
    throwIfCompileCancelled(); // a background compile stops here at exit (jit/Tiered.h)
    auto t0 = Clock::now();
    auto out = fn();
    double s = std::chrono::duration<double>(Clock::now() - t0).count();
    res_.times.push_back({name, s});
    if (logging::wanted(logging::Kind::passes)) {
      logging::emit(logging::CompileStepEvent{.graph = r_.label.empty() ? r_.moduleId : r_.label,
                                              .step = name,
                                              .seconds = s,
                                              .result = show(out),
                                              .phase = phase});
    }
    return out;
  }

private:
  const CompileRequest &r_;
  CompileResult &res_;
};

// The graph passes, one step each, with the verifier after each.
Graph passGraph(const GraphSample &s, const std::vector<Pass> &passes, Steps &steps,
                bool announce) {
  Graph g = s.graph;
  if (verifyIrEnabled()) verifyGraph(g, "tracing");
  if (s.optimized) return g;
  for (const Pass &p : passes) {
    auto runPass = [&] {
      try {
        return p.run(g);
      } catch (const Error &e) {
        throw Error("pass " + p.name + ": " + e.what());
      }
    };
    g = announce
            ? steps.run(p.name, "passes", runPass, [](const Graph &out) { return printGraph(out); })
            : runPass();
    if (verifyIrEnabled()) verifyGraph(g, "pass " + p.name);
  }
  return g;
}

// The target must run every step of the program: otherwise an Error naming the step.
void checkTarget(const TargetInfo &t, const Program &p) {
  for (const Step &s : p.steps) {
    if (std::string why = t.unsupportedStep(p, s); !why.empty()) {
      throw Error(std::string("compile for ") + t.name + ": " + why);
    }
  }
}

// Whether the fitted program reads symbol `sym` anywhere.
bool usesSymbol(const Program &p, int32_t sym) {
  auto in = [&](const SizeExpr &e) {
    return std::find(e.syms.begin(), e.syms.end(), sym) != e.syms.end();
  };
  for (const SymField &f : p.symbols.fields) {
    if (in(f.expr)) return true;
  }
  for (const LoopKernel &k : p.kernels) {
    for (const SizeExpr &e : k.domain) {
      if (in(e)) return true;
    }
    for (const KernelTensor &t : k.tensors) {
      for (const SizeExpr &e : t.strides) {
        if (in(e)) return true;
      }
    }
  }
  return false;
}

// Where a symbolic program reads its sizes: given, or found among its inputs' dims (the
// first dim whose value equals the symbol in every sample). Throws when a used symbol is
// no input's dim.
void setSymbolSources(Program &p, const CompileRequest &r) {
  const SymbolicSpec &spec = r.symbolic;
  p.symbols.ranges = spec.ranges;
  if (!spec.findSources) {
    p.symbols.sources = spec.sources;
    return;
  }
  std::vector<std::vector<int64_t>> syms;
  for (const GraphSample &s : r.samples) syms.push_back(s.syms);
  std::vector<std::vector<int>> inputs;
  for (const GraphSample &s : r.samples) inputs.push_back(s.graph.programInputs());
  p.symbols.sources.assign(spec.ranges.size(), {});
  bool any = false;
  for (size_t i = 0; i < spec.ranges.size(); ++i) {
    if (!usesSymbol(p, static_cast<int32_t>(i))) continue;
    any = true;
    std::vector<SymSource> &src = p.symbols.sources[i];
    for (size_t j = 0; j < inputs[0].size() && src.empty(); ++j) {
      size_t rank = r.samples[0].graph.nodes[inputs[0][j]].shape.size();
      for (size_t d = 0; d < rank && src.empty(); ++d) {
        std::vector<int64_t> values;
        for (size_t k = 0; k < r.samples.size(); ++k)
          values.push_back(r.samples[k].graph.nodes[inputs[k][j]].shape[d].value);
        SizeExpr e;
        if (fitSize(values, syms, e) && e.c == 1 && e.syms == std::vector<int32_t>{int32_t(i)})
          src.push_back({static_cast<int>(j), static_cast<int>(d)});
      }
    }
    if (src.empty()) {
      throw Error("symbol s" + std::to_string(i) +
                  " is used, but no program input has it as "
                  "a dim");
    }
  }
  if (!any) p.symbols = ProgramSymbols{};
}

} // namespace

namespace {

// max_autotune of a static CPU graph under the default cost model: each distinct lowering
// of kAutotuneMatmulMacs compiled, the fastest kept on the first call. False when the
// request is not one (then compileGraph compiles it once).
bool autotunesLowering(const CompileRequest &r) {
  return r.exec.autotune && r.exec.target == Target::cpu && r.samples.size() == 1 &&
         !r.samples[0].optimized && r.stop == CompileStop::executable && r.smallMatmulMacs < 0 &&
         smallMatmulMacsFor(Target::cpu) == kCpuSmallMatmulMacs;
}

std::string loweringName(int64_t macs) {
  return macs == 0 ? "library matmuls"
                   : "generated matmuls up to " + std::to_string(macs) + " multiply-adds";
}

// max_autotune's lowering choice in the compile cache: "rcjit-lowering 1 <threshold>", under
// the traced graph's structural hash, the CPU features and the thread count. A later compile
// of the same graph (another process too) compiles only the lowering chosen.
std::string loweringChoiceKey(const CompileRequest &r) {
  const std::string hash = hashGraph(r.samples[0].graph).hex(), features = cpu::cpuFeatures(),
                    threads = std::to_string(omp_get_max_threads());
  return cache::contentKey({"cpu-lowering-choice-1", hash, features, threads});
}

/// The threshold recorded for `key`, or -1 (none, or a malformed record, then evicted).
int64_t recordedLowering(const std::string &key, const std::string &moduleId) {
  cache::ObjectStore &store = cache::ObjectStore::instance();
  cache::Bytes b = store.lookup(key, moduleId + " lowering choice");
  if (!b) return -1;
  std::istringstream in(std::string(b->begin(), b->end()));
  std::string magic;
  int version = 0;
  int64_t macs = -2;
  const bool ok = static_cast<bool>(in >> magic >> version >> macs) && magic == "rcjit-lowering" &&
                  version == 1 && (in >> std::ws).eof() &&
                  (macs == 0 || macs == kCpuSmallMatmulMacs ||
                   std::find(std::begin(kAutotuneMatmulMacs), std::end(kAutotuneMatmulMacs),
                             macs) != std::end(kAutotuneMatmulMacs));
  if (!ok) {
    store.evict(key, "not a well-formed lowering choice record");
    return -1;
  }
  return macs;
}

CompileResult compileFastestLowering(const CompileRequest &r) {
  const std::string key = loweringChoiceKey(r);
  if (const int64_t macs = recordedLowering(key, r.moduleId); macs >= 0) {
    auto t0 = std::chrono::steady_clock::now();
    CompileRequest c = r;
    c.smallMatmulMacs = macs;
    CompileResult res = compileGraph(c);
    logging::emit(logging::CompileStepEvent{
        .graph = r.moduleId,
        .step = "autotune",
        .seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
        .result = "lowering: kept " + loweringName(macs) +
                  " (the choice recorded in the compile cache; no candidate timed)"});
    return res;
  }
  CompileResult first;
  std::vector<std::shared_ptr<Executable>> candidates;
  std::vector<std::string> names;
  std::vector<int64_t> thresholds;
  std::vector<std::string> seen; // graph hashes after the passes
  for (int64_t macs : kAutotuneMatmulMacs) {
    CompileRequest c = r;
    c.smallMatmulMacs = macs < 0 ? kCpuSmallMatmulMacs : macs;
    c.samples[0].graph = optimizeGraphs(c).graphs.at(0);
    c.samples[0].optimized = true;
    const std::string hash = hashGraph(c.samples[0].graph).hex();
    if (std::find(seen.begin(), seen.end(), hash) != seen.end()) continue;
    seen.push_back(hash);
    c.moduleId = r.moduleId + "_mm" + std::to_string(candidates.size());
    CompileResult res = compileGraph(c);
    candidates.push_back(res.executable);
    names.push_back(loweringName(c.smallMatmulMacs));
    thresholds.push_back(c.smallMatmulMacs);
    if (candidates.size() == 1) first = std::move(res);
  }
  auto record = [key, thresholds, moduleId = r.moduleId](int k) {
    const std::string text =
        "rcjit-lowering 1 " + std::to_string(thresholds[static_cast<size_t>(k)]) + "\n";
    cache::ObjectStore::instance().store(
        key, std::span<const uint8_t>(reinterpret_cast<const uint8_t *>(text.data()), text.size()),
        moduleId + " lowering choice");
  };
  first.executable = fastestOf(std::move(candidates), std::move(names), r.moduleId, record);
  return first;
}

} // namespace

namespace {

// One compile's stages over its request, each step announced and timed into its result.
class CompilePath {
public:
  explicit CompilePath(const CompileRequest &r)
      : r_(r), target_(targetInfo(r.exec.target)), steps_(r, res_) {
    if (r.samples.empty()) throw Error("compileGraph: no graph to compile");
  }

  // 1. graph passes: decompose, constant_fold, cse, user passes, dce (jit/Pipeline.cpp says
  //    why in that order); sample 0 is announced, probes at other sizes run the same list.
  void optimize() {
    const size_t ns = r_.samples.size();
    PipelineOptions pipeline = pipelineOptionsFor(r_.exec.target);
    if (r_.smallMatmulMacs >= 0) pipeline.decomposeOptions.smallMatmulMacs = r_.smallMatmulMacs;
    // a symbolic program: small matmuls stay library calls, the same lowering at every
    // sample's sizes (the cost model counts multiply-adds, which vary with the symbols)
    if (ns > 1 && r_.smallMatmulMacs < 0) pipeline.decomposeOptions.smallMatmulMacs = 0;
    const std::vector<Pass> passes =
        defaultPasses(pipeline, r_.label, r_.sharding.empty() ? nullptr : &r_.sharding);
    for (size_t k = 0; k < ns; ++k)
      res_.graphs.push_back(passGraph(r_.samples[k], passes, steps_, k == 0));
  }

  // 2. lowering: fuse, build kernels, plan buffers (targets/Lower.h), for every sample.
  //    False when it stopped after sample 0's fuse (`stopAfterFuse`).
  bool lower(bool stopAfterFuse) {
    const size_t ns = r_.samples.size();
    lowered_.resize(ns);
    LowerOptions opts = target_.lower;
    opts.symbolic = ns > 1;
    for (size_t k = 0; k < ns; ++k) {
      LowerSteps lower(res_.graphs[k], r_.samples[k].strides, opts);
      if (k > 0) {
        lower.fuse();
        lower.buildKernels();
        lowered_[k].program = lower.planBuffers();
        lowered_[k].syms = r_.samples[k].syms;
        continue;
      }
      res_.fusion = steps_.run(
          "fuse", "lower", [&] { return lower.fuse(); },
          [&](const FusionPlan &f) { return printFusionPlan(f, res_.graphs[0]); });
      if (stopAfterFuse) return false;
      steps_.run(
          "build kernels", "lower", [&] { return lower.buildKernels().kernels.size(); },
          [](size_t n) { return std::to_string(n) + " kernels\n"; });
      lowered_[0].program = steps_.run(
          "plan buffers", "lower", [&] { return lower.planBuffers(); },
          [](const Program &p) { return printProgram(p); });
      lowered_[0].syms = r_.samples[0].syms;
    }
    return true;
  }

  // 3. symbolic sizes: one program fitted to every sample (SymbolicProgram.h). False when
  //    the samples do not fit one (res.notSymbolic says why).
  bool fit() {
    if (lowered_.size() == 1) {
      res_.program = std::move(lowered_[0].program);
      return true;
    }
    std::string why;
    bool fitted = steps_.run(
        "fit symbolic sizes", "lower",
        [&] { return fitSymbolicProgram(lowered_, res_.program, why); },
        [&](bool ok) { return ok ? printProgram(res_.program) : "not symbolic: " + why + "\n"; });
    if (!fitted) {
      res_.notSymbolic = why;
      return false;
    }
    setSymbolSources(res_.program, r_);
    return true;
  }

  // 4. the target must run every step (cuda: no eager steps but arange, no GEMM epilogues);
  // 5. target compile: LLVM (cpu) or PTX (cuda) for the kernels, library handles, loading.
  void compileForTarget() {
    steps_.run(
        "check target", "lower", [&] { return (checkTarget(target_, res_.program), 0); },
        [&](int) { return std::string(target_.name) + " runs every step\n"; });
    res_.executable = steps_.run(
        "target compile", "target",
        [&] { return target_.compile(std::move(res_.program), r_.moduleId, r_.exec); },
        [&](const std::shared_ptr<Executable> &e) {
          return std::to_string(e->program().kernels.size()) + " kernels compiled for " +
                 target_.name + "\n";
        });
  }

  CompileResult take() { return std::move(res_); }

private:
  const CompileRequest &r_;
  const TargetInfo &target_;
  CompileResult res_;
  Steps steps_;
  std::vector<ProgramSample> lowered_;
};

} // namespace

CompileResult optimizeGraphs(const CompileRequest &r) {
  CompilePath path(r);
  path.optimize();
  return path.take();
}

CompileResult lowerGraphs(const CompileRequest &r) {
  CompilePath path(r);
  path.optimize();
  if (path.lower(false)) path.fit();
  return path.take();
}

CompileResult compileGraph(CompileRequest r) {
  if (r.samples.empty()) throw Error("compileGraph: no graph to compile");
  if (tiersRequest(r)) return compileTiered(r);
  if (autotunesLowering(r)) return compileFastestLowering(r);
  CompilePath path(r);
  path.optimize();
  if (r.stop == CompileStop::optimized) return path.take();
  if (!path.lower(r.stop == CompileStop::fused) || !path.fit()) return path.take();
  if (r.stop == CompileStop::program) return path.take();
  path.compileForTarget();
  return path.take();
}

} // namespace rcjit
