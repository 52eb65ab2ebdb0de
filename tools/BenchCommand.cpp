// `rcjit bench`: per mode and batch, the first call split into compile and first run, and
// every later call's time (median, IQR, min, sample count; a warning when they spread).
#include "tools/BenchCommand.h"

#include <algorithm>
#include <boost/program_options.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <thread>

#include <rcjit/rcjit.h>

#include "models/Models.h"
#include "models/Safetensors.h"
#include "support/WorkPool.h"
#include "targets/cuda/CudaRuntime.h"
#include "tools/BenchPlot.h"
#include "tools/BenchStats.h"
#include "tools/Cli.h"
#include "tools/Flags.h"
#include "tools/Process.h"
#include "tools/RunCommand.h"

namespace po = boost::program_options;

namespace rcjit::tools {

namespace {

struct Row {
  std::string mode;
  int64_t batch = 0;
  double firstMs = 0;          // the first call: tracing, compiling and running
  std::vector<double> samples; // each timed call after the first, in ms
  CompileStats stats;
  int64_t jobs = 0, packedJobs = 0; // the work pool's jobs in the timed calls, and packed ones
  int64_t remoteHits = 0;           // objects the remote cache (RCJIT_REMOTE_CACHE) served
  double tierWaitMs = 0; // tiered: how long after the first call the optimized tier was ready

