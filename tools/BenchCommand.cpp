// `rcjit bench`: per mode and batch, the first call (trace + compile + run) and the median
// of later calls, printed in the layout of the published regional-compilation table.
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

#include "targets/cuda/CudaRuntime.h"
#include "tools/Cli.h"
#include "tools/Models.h"
#include "tools/Process.h"
#include "tools/Safetensors.h"

namespace po = boost::program_options;

namespace rcjit::tools {

namespace {

struct Row {
  std::string mode;
  int64_t batch = 0;
  double firstMs = 0, inferMs = 0;
  CompileStats stats;
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

// The first call of `mode` in a fresh process sharing this one's (warm) disk cache.
Row warmRow(const std::string &model, const ModelConfig &c, const std::string &mode,
            const std::string &cacheDir, const std::string &weights, Target target,
            const Tuning &tuning) {
  std::error_code ec; // the child writes its figures there, even when nothing was cached
  std::filesystem::create_directories(cacheDir, ec);
  std::string json = cacheDir + "/warm.json";
  // An argument vector, no shell: paths reach the child verbatim, whatever they contain.
  std::vector<std::string> argv = {std::filesystem::read_symlink("/proc/self/exe").string(),
                                   "bench",
                                   "--model=" + model,
                                   "--modes=" + mode,
                                   "--batch=" + std::to_string(c.batch),
                                   "--seq=" + std::to_string(c.seq),
                                   "--layers=" + std::to_string(c.layers),
                                   "--dtype=" + std::string(dtypeName(c.dtype)),
                                   "--reps=1",
                                   target == Target::cuda ? "--target=cuda" : "--target=cpu",
                                   "--keep-cache",
                                   "--cache-dir=" + cacheDir,
                                   "--json=" + json};
  if (!weights.empty()) argv.push_back("--weights=" + weights);
  if (tuning.maxAutotune) argv.push_back("--max-autotune");
  if (tuning.reduceOverhead) argv.push_back("--reduce-overhead");
  if (runProgram(argv) != 0) throw Error("--warm: the fresh process failed");
  std::ifstream in(json);
  nlohmann::json j = nlohmann::json::parse(in);
  Row r;
  r.mode = mode + "-warm";
  r.batch = c.batch;
  r.firstMs = j["results"][0]["first_call_ms"];
  r.inferMs = j["results"][0]["inference_ms"];
  r.stats.compiles = j["results"][0]["compiles"];
  r.stats.cache_hits = j["results"][0]["cache_hits"];
  r.stats.compile_seconds = j["results"][0]["compile_seconds"];
  std::remove(json.c_str());
  return r;
}

// What the table and the JSON call the target: "cpu", or "cuda (<GPU name>)".
std::string targetLabel(Target target) {
  return target == Target::cuda ? "cuda (" + cuda::DeviceContext::get(0).info().name + ")" : "cpu";
}

Row runOne(const ModelInfo &info, const ModelConfig &c, const std::string &mode, int reps,
           const std::string &weights, Target target, const Tuning &tuning) {
  std::unique_ptr<Model> m = info.build(c);
  if (!weights.empty()) loadWeights(m->module(), weights, WeightNaming::forModel(info.name));
  std::vector<Tensor> inputs = m->makeInputs(c);
  if (target == Target::cuda) {
    m->to(Device::cuda());
    for (Tensor &t : inputs) t = t.to(Device::cuda());
  }
  // a call's time includes its GPU work
  auto sync = [target] {
    if (target == Target::cuda) cuda::DeviceContext::get(0).synchronize();
  };
  CompileOptions opts;
  opts.target = target;
  opts.mode = parseMode(mode);
  tuning.apply(mode, opts);
  if (mode == "dynamic") { // dim 1 of every input that is [batch, seq, ...]: symbolic
    for (Tensor &t : inputs) {
      if (t.dim() >= 2 && t.size(1) == c.seq) mark_dynamic(t, 1, 2, std::max<int64_t>(2, c.seq));
    }
  }
  auto fn = compile([&](const std::vector<Tensor> &in) { return m->forward(in); }, opts);
  Row r;
  r.mode = mode;
  r.batch = c.batch;
  auto t0 = std::chrono::steady_clock::now();
  fn(inputs);
  sync();
  r.firstMs = msSince(t0);
  std::vector<double> times;
  for (int i = 0; i < reps; ++i) {
    auto t1 = std::chrono::steady_clock::now();
    fn(inputs);
    sync();
    times.push_back(msSince(t1));
  }
  r.inferMs = median(times);
  r.stats = fn.stats();
  return r;
}

void printTable(std::ostream &out, const std::string &model, const ModelConfig &c, int reps,
                const std::vector<std::string> &modes, const std::vector<int64_t> &batches,
                const std::vector<Row> &rows, const std::string &target) {
  out << model << " - " << target << ", " << dtypeName(c.dtype) << ", seq " << c.seq
      << ", median of " << reps << " calls; times in ms\n";
  char buf[64];
  std::string head1 = "                        ", head2 = "mode                    ";
  for (const char *part : {"inference", "compile (first call)"}) {
    std::snprintf(buf, sizeof buf, "| %-*s", static_cast<int>(batches.size()) * 10, part);
    head1 += buf;
    head2 += "| ";
    for (int64_t b : batches) {
      std::snprintf(buf, sizeof buf, "%-10s",
                    ("b=" + std::to_string(b) + "x" + std::to_string(c.seq)).c_str());
      head2 += buf;
    }
  }
  out << head1 << "\n" << head2 << "\n";
  for (const std::string &mode : modes) {
    std::snprintf(buf, sizeof buf, "%-24s", modeTitle(mode).c_str());
    std::string line = buf;
    for (int part = 0; part < 2; ++part) {
      line += "| ";
      for (int64_t b : batches) {
        const Row *r = nullptr;
        for (const Row &x : rows) {
          if (x.mode == mode && x.batch == b) r = &x;
        }
        double v = !r ? -1 : part == 0 ? r->inferMs : r->firstMs;
        if (part == 1 && mode == "eager") v = -1; // nothing is compiled
        if (v < 0) {
          std::snprintf(buf, sizeof buf, "%-10s", "-");
        } else {
          std::snprintf(buf, sizeof buf, "%-10.3f", v);
        }
        line += buf;
      }
    }
    out << line << "\n";
  }
  for (const Row &r : rows) {
    if (r.mode == "eager") continue;
    out << "  " << r.mode << " b=" << r.batch << ": " << r.stats.compiles << " compiles, "
        << r.stats.cache_hits << " cache hits, " << r.stats.compile_seconds * 1e3
        << " ms tracing+compiling\n";
  }
}

nlohmann::json toJson(const std::string &model, const ModelConfig &c, int reps,
                      const std::vector<Row> &rows, const std::string &target,
                      const Tuning &tuning) {
  nlohmann::json j;
  j["model"] = model;
  j["max_autotune"] = tuning.maxAutotune;
  j["reduce_overhead"] = tuning.reduceOverhead;
  j["seq"] = c.seq;
  j["dtype"] = std::string(dtypeName(c.dtype));
  j["layers"] = c.layers;
  j["reps"] = reps;
  j["machine"] = {{"cpu", hostCpuName()},
                  {"threads", std::thread::hardware_concurrency()},
                  {"target", target},
                  {"rcjit", RCJIT_VERSION_STRING_TOOL}};
  for (const Row &r : rows) {
    j["results"].push_back({{"mode", r.mode},
                            {"batch", r.batch},
                            {"first_call_ms", r.firstMs},
                            {"inference_ms", r.inferMs},
                            {"compiles", r.stats.compiles},
                            {"cache_hits", r.stats.cache_hits},
                            {"compile_seconds", r.stats.compile_seconds}});
  }
  return j;
}

// A gnuplot single-quoted string: nothing inside is interpreted, '' is a quote (a newline
// would end the command, so it is refused).
std::string gnuplotQuoted(const std::string &s) {
  if (s.find_first_of("\n\r") != std::string::npos) {
    throw Error("--plot: the path must not contain a line break");
  }
  std::string out = "'";
  for (char ch : s) out += ch == '\'' ? std::string("''") : std::string(1, ch);
  return out + "'";
}

void writePlot(const std::string &file, const std::vector<Row> &rows) {
  std::string data = file + ".dat", script = file + ".gp";
  {
    std::ofstream d(data);
    for (const Row &r : rows) {
      if (r.mode == "eager") continue;
      d << '"' << r.mode << " b=" << r.batch << "\" " << r.firstMs << " " << r.inferMs << "\n";
    }
    std::ofstream g(script);
    g << "set terminal svg size 800,500\nset output " << gnuplotQuoted(file) << "\n"
      << "set xlabel 'compile time, first call (ms)'\nset ylabel 'inference time (ms)'\n"
      << "set title 'rcjit: compile time vs inference time'\nset key off\nset grid\n"
      << "plot " << gnuplotQuoted(data)
      << " using 2:3 with points pt 7 ps 1.5, '' using 2:3:1 with labels "
      << "offset 1,1 left\n";
  }
  int rc = runProgram({"gnuplot", script});
  if (rc == -1) {
    throw Error("--plot needs gnuplot, which could not be run (apt-get install gnuplot-nox)");
  }
  if (rc != 0) throw Error("--plot: gnuplot failed on " + script);
  std::remove(data.c_str());
  std::remove(script.c_str());
}

} // namespace

int benchCommand(const std::vector<std::string> &args, std::ostream &out, std::ostream &err) {
  rcjit::NoGradGuard noGrad; // inference: parameters require grad, record nothing
  po::options_description desc("rcjit bench: time a built-in model per mode and batch");
  std::string model, modes, batches, target, dtype, json, plot, cacheDir, weights;
  bool warm = false, keepCache = false;
  Tuning tuning;
  int64_t seq = 128;
  int reps = 10, layers = -1;
  desc.add_options()("help,h", "show this help")("model", po::value(&model)->default_value("toy64"),
                                                 "model name (see 'rcjit models')")(
      "modes", po::value(&modes)->default_value("eager,full,regional"),
      "comma list of modes: eager, full, regional, dynamic (full, with the sequence dim of the "
      "inputs marked dynamic), max-autotune, reduce-overhead (full with that option)")(
      "batch", po::value(&batches)->default_value("1,4"),
      "comma list of batch sizes")("seq", po::value(&seq)->default_value(128), "sequence length")(
      "reps", po::value(&reps)->default_value(10), "timed calls after the first")(
      "layers", po::value(&layers)->default_value(-1), "override the number of layers")(
      "dtype", po::value(&dtype)->default_value("f32"), "parameter dtype: f32 or bf16")(
      "target", po::value(&target)->default_value("cpu"), "cpu or cuda (an NVIDIA GPU)")(
      "json", po::value(&json), "also write every figure and the machine to FILE")(
      "plot", po::value(&plot), "draw compile vs inference time to FILE.svg (gnuplot)")(
      "warm", po::bool_switch(&warm),
      "also time each first call in a fresh process with a warm "
      "disk cache")("cache-dir", po::value(&cacheDir),
                    "compile cache directory (default: a fresh temporary "
                    "one, so first calls are cold)")("keep-cache", po::bool_switch(&keepCache),
                                                     "do not clear the cache before each run")(
      "weights", po::value(&weights),
      "load parameters from FILE.safetensors (Hugging Face "
      "names; every shape checked)")("max-autotune", po::bool_switch(&tuning.maxAutotune),
                                     "every compiled mode with CompileOptions::max_autotune")(
      "reduce-overhead", po::bool_switch(&tuning.reduceOverhead),
      "every compiled mode with CompileOptions::reduce_overhead");
  po::variables_map vm;
  po::store(po::command_line_parser(args).options(desc).run(), vm);
  po::notify(vm);
  if (vm.count("help")) {
    out << desc;
    return kOk;
  }
  if (target != "cpu" && target != "cuda") throw std::invalid_argument("--target: cpu or cuda");
  const Target tgt = target == "cuda" ? Target::cuda : Target::cpu;
  const std::string label = targetLabel(tgt); // a clear Error here when there is no GPU
  if (seq <= 0 || reps <= 0) throw std::invalid_argument("--seq and --reps must be positive");
  checkLayersFlag(layers);
  if (dtype != "f32" && dtype != "bf16") throw std::invalid_argument("--dtype: f32 or bf16");
  std::vector<std::string> modeList = splitList(modes);
  for (const std::string &m : modeList) parseMode(m);
  std::vector<int64_t> batchList;
  for (const std::string &b : splitList(batches)) {
    size_t used = 0;
    int64_t v = 0;
    try {
      v = std::stoll(b, &used);
    } catch (const std::exception &) {
      used = 0;
    }
    if (used != b.size() || v <= 0)
      throw std::invalid_argument("--batch: '" + b + "' is not a positive integer");
    batchList.push_back(v);
  }
  if (batchList.empty() || modeList.empty())
    throw std::invalid_argument("--batch and --modes need a value");
  const ModelInfo &info = modelNamed(model);
  std::ofstream jsonFile = openJsonOutput(json); // checked before the work starts
  ModelConfig c;
  c.seq = seq;
  c.layers = layers;
  c.dtype = dtypeFromName(dtype);
  std::optional<TempCacheDir> tmp; // default: a fresh cache, so first calls are cold
  if (cacheDir.empty()) {
    tmp.emplace("bench");
    cacheDir = tmp->path();
  } else {
    cache::set_dir(cacheDir);
  }
  std::vector<Row> rows;
  std::vector<std::string> tableModes = modeList;
  for (const std::string &mode : modeList) {
    for (int64_t b : batchList) {
      err << "bench: " << model << " " << mode << " batch " << b << " ...\n";
      c.batch = b;
      if (!keepCache) cache::clear(); // cold: empty memory and disk cache
      rows.push_back(runOne(info, c, mode, reps, weights, tgt, tuning));
      if (warm && mode != "eager")
        rows.push_back(warmRow(model, c, mode, cacheDir, weights, tgt, tuning));
    }
    if (warm && mode != "eager") tableModes.push_back(mode + "-warm");
  }
  printTable(out, model, c, reps, tableModes, batchList, rows, label);
  if (!json.empty()) jsonFile << toJson(model, c, reps, rows, label, tuning).dump(2) << "\n";
  if (!plot.empty()) writePlot(plot, rows);
  return kOk;
}

} // namespace rcjit::tools
