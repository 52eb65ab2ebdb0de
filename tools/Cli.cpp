// The rcjit tool's commands: models, bench, trace. Parsing with Boost.Program_options.
#include "tools/Cli.h"

#include <algorithm>
#include <boost/program_options.hpp>
#include <chrono>
#include <cstdio>
#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <rcjit/rcjit.h>

#include "jit/Pipeline.h"
#include "targets/Lower.h"
#include "targets/cpu/CpuProgram.h"
#include "tools/CacheCommand.h"
#include "tools/Models.h"
#include "tracer/GraphIO.h"
#include "tracer/Tracer.h"

namespace po = boost::program_options;

namespace rcjit::tools {

namespace {

struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

std::vector<std::string> splitList(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

std::vector<int64_t> parseInts(const std::string& s, const char* flag) {
  std::vector<int64_t> out;
  for (const std::string& item : splitList(s)) {
    try {
      size_t used = 0;
      int64_t v = std::stoll(item, &used);
      if (used != item.size() || v <= 0) throw std::invalid_argument(item);
      out.push_back(v);
    } catch (const std::exception&) {
      throw UsageError(std::string("--") + flag + ": '" + item + "' is not a positive integer");
    }
  }
  if (out.empty()) throw UsageError(std::string("--") + flag + ": expected a list like 1,4");
  return out;
}

po::variables_map parse(const po::options_description& desc, const std::vector<std::string>& args) {
  po::variables_map vm;
  po::store(po::command_line_parser(args).options(desc).run(), vm);
  po::notify(vm);
  return vm;
}

double msSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

const char* kUsageText =
    "usage: rcjit <command> [options]\n"
    "\n"
    "commands:\n"
    "  models                 list the built-in models\n"
    "  bench  --model NAME    time a model (first call and steady-state inference)\n"
    "  trace  --model NAME    trace a model and print its graph (--dump graph)\n"
    "  cache  stats|clear|export FILE|import FILE   the persistent compile cache\n"
    "\n"
    "Run 'rcjit <command> --help' for a command's options.\n";

int cmdModels(const std::vector<std::string>& args, std::ostream& out) {
  po::options_description desc("rcjit models: list the built-in models");
  desc.add_options()("help,h", "show this help");
  po::variables_map vm = parse(desc, args);
  if (vm.count("help")) {
    out << desc;
    return kOk;
  }
  for (const ModelInfo& m : builtinModels()) {
    ModelConfig c;
    std::unique_ptr<Model> model = m.build(c);
    int64_t params = parameterCount(model->module());
    char line[160];
    std::snprintf(line, sizeof line, "%-12s %12lld params  %10.2f MB f32  ", m.name.c_str(),
                  static_cast<long long>(params), static_cast<double>(params) * 4 / 1e6);
    out << line << m.description << "\n";
  }
  return kOk;
}

struct BenchRow {
  std::string mode;
  int64_t batch;
  double firstMs;
  double inferMs;
};

int cmdBench(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  po::options_description desc("rcjit bench: time a built-in model");
  std::string model, modes, batches, target;
  int64_t seq = 128;
  int reps = 10, layers = -1;
  desc.add_options()("help,h", "show this help")(
      "model", po::value(&model)->default_value("toy64"), "model name (see 'rcjit models')")(
      "modes", po::value(&modes)->default_value("eager,full,regional"), "comma list of modes: eager, full, regional")(
      "batch", po::value(&batches)->default_value("1,4"), "comma list of batch sizes")(
      "seq", po::value(&seq)->default_value(128), "sequence length")(
      "reps", po::value(&reps)->default_value(10), "timed calls after the first")(
      "layers", po::value(&layers)->default_value(-1), "override the number of layers")(
      "target", po::value(&target)->default_value("cpu"), "cpu");
  po::variables_map vm = parse(desc, args);
  if (vm.count("help")) {
    out << desc;
    return kOk;
  }
  if (target != "cpu") throw UsageError("--target: only 'cpu' is available in this build");
  if (seq <= 0 || reps <= 0) throw UsageError("--seq and --reps must be positive");
  std::vector<std::string> modeList = splitList(modes);
  for (const std::string& m : modeList) {
    if (m != "eager" && m != "full" && m != "regional") {
      throw UsageError("--modes: unknown mode '" + m + "' (expected eager, full, regional)");
    }
  }
  std::vector<int64_t> batchList = parseInts(batches, "batch");
  const ModelInfo& info = findModel(model);
  std::vector<BenchRow> rows;
  for (const std::string& mode : modeList) {
    for (int64_t b : batchList) {
      err << "bench: " << model << " " << mode << " batch " << b << "...\n";
      ModelConfig c;
      c.batch = b;
      c.seq = seq;
      c.layers = layers;
      std::unique_ptr<Model> m = info.build(c);
      std::vector<Tensor> inputs = m->makeInputs(c);
      CompileOptions opts;
      opts.mode = mode == "eager" ? Mode::eager : mode == "full" ? Mode::full : Mode::regional;
      auto fn = compile([&](const std::vector<Tensor>& in) { return m->forward(in); }, opts);
      auto t0 = std::chrono::steady_clock::now();
      fn(inputs);
      double first = msSince(t0);
      std::vector<double> times;
      for (int r = 0; r < reps; ++r) {
        auto t1 = std::chrono::steady_clock::now();
        fn(inputs);
        times.push_back(msSince(t1));
      }
      std::sort(times.begin(), times.end());
      rows.push_back({mode, b, first, times[times.size() / 2]});
    }
  }
  out << "model " << model << " (target cpu, f32, seq " << seq << ", median of " << reps
      << " calls)\n";
  char line[200];
  std::snprintf(line, sizeof line, "%-10s %6s %16s %16s %12s\n", "mode", "batch",
                "first call ms", "inference ms", "vs eager");
  out << line;
  for (const BenchRow& r : rows) {
    double base = 0;
    for (const BenchRow& e : rows) {
      if (e.mode == "eager" && e.batch == r.batch) base = e.inferMs;
    }
    std::string ratio = base > 0 ? std::to_string(base / r.inferMs).substr(0, 5) + "x" : "-";
    std::snprintf(line, sizeof line, "%-10s %6lld %16.3f %16.3f %12s\n", r.mode.c_str(),
                  static_cast<long long>(r.batch), r.firstMs, r.inferMs, ratio.c_str());
    out << line;
  }
  return kOk;
}

int cmdTrace(const std::vector<std::string>& args, std::ostream& out) {
  po::options_description desc("rcjit trace: trace a built-in model and print what it became");
  std::string model, dump;
  int64_t batch = 1, seq = 128;
  int layers = -1;
  desc.add_options()("help,h", "show this help")(
      "model", po::value(&model)->default_value("toy64"), "model name (see 'rcjit models')")(
      "dump", po::value(&dump)->default_value("graph"),
      "what to print: graph (as traced), optimized (after the passes), program (fusion "
      "groups and steps), llvm (optimized LLVM IR), asm (host assembly)")(
      "batch", po::value(&batch)->default_value(1), "batch size")(
      "seq", po::value(&seq)->default_value(128), "sequence length")(
      "layers", po::value(&layers)->default_value(-1), "override the number of layers");
  po::variables_map vm = parse(desc, args);
  if (vm.count("help")) {
    out << desc;
    return kOk;
  }
  const std::vector<std::string> dumps = {"graph", "optimized", "program", "llvm", "asm"};
  if (std::find(dumps.begin(), dumps.end(), dump) == dumps.end()) {
    throw UsageError("--dump: '" + dump + "' is not one of graph, optimized, program, llvm, asm" +
                     (dump == "ptx" ? " (ptx needs the CUDA target, not in this build)" : ""));
  }
  ModelConfig c;
  c.batch = batch;
  c.seq = seq;
  c.layers = layers;
  std::unique_ptr<Model> m = findModel(model).build(c);
  Trace t = traceFunction([&](const std::vector<Tensor>& in) { return std::vector<Tensor>{m->forward(in)}; },
                          m->makeInputs(c));
  if (dump == "graph") {
    out << printGraph(t.graph);
    return kOk;
  }
  Graph g = runPipeline(t.graph, defaultPasses(PipelineOptions{}));
  if (dump == "optimized") {
    out << printGraph(g);
    return kOk;
  }
  std::vector<Shape> strides;
  for (const Tensor& a : t.args) strides.push_back(a.strides());
  for (const Tensor& a : t.captured) strides.push_back(a.strides());
  Program p = lower(g, strides);
  if (dump == "program") {
    out << printProgram(p);
    for (const LoopKernel& k : p.kernels) out << printKernel(k);
    return kOk;
  }
  cpu::CpuProgramOptions po;
  po.keepLlvmIr = dump == "llvm";
  po.keepAssembly = dump == "asm";
  auto cp = cpu::CpuProgram::create(std::move(p), "rcjit_trace_" + model, po);
  out << (dump == "llvm" ? cp->llvmIr() : cp->assembly());
  return kOk;
}

}  // namespace

int runCli(int argc, const char* const* argv, std::ostream& out, std::ostream& err) {
  if (argc < 2) {
    err << kUsageText;
    return kUsage;
  }
  std::string cmd = argv[1];
  std::vector<std::string> args(argv + 2, argv + argc);
  if (cmd == "--help" || cmd == "-h" || cmd == "help") {
    out << kUsageText;
    return kOk;
  }
  const std::map<std::string, std::function<int()>> commands = {
      {"models", [&] { return cmdModels(args, out); }},
      {"bench", [&] { return cmdBench(args, out, err); }},
      {"trace", [&] { return cmdTrace(args, out); }},
      {"cache", [&] { return cacheCommand(args, out, err); }},
  };
  auto it = commands.find(cmd);
  if (it == commands.end()) {
    err << "rcjit: unknown command '" << cmd << "'\n\n" << kUsageText;
    return kUsage;
  }
  try {
    return it->second();
  } catch (const UsageError& e) {
    err << "rcjit " << cmd << ": " << e.what() << "\n";
    return kUsage;
  } catch (const po::error& e) {
    err << "rcjit " << cmd << ": " << e.what() << " (see 'rcjit " << cmd << " --help')\n";
    return kUsage;
  } catch (const std::exception& e) {
    err << "rcjit " << cmd << ": error: " << e.what() << "\n";
    return kFailure;
  }
}

}  // namespace rcjit::tools