  // compile_seconds is the tracing + compiling inside the first call; the rest ran the code
  double compileMs() const { return mode == "eager" ? 0 : stats.compile_seconds * 1e3; }
  double firstRunMs() const { return std::max(0.0, firstMs - compileMs()); }
  Spread spread() const { return summarize(samples); }
};

/// eager's median over `r`'s median at r's batch (above 1: r is faster), or 0 where r is
/// eager itself or eager was not run at that batch.
double speedupVsEager(const Row &r, const std::vector<Row> &rows) {
  if (r.mode == "eager") return 0;
  for (const Row &e : rows) {
    if (e.mode != "eager" || e.batch != r.batch) continue;
    const double mine = r.spread().median, theirs = e.spread().median;
    return mine > 0 && theirs > 0 ? theirs / mine : 0;
  }
  return 0;
}

// What the user asked for, as run: the table's title, the JSON's options and the plot's title.
struct BenchOptions {
  std::string model, target, label; // label: "cpu" or "cuda (<GPU name>)"
  std::vector<std::string> modes;
  std::vector<int64_t> batches;
  ModelConfig config; // batch: the last one run
  int layers = 0;     // the depth built: --layers, or the model's own
  bool perStack = false;
  int reps = 0;
  bool warm = false, keepCache = false;
  std::string cacheDir, weights; // "" when not given
};

Mode parseMode(const std::string &m) {
  if (m == "eager") return Mode::eager;
  if (m == "full" || m == "dynamic" || m == "max-autotune" || m == "reduce-overhead")
    return Mode::full;
  if (m == "regional") return Mode::regional;
  throw std::invalid_argument("--modes: unknown mode '" + m +
                              "' (expected eager, full, dynamic, regional, max-autotune, "
                              "reduce-overhead)");
}

// The options every compiled mode gets (--max-autotune, --reduce-overhead), and the modes
// named after torch's `mode=` strings: full compilation with that option on.
struct Tuning {
  bool maxAutotune = false, reduceOverhead = false;
  void apply(const std::string &mode, CompileOptions &o) const {
    o.max_autotune = maxAutotune || mode == "max-autotune";
    o.reduce_overhead = reduceOverhead || mode == "reduce-overhead";
  }
};

// Progress on stderr: a line when a step starts, and one a second at most while it runs.
class Progress {
public:
  Progress(std::ostream &err, std::string what) : err_(err), what_(std::move(what)) {}
  void step(const std::string &s) {
    err_ << "bench: " << what_ << ": " << s << "\n";
    last_ = std::chrono::steady_clock::now();
  }
  void call(int i, int n, std::chrono::steady_clock::time_point since) {
    if (msSince(last_) < 1000) return;
    step("call " + std::to_string(i) + "/" + std::to_string(n) + " (" +
         formatMeasured(msSince(since) / 1e3) + " s)");
  }

private:
  std::ostream &err_;
  std::string what_;
  std::chrono::steady_clock::time_point last_ = std::chrono::steady_clock::now();
};

// The first call of `mode` in a fresh process sharing this one's (warm) disk cache.
Row warmRow(const BenchOptions &o, const ModelConfig &c, const std::string &mode,
            const std::string &cacheDir, const Tuning &tuning) {
  std::error_code ec; // the child writes its figures there, even when nothing was cached
  std::filesystem::create_directories(cacheDir, ec);
  std::string json = cacheDir + "/warm.json";
  // An argument vector, no shell: paths reach the child verbatim, whatever they contain.
  std::vector<std::string> argv = {std::filesystem::read_symlink("/proc/self/exe").string(),
                                   "bench",
                                   "--model=" + o.model,
                                   "--modes=" + mode,
                                   "--batch=" + std::to_string(c.batch),
                                   "--seq=" + std::to_string(c.seq),
                                   "--layers=" + std::to_string(c.layers),
                                   "--dtype=" + std::string(dtypeName(c.dtype)),
                                   "--reps=1",
                                   "--target=" + o.target,
                                   "--keep-cache",
                                   "--cache-dir=" + cacheDir,
                                   "--json=" + json};
  if (!o.weights.empty()) argv.push_back("--weights=" + o.weights);
  if (tuning.maxAutotune) argv.push_back("--max-autotune");
  if (tuning.reduceOverhead) argv.push_back("--reduce-overhead");
  if (runProgram(argv) != 0) throw Error("--warm: the fresh process failed");
  std::ifstream in(json);
  const nlohmann::json r = nlohmann::json::parse(in).at("results").at(0);
  Row row;
  row.mode = mode + "-warm";
  row.batch = c.batch;
  row.firstMs = r.at("first_call_ms");
  row.samples = r.at("samples_ms").get<std::vector<double>>();
  row.stats.compiles = r.at("compiles");
  row.stats.cache_hits = r.at("cache_hits");
  row.stats.compile_seconds = r.at("compile_seconds");
  row.remoteHits = r.at("remote_cache_hits");
  std::remove(json.c_str());
  return row;
}

// What the table and the JSON call the target: "cpu", or "cuda (<GPU name>)".
std::string targetLabel(Target target) {
  return target == Target::cuda ? "cuda (" + cuda::DeviceContext::get(0).info().name + ")" : "cpu";
}

// Times `forward` (taking `inputs`) in `mode`: the first call, then `reps` calls.
template <class F>
Row timeMode(F &&forward, const std::vector<Tensor> &inputs, int64_t batch, const std::string &mode,
             int reps, Target target, const Tuning &tuning, Progress &progress) {
  // a call's time includes its GPU work
  auto sync = [target] {
    if (target == Target::cuda) cuda::DeviceContext::get(0).synchronize();
  };
  CompileOptions opts;
  opts.target = target;
  opts.mode = parseMode(mode);
  tuning.apply(mode, opts);
  auto fn = compile(std::forward<F>(forward), opts);
  Row r;
  r.mode = mode;
  r.batch = batch;
  progress.step(mode == "eager" ? "first call" : "first call (trace, compile, run)");
  const uint64_t remoteHits0 = cache::stats().remote_hits;
  auto t0 = std::chrono::steady_clock::now();
  fn(inputs);
  sync();
  r.firstMs = msSince(t0);
  r.stats = fn.stats();
  r.remoteHits = static_cast<int64_t>(cache::stats().remote_hits - remoteHits0);
  progress.step((mode == "eager" ? "" : "compile " + formatMeasured(r.compileMs()) + " ms, ") +
                "first run " + formatMeasured(r.firstRunMs()) + " ms; timing " +
                plural(reps, "call"));
  r.tierWaitMs = waitForOptimizedTier();
  const WorkPool &pool = WorkPool::instance();
  const int64_t jobs0 = pool.pooledJobs(), packed0 = pool.packedJobs();
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < reps; ++i) {
    auto t1 = std::chrono::steady_clock::now();
    fn(inputs);
    sync();
    r.samples.push_back(msSince(t1));
    progress.call(i + 1, reps, start);
  }
  r.jobs = pool.pooledJobs() - jobs0;
  r.packedJobs = pool.packedJobs() - packed0;
  r.stats = fn.stats();
  return r;
}

Row runOne(const ModelInfo &info, const ModelConfig &c, const std::string &mode, int reps,
           const std::string &weights, Target target, const Tuning &tuning, Progress &progress) {
  if (info.parameters > 100'000'000) progress.step("building the model");
  std::unique_ptr<Model> m = info.build(c);
  if (!weights.empty()) loadWeights(m->module(), weights, WeightNaming::forModel(info.name));
  std::vector<Tensor> inputs = m->makeInputs(c);
  if (target == Target::cuda) {
    m->to(Device::cuda());
    for (Tensor &t : inputs) t = t.to(Device::cuda());
  }
  if (mode == "dynamic") { // dim 1 of every input that is [batch, seq, ...]: symbolic
    for (Tensor &t : inputs) {
      if (t.dim() >= 2 && t.size(1) == c.seq) mark_dynamic(t, 1, 2, std::max<int64_t>(2, c.seq));
    }
  }
  return timeMode([&](const std::vector<Tensor> &in) { return m->forward(in); }, inputs, c.batch,
                  mode, reps, target, tuning, progress);
}

std::string batchLabel(int64_t batch, int64_t seq) {
  return std::to_string(batch) + "x" + std::to_string(seq);
}

std::string layersText(const BenchOptions &o) {
  return plural(o.layers, "layer") + (o.perStack ? " per stack" : "");
}

std::string rowName(const Row &r, int64_t seq) {
  return modeTitle(r.mode) + " b=" + batchLabel(r.batch, seq);
}

void printTable(std::ostream &out, const BenchOptions &o, const std::vector<std::string> &modes,
                const std::vector<Row> &rows) {
  const int64_t seq = o.config.seq;
  out << o.model << " - " << o.label << ", " << dtypeName(o.config.dtype) << ", seq " << seq << ", "
      << layersText(o) << "; " << plural(o.reps, "timed call")
      << " per row after the first; times in ms\n";
  char buf[200];
  const char *fmt = "%-24s| %-7s| %-9s %-9s %-9s %-5s %-9s| %-9s %s";
  auto line = [&] { // without the padding's trailing blanks
    std::string l = buf;
    out << l.substr(0, l.find_last_not_of(' ') + 1) << "\n";
  };
  std::snprintf(buf, sizeof buf, fmt, "", "", "inference", "", "", "", "", "first call", "");
  line();
  std::snprintf(buf, sizeof buf, fmt, "mode", "batch", "median", "IQR", "min", "n", "vs eager",
                "compile", "first run");
  line();
  for (const std::string &mode : modes) {
    for (const Row &r : rows) {
      if (r.mode != mode) continue;
      const Spread s = r.spread();
      const double speedup = speedupVsEager(r, rows);
      char ratio[32] = "-";
      if (speedup > 0) std::snprintf(ratio, sizeof ratio, "%.2fx", speedup);
      std::snprintf(buf, sizeof buf, fmt, modeTitle(mode).c_str(), batchLabel(r.batch, seq).c_str(),
                    formatMeasured(s.median).c_str(), formatMeasured(s.iqr()).c_str(),
                    formatMeasured(s.min).c_str(), std::to_string(s.n).c_str(), ratio,
                    mode == "eager" ? "-" : formatMeasured(r.compileMs()).c_str(),
                    formatMeasured(r.firstRunMs()).c_str());
      line();
    }
  }
  out << "vs eager: eager's median over the row's at the same batch (above 1: faster than "
         "eager); compile: tracing + compiling inside the first call (stats().compile_seconds); "
         "first run: the rest of that call\n";
  for (const Row &r : rows) {
    if (r.mode == "eager") continue;
    out << "  " << r.mode << " b=" << batchLabel(r.batch, o.config.seq) << ": "
        << plural(r.stats.compiles, "compile") << ", " << plural(r.stats.cache_hits, "cache hit");
    out << tierReadyNote(r.tierWaitMs) << "\n";
  }
  for (const Row &r : rows) {
    out << spreadWarning(rowName(r, seq), r.spread())
        << packedWarning(rowName(r, seq), r.packedJobs, r.jobs, "in the timed calls");
  }
}

nlohmann::json toJson(const BenchOptions &o, const std::vector<Row> &rows, const Tuning &tuning) {
  auto orNull = [](const std::string &s) {
    return s.empty() ? nlohmann::json() : nlohmann::json(s);
  };
  nlohmann::json j;
  j["model"] = o.model;
  j["modes"] = o.modes;
  j["batches"] = o.batches;
  j["seq"] = o.config.seq;
  j["layers"] = o.layers;
  if (o.perStack) j["layers_note"] = "per stack: the encoder's and the decoder's each";
  j["layers_from"] = o.config.layers < 0 ? "the model's own depth" : "--layers";
  j["dtype"] = std::string(dtypeName(o.config.dtype));
  j["seed"] = o.config.seed;
  j["reps"] = o.reps;
  j["target"] = o.target;
  j["warm"] = o.warm;
  j["keep_cache"] = o.keepCache;
  j["cache_dir"] = orNull(o.cacheDir); // null: a fresh temporary directory per run
  j["weights"] = orNull(o.weights);    // null: the model's seeded random weights
  j["max_autotune"] = tuning.maxAutotune;
  j["reduce_overhead"] = tuning.reduceOverhead;
  j["machine"] = {{"cpu", hostCpuName()},
                  {"threads", std::thread::hardware_concurrency()},
                  {"target", o.label},
                  {"rcjit", RCJIT_VERSION_STRING_TOOL}};
  j["results"] = nlohmann::json::array();
  for (const Row &r : rows) {
    const Spread s = r.spread();
    const std::string why = spreadProblem(s);
    j["results"].push_back(
        {{"mode", r.mode},
         {"batch", r.batch},
         {"samples_ms", r.samples},
         {"inference_ms", spreadJson(s)},
         {"speedup_vs_eager",
          speedupVsEager(r, rows) > 0 ? nlohmann::json(speedupVsEager(r, rows)) : nlohmann::json()},
         {"first_call_ms", r.firstMs},
         {"compile_ms", r.compileMs()},
         {"first_run_ms", r.firstRunMs()},
         {"compiles", r.stats.compiles},
         {"cache_hits", r.stats.cache_hits},
         {"remote_cache_hits", r.remoteHits},
         {"compile_seconds", r.stats.compile_seconds},
         {"spread_warning", why.empty() ? nlohmann::json() : nlohmann::json(why)},
         {"pool_jobs", r.jobs},
         {"pool_packed_jobs", r.packedJobs}});
  }
  return j;
}

PlotSpec plotSpec(const BenchOptions &o, const std::vector<Row> &rows) {
  PlotSpec p;
  std::string batches;
  for (int64_t b : o.batches) batches += (batches.empty() ? "" : ",") + std::to_string(b);
  p.title = o.model + " inference - " + std::string(dtypeName(o.config.dtype)) + ", batch " +
            batches + " x seq " + std::to_string(o.config.seq) + ", " + layersText(o) + ", " +
            o.label;
  p.subtitle.push_back("machine: " + hostCpuName() + ", " +
                       plural(std::thread::hardware_concurrency(), "thread") + "; rcjit " +
                       RCJIT_VERSION_STRING_TOOL);
  p.subtitle.push_back(plural(o.reps, "timed call") + " per bar after the first; first calls " +
                       (o.keepCache ? "with the cache kept" : "cold (empty compile cache)"));
  if (std::find(o.modes.begin(), o.modes.end(), "eager") == o.modes.end()) {
    p.subtitle.push_back("no eager baseline: eager is not in --modes");
  }
  for (int64_t b : o.batches) {
    PlotGroup g;
    g.label = "b=" + batchLabel(b, o.config.seq);
    for (const Row &r : rows) {
      if (r.batch != b) continue;
      if (r.mode == "eager") {
        g.eager = r.spread();
        g.eagerFirstMs = r.firstMs;
      } else {
        g.bars.push_back({modeTitle(r.mode), r.spread(), r.compileMs(), r.firstRunMs()});
      }
    }
    p.groups.push_back(std::move(g));
  }
  return p;
}

std::vector<int64_t> parseBatches(const std::string &batches) {
  std::vector<int64_t> out;
  for (const std::string &b : splitList(batches)) {
    const std::optional<int64_t> v = parseInteger(b);
    if (!v || *v <= 0)
      throw std::invalid_argument("--batch: '" + b + "' is not a positive integer");
    out.push_back(*v);
  }
  return out;
}

// --onnx: what the flags say of the model's inputs.
struct OnnxFlags {
  std::string path;
  std::vector<std::string> shapeSpecs;
  std::map<std::string, Shape> shapes;
  RandomInputs random;
  bool batchGiven = false, seqGiven = false;
};

// The inputs of `w` at batch `batch` and sequence `seq`: an input's --shape where given, else
// its declared dims with the first two named ones (dim_params) as batch and seq. An explicit
// --batch / --seq replaces dim 0 / dim 1 of a --shape too.
std::vector<Tensor> onnxInputs(const OnnxWorkload &w, const OnnxFlags &f, int64_t batch,
                               int64_t seq) {
  std::map<std::string, Shape> shapes;
  const std::vector<std::string> &names = w.model().input_names();
  for (size_t i = 0; i < names.size(); ++i) {
    Shape s;
    if (auto it = f.shapes.find(names[i]); it != f.shapes.end()) {
      s = it->second;
      if (f.batchGiven && !s.empty()) s[0] = batch;
      if (f.seqGiven && s.size() >= 2) s[1] = seq;
    } else {
      const std::vector<int64_t> dims = w.model().input_shape(i);
      for (size_t d = 0; d < dims.size(); ++d) {
        if (dims[d] < 0 && d >= 2)
          throw Error("--onnx: input '" + names[i] + "' " + w.declaredShape(i) +
                      " has a named dim past the second: give --shape " + names[i] + "=SIZES");
        s.push_back(dims[d] >= 0 ? dims[d] : d == 0 ? batch : seq);
      }
    }
    shapes[names[i]] = s;
  }
  return w.inputs({}, shapes, f.random);
}

// Every mode x batch of the ONNX model `f.path`, as rows; sets o's model, seq, layers, batches.
std::vector<Row> onnxRows(BenchOptions &o, const OnnxFlags &f, Target target, const Tuning &tuning,
                          std::ostream &err) {
  OnnxWorkload w(f.path);
  if (target == Target::cuda) w.model().to(Device::cuda());
  o.model = f.path;
  o.layers = static_cast<int>(w.model().layers().size());
  std::vector<Row> rows;
  std::vector<int64_t> batches;
  for (const std::string &mode : o.modes) {
    for (int64_t b : o.batches) {
      std::vector<Tensor> inputs = onnxInputs(w, f, b, o.config.seq);
      const int64_t batch = inputs.empty() || inputs[0].dim() == 0 ? 1 : inputs[0].size(0);
      for (const Tensor &t : inputs) {
        if (t.dim() >= 2) {
          o.config.seq = t.size(1);
          break;
        }
      }
      if (std::find(batches.begin(), batches.end(), batch) == batches.end())
        batches.push_back(batch);
      for (Tensor &t : inputs) t = t.to(target == Target::cuda ? Device::cuda() : Device::cpu());
      if (mode == "dynamic") w.markDynamic(inputs);
      Progress progress(err, f.path + " " + mode + " b=" + std::to_string(batch));
      if (!o.keepCache) cache::clear(); // cold: empty memory and disk cache
      rows.push_back(timeMode([&w](const std::vector<Tensor> &in) { return w.model()(in); }, inputs,
                              batch, mode, o.reps, target, tuning, progress));
    }
  }
  o.batches = batches;
  return rows;
}

// --onnx: the flags that do not apply are usage errors; --shape parsed; without --batch /
// --seq, a --shape sets them.
void prepareOnnx(const po::variables_map &vm, OnnxFlags &f, BenchOptions &o, int64_t &seq) {
  for (const char *flag : {"model", "layers", "weights", "dtype"}) {
    if (vm.count(flag) && !vm[flag].defaulted())
      throw std::invalid_argument(std::string("--") + flag + " does not apply to --onnx");
  }
  if (o.warm) throw std::invalid_argument("--warm does not apply to --onnx");
  for (const std::string &spec : f.shapeSpecs) {
    auto [name, text] = splitAssignment(spec, "--shape");
    if (!f.shapes.emplace(name, parseShapeText(text, "--shape " + name)).second)
      throw std::invalid_argument("--shape " + name + " given twice");
  }
  f.batchGiven = !vm["batch"].defaulted();
  f.seqGiven = !vm["seq"].defaulted();
  for (const auto &[name, s] : f.shapes) {
    if (!f.batchGiven && !s.empty()) o.batches = {s[0]};
    if (!f.seqGiven && s.size() >= 2) seq = s[1];
  }
  if (f.random.intMax < 1) throw std::invalid_argument("--int-max must be positive");
}

} // namespace

int benchCommand(const std::vector<std::string> &args, std::ostream &out, std::ostream &err) {
  rcjit::NoGradGuard noGrad; // inference: parameters require grad, record nothing
  po::options_description desc("rcjit bench: time a built-in model per mode and batch");
  std::string modes, batches, dtype, json, plot;
  BenchOptions o;
  Tuning tuning;
  OnnxFlags onnx;
  int64_t seq = 128;
  int reps = 10, layers = -1;
  desc.add_options()("help,h", "show this help")(
      "model", po::value(&o.model)->default_value("toy64"), "model name (see 'rcjit models')")(
      "modes", po::value(&modes)->default_value("eager,full,regional"),
      "comma list of modes: eager, full, regional, dynamic (full, with the sequence dim of the "
      "inputs marked dynamic), max-autotune, reduce-overhead (full with that option)")(
      "batch", po::value(&batches)->default_value("1,4"),
      "comma list of batch sizes")("seq", po::value(&seq)->default_value(128), "sequence length")(
      "reps", po::value(&reps)->default_value(10),
      "timed calls after the first")("layers", po::value(&layers)->default_value(-1),
                                     "number of layers (-1: the model's own depth)")(
      "dtype", po::value(&dtype)->default_value("f32"), "parameter dtype: f32 or bf16")(
      "target", po::value(&o.target)->default_value("cpu"), "cpu or cuda (an NVIDIA GPU)")(
      "json", po::value(&json), "also write every sample, the options and the machine to FILE")(
      "plot", po::value(&plot), "draw the results as a bar chart to FILE.svg")(
      "warm", po::bool_switch(&o.warm),
      "also time each first call in a fresh process with a warm disk cache")(
      "cache-dir", po::value(&o.cacheDir),
      "compile cache directory (default: a fresh temporary one, so first calls are cold)")(
      "keep-cache", po::bool_switch(&o.keepCache), "do not clear the cache before each run")(
      "weights", po::value(&o.weights),
      "load parameters from FILE.safetensors (Hugging Face names; every shape checked); "
      "without it the model has seeded random weights")(
      "max-autotune", po::bool_switch(&tuning.maxAutotune),
      "every compiled mode with CompileOptions::max_autotune")(
      "reduce-overhead", po::bool_switch(&tuning.reduceOverhead),
      "every compiled mode with CompileOptions::reduce_overhead")(
      "onnx", po::value(&onnx.path),
      "time this ONNX model instead of --model: inputs from --shape, else the declared dims "
      "with the first two named ones (dim_params) set by --batch and --seq")(
      "shape", po::value(&onnx.shapeSpecs)->composing(),
      "with --onnx: NAME=1x128, an input's shape (random values as in 'rcjit run')")(
      "int-max", po::value(&onnx.random.intMax)->default_value(100),
      "with --onnx: integer inputs (token ids) are below this");
  po::variables_map vm;
  if (!parseFlags(desc, args, vm, out)) return kOk;
  // Every flag, output path and the target are checked before any work starts.
  if (o.target != "cpu" && o.target != "cuda") throw std::invalid_argument("--target: cpu or cuda");
  if (seq <= 0 || reps <= 0) throw std::invalid_argument("--seq and --reps must be positive");
  checkLayersFlag(layers);
  if (dtype != "f32" && dtype != "bf16") throw std::invalid_argument("--dtype: f32 or bf16");
  o.modes = splitList(modes);
  for (const std::string &m : o.modes) parseMode(m);
  o.batches = parseBatches(batches);
  if (o.batches.empty() || o.modes.empty())
    throw std::invalid_argument("--batch and --modes need a value");
  if (!onnx.path.empty()) prepareOnnx(vm, onnx, o, seq);
  const ModelInfo *info = onnx.path.empty() ? &modelNamed(o.model) : nullptr;
  std::ofstream plotFile = openPlotOutput(plot);
  std::ofstream jsonFile = openJsonOutput(json);
  const Target tgt = o.target == "cuda" ? Target::cuda : Target::cpu;
  o.label = targetLabel(tgt); // a clear Error here when there is no GPU
  o.reps = reps;
  o.config.seq = seq;
  o.config.layers = layers;
  o.config.dtype = dtypeFromName(dtype);
  o.layers = layers > 0 ? layers : info ? info->layers : 0;
  o.perStack = o.model == "vit-gpt2";
  std::optional<TempCacheDir> tmp; // default: a fresh cache, so first calls are cold
  std::string cacheDir = o.cacheDir;
  if (cacheDir.empty()) {
    tmp.emplace("bench");
    cacheDir = tmp->path();
  } else {
    cache::set_dir(cacheDir);
  }
  std::vector<Row> rows;
  std::vector<std::string> tableModes = o.modes;
  if (!info) rows = onnxRows(o, onnx, tgt, tuning, err);
  for (const std::string &mode : info ? o.modes : std::vector<std::string>{}) {
    for (int64_t b : o.batches) {
      Progress progress(err, o.model + " " + mode + " b=" + batchLabel(b, seq));
      o.config.batch = b;
      if (!o.keepCache) cache::clear(); // cold: empty memory and disk cache
      rows.push_back(runOne(*info, o.config, mode, reps, o.weights, tgt, tuning, progress));
      if (o.warm && mode != "eager") {
        progress.step("first call again in a fresh process (warm disk cache)");
        rows.push_back(warmRow(o, o.config, mode, cacheDir, tuning));
      }
    }
    if (o.warm && mode != "eager") tableModes.push_back(mode + "-warm");
  }
  printTable(out, o, tableModes, rows);
  if (!json.empty()) {
    jsonFile << toJson(o, rows, tuning).dump(2) << "\n";
    closeOutput(jsonFile, "--json", json);
  }
  if (!plot.empty()) {
    plotFile << plotSvg(plotSpec(o, rows));
    closeOutput(plotFile, "--plot", plot);
    err << "bench: wrote " << plot << "\n";
  }
  return kOk;
}

} // namespace rcjit::tools
