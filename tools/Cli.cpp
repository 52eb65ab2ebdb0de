// The rcjit tool's commands: models, bench, trace. Parsing with Boost.Program_options.
#include "tools/Cli.h"

#include <sys/stat.h>

#include <algorithm>
#include <boost/program_options.hpp>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <rcjit/rcjit.h>

#include "jit/CompileGraph.h"
#include "jit/Regional.h"
#include "jit/Tiered.h"
#include "models/Models.h"
#include "targets/cpu/CpuProgram.h"
#include "targets/cuda/PtxCodegen.h"
#include "tools/BenchCommand.h"
#include "tools/CacheCommand.h"
#include "tools/DevicesCommand.h"
#include "tools/Flags.h"
#include "tools/LogsCommand.h"
#include "tools/RunCommand.h"
#include "tools/TrainCommand.h"
#include "tracer/GraphIO.h"
#include "tracer/Tracer.h"

namespace po = boost::program_options;

namespace rcjit::tools {

CompileRequest traceRequest(const Trace &t, Target target) {
  CompileRequest r;
  r.exec.target = target;
  r.label = "trace";
  std::vector<Shape> strides;
  for (const Tensor &a : t.args) strides.push_back(a.strides());
  for (const Tensor &a : t.captured) strides.push_back(a.strides());
  r.samples.push_back({t.graph, std::move(strides)});
  return r;
}

std::vector<std::string> splitList(const std::string &s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

std::optional<int64_t> parseInteger(const std::string &text) {
  size_t used = 0;
  int64_t v = 0;
  try {
    v = std::stoll(text, &used);
  } catch (const std::exception &) {
    return std::nullopt;
  }
  if (used != text.size()) return std::nullopt;
  return v;
}

double msSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

std::string hostCpuName() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  }
  return "unknown";
}

std::string modeTitle(const std::string &m) {
  if (m == "eager") return "Baseline (eager)";
  if (m == "full") return "Full compilation";
  if (m == "full-warm") return "Full, warm start";
  if (m == "dynamic") return "Full, dynamic seq";
  if (m == "dynamic-warm") return "Full, dynamic, warm";
  if (m == "regional-warm") return "Regional, warm start";
  if (m == "whole") return "Whole step";
  if (m == "max-autotune") return "Full, max-autotune";
  if (m == "max-autotune-warm") return "Max-autotune, warm";
  if (m == "reduce-overhead") return "Full, reduce-overhead";
  if (m == "reduce-overhead-warm") return "Reduce-overhead, warm";
  return "Regional compilation";
}

double median(std::vector<double> v) {
  if (v.empty()) throw Error("median of no values");
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

std::string plural(int64_t n, const std::string &word, const std::string &words) {
  return std::to_string(n) + " " + (n == 1 ? word : words.empty() ? word + "s" : words);
}

double waitForOptimizedTier() {
  const auto t0 = std::chrono::steady_clock::now();
  waitForBackgroundCompiles(3600);
  return msSince(t0);
}

std::string tierReadyNote(double ms) {
  if (ms < 0.05) return "";
  return "; optimized tier ready " + formatMeasured(ms) +
         " ms after the first call (tiered; the timed calls ran it)";
}

std::string formatMeasured(double v) {
  double a = std::fabs(v);
  if (a == 0 || !std::isfinite(v)) return a == 0 ? "0" : std::to_string(v);
  int decimals = a >= 100 ? 1 : a >= 10 ? 2 : a >= 0.1 ? 3 : 4;
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

std::string markupEscaped(const std::string &s) {
  std::string o;
  for (char c : s) {
    switch (c) {
    case '&':
      o += "&amp;";
      break;
    case '<':
      o += "&lt;";
      break;
    case '>':
      o += "&gt;";
      break;
    case '"':
      o += "&quot;";
      break;
    case '\'':
      o += "&#39;";
      break;
    default:
      o += c;
    }
  }
  return controlEscaped(o);
}

std::string controlEscaped(const std::string &s) {
  std::string o;
  o.reserve(s.size());
  char buf[8];
  for (size_t i = 0; i < s.size(); ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    const auto next = i + 1 < s.size() ? static_cast<unsigned char>(s[i + 1]) : 0;
    if ((c < 0x20 && c != '\n' && c != '\t') || c == 0x7f) {
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      o += buf;
    } else if (c == 0xc2 && next >= 0x80 && next <= 0x9f) { // U+0080-U+009F in UTF-8
      std::snprintf(buf, sizeof buf, "\\u%04x", next);
      o += buf;
      ++i;
    } else {
      o += static_cast<char>(c);
    }
  }
  return o;
}

void checkLayersFlag(int layers) {
  if (layers == 0 || layers < -1) {
    throw std::invalid_argument("--layers: " + std::to_string(layers) +
                                " is not a positive number of layers (-1: the model's own depth)");
  }
}

std::ofstream openJsonOutput(const std::string &path) {
  std::ofstream out;
  if (path.empty()) return out;
  out.open(path);
  if (!out) {
    throw Error("--json: cannot write " + path + " (" + std::strerror(errno) +
                "; checked before running)");
  }
  return out;
}

void closeOutput(std::ofstream &out, const std::string &flag, const std::string &path) {
  int err = out ? 0 : errno; // a write that already failed (a full buffer) left its reason
  if (out) {
    errno = 0;
    out.flush();
    if (!out) err = errno;
  }
  if (out.is_open()) {
    errno = 0;
    out.close(); // a failed close sets failbit too
    if (!out && !err) err = errno;
  }
  if (!out) {
    throw Error(flag + ": cannot write " + path + " (" +
                (err ? std::strerror(err) : "the write failed") + ")");
  }
}

void checkRegularFile(const std::string &path, const std::string &what) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || S_ISREG(st.st_mode)) return;
  const char *kind = S_ISDIR(st.st_mode)    ? "a directory"
                     : S_ISFIFO(st.st_mode) ? "a FIFO"
                     : S_ISSOCK(st.st_mode) ? "a socket"
                     : S_ISCHR(st.st_mode)  ? "a character device"
                     : S_ISBLK(st.st_mode)  ? "a block device"
                                            : "not a regular file";
  throw Error("cannot read " + what + " '" + path + "': it is " + kind + ", not a regular file");
}

TempCacheDir::TempCacheDir(const std::string &what) : previous_(cache::dir()) {
  std::string tmpl = "/tmp/rcjit-" + what + "-XXXXXX";
  if (!mkdtemp(tmpl.data())) throw Error(what + ": cannot create a temporary cache directory");
  path_ = tmpl;
  cache::set_dir(path_);
}

TempCacheDir::~TempCacheDir() {
  cache::set_dir(previous_);
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

namespace {

struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

const char *kUsageText =
    "usage: rcjit <command> [options]\n"
    "\n"
    "commands:\n"
    "  models                 list the built-in models\n"
    "  bench  --model NAME    time a model (first call and steady-state inference)\n"
    "  train  --model NAME    train a model per mode (step time, peak memory, loss)\n"
    "  trace  --model NAME    trace a model and print its graph, kernels, LLVM IR, asm or PTX\n"
    "  run    MODEL.onnx      run an ONNX model on .npy or random inputs (time, outputs)\n"
    "  cache  stats|clear|export FILE|import FILE   the persistent compile cache\n"
    "  logs   FILE [--html OUT]   summarize a RCJIT_TRACE_FILE (compiles, recompiles, breaks)\n"
    "  devices                the CPU feature set, CUDA driver, GPUs, cuBLAS and libdevice here\n"
    "  --version              print rcjit's version\n"
    "\n"
    "Run 'rcjit <command> --help' for a command's options.\n";

int cmdModels(const std::vector<std::string> &args, std::ostream &out) {
  po::options_description desc("rcjit models: list the built-in models");
  desc.add_options()("help,h", "show this help");
  po::variables_map vm;
  if (!parseFlags(desc, args, vm, out)) return kOk;
  char line[200];
  std::snprintf(line, sizeof line, "%-14s %14s %12s  %s\n", "name", "parameters", "f32 memory",
                "description");
  out << line;
  for (const ModelInfo &m : builtinModels()) {
    std::snprintf(line, sizeof line, "%-14s %14lld %9.2f GB  ", m.name.c_str(),
                  static_cast<long long>(m.parameters), static_cast<double>(m.bytesF32) / 1e9);
    out << line << m.description << "\n";
  }
  return kOk;
}

// The PTX of every distinct kernel of the CUDA target's program `p` (the program Target::cuda
// compiles: same request, same options), as one module: what the target loads.
int printPtx(const Program &p, const std::string &model, const std::string &arch,
             std::ostream &out) {
  if (p.kernels.empty()) {
    out << "// no generated kernels: every step of this model is a library call\n";
    return kOk;
  }
  cuda::PtxOptions o;
  o.arch = arch;
  std::vector<int> which;
  out << cuda::compilePtx(cuda::distinctKernels(p.kernels, which), "rcjit_trace_" + model, o).ptx;
  return kOk;
}

int cmdTrace(const std::vector<std::string> &args, std::ostream &out) {
  po::options_description desc("rcjit trace: trace a built-in model and print what it became");
  std::string model, dump, arch, target, mode;
  int64_t batch = 1, seq = 128;
  int layers = -1;
  desc.add_options()("help,h", "show this help")("model", po::value(&model)->default_value("toy64"),
                                                 "model name (see 'rcjit models')")(
      "dump", po::value(&dump)->default_value("graph"),
      "what to print: graph (as traced), optimized (after the graph passes), fusion (the "
      "fusion groups and why each starts), program (steps and kernels), llvm (optimized "
      "LLVM IR), asm (host assembly), ptx (the CUDA target's PTX; needs no GPU)")(
      "target", po::value(&target)->default_value("cpu"),
      "cpu or cuda: whose compile path to follow for optimized, fusion and program (ptx "
      "implies cuda; no GPU needed)")("arch", po::value(&arch)->default_value("sm_80"),
                                      "GPU architecture of --dump ptx (sm_80, sm_90, ...)")(
      "batch", po::value(&batch)->default_value(1),
      "batch size")("seq", po::value(&seq)->default_value(128), "sequence length")(
      "layers", po::value(&layers)->default_value(-1), "override the number of layers")(
      "mode", po::value(&mode)->default_value("full"),
      "full (one program) or regional (each distinct region compiled once: program prints "
      "the stages and which are reused, llvm each compiled stage's IR)");
  po::variables_map vm;
  if (!parseFlags(desc, args, vm, out)) return kOk;
  const std::vector<std::string> dumps = {"graph", "optimized", "fusion", "program",
                                          "llvm",  "asm",       "ptx"};
  if (std::find(dumps.begin(), dumps.end(), dump) == dumps.end()) {
    throw UsageError("--dump: '" + dump +
                     "' is not one of graph, optimized, fusion, program, llvm, asm, ptx");
  }
  if (target != "cpu" && target != "cuda") {
    throw UsageError("--target: '" + target + "' is not cpu or cuda");
  }
  checkLayersFlag(layers);
  if (mode != "full" && mode != "regional") {
    throw UsageError("--mode: '" + mode + "' is not full or regional");
  }
  if (mode == "regional" &&
      (target == "cuda" || (dump != "graph" && dump != "program" && dump != "llvm"))) {
    throw UsageError("--mode regional dumps graph, program or llvm for the cpu target");
  }
  if ((dump == "llvm" || dump == "asm") && target == "cuda") {
    throw UsageError("--dump " + dump + " shows the CPU target's code; for cuda use --dump ptx");
  }
  const std::vector<std::string> &archs = cuda::knownArchs();
  if (std::find(archs.begin(), archs.end(), arch) == archs.end()) {
    throw UsageError("--arch: '" + arch + "' is not a GPU architecture LLVM 19 targets (" +
                     archs.front() + " to " + archs.back() + ")");
  }
  ModelConfig c;
  c.batch = batch;
  c.seq = seq;
  c.layers = layers;
  std::unique_ptr<Model> m = modelNamed(model).build(c);
  Trace t = traceFunction(
      [&](const std::vector<Tensor> &in) { return std::vector<Tensor>{m->forward(in)}; },
      m->makeInputs(c));
  if (dump == "graph") {
    out << printGraph(t.graph);
    return kOk;
  }
  if (mode == "regional") { // the stages as rcjit::compile's regional mode builds them
    std::vector<Shape> strides;
    for (const Tensor &a : t.args) strides.push_back(a.strides());
    for (const Tensor &a : t.captured) strides.push_back(a.strides());
    ExecutableOptions exec;
    exec.keepLlvmIr = dump == "llvm";
    RegionalPlan plan = buildRegionalPlan(t.graph, strides, "rcjit_trace_" + model, exec);
    if (dump == "program") {
      out << plan.print();
      return kOk;
    }
    for (const RegionalStage &st : plan.stages) {
      if (st.reused || !st.program) continue;
      out << "; stage " << st.name << "\n" << st.program->llvmIr();
    }
    return kOk;
  }
  CompileRequest r =
      traceRequest(t, dump == "ptx" || target == "cuda" ? Target::cuda : Target::cpu);
  r.moduleId = "rcjit_trace_" + model;
  r.stop = dump == "optimized"               ? CompileStop::optimized
           : dump == "fusion"                ? CompileStop::fused
           : dump == "llvm" || dump == "asm" ? CompileStop::executable
                                             : CompileStop::program;
  r.exec.keepLlvmIr = dump == "llvm";
  r.exec.keepAssembly = dump == "asm";
  CompileResult res = compileGraph(std::move(r));
  if (dump == "optimized") {
    out << printGraph(res.graphs[0]);
    return kOk;
  }
  if (dump == "fusion") {
    out << printFusionPlan(res.fusion, res.graphs[0]);
    return kOk;
  }
  if (dump == "ptx") return printPtx(res.program, model, arch, out);
  if (dump == "program") {
    out << printProgram(res.program);
    for (const LoopKernel &k : res.program.kernels) out << printKernel(k);
    return kOk;
  }
  auto cp = std::dynamic_pointer_cast<const cpu::CpuProgram>(res.executable);
  if (cp->program().kernels.empty()) {
    out << "; no generated kernels: every step of this model is a library call\n"
        << printProgram(cp->program());
    return kOk;
  }
  out << (dump == "llvm" ? cp->llvmIr() : cp->assembly());
  return kOk;
}

} // namespace

int runCli(int argc, const char *const *argv, std::ostream &out, std::ostream &err) {
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
  if (cmd == "--version" || cmd == "version") {
    out << "rcjit " << RCJIT_VERSION_STRING_TOOL << "\n";
    return kOk;
  }
  const std::map<std::string, std::function<int()>> commands = {
      {"models", [&] { return cmdModels(args, out); }},
      {"bench", [&] { return benchCommand(args, out, err); }},
      {"train", [&] { return trainCommand(args, out, err); }},
      {"trace", [&] { return cmdTrace(args, out); }},
      {"cache", [&] { return cacheCommand(args, out, err); }},
      {"logs", [&] { return logsCommand(args, out, err); }},
      {"devices", [&] { return devicesCommand(args, out, err); }},
      {"run", [&] { return runCommand(args, out, err); }},
  };
  auto it = commands.find(cmd);
  if (it == commands.end()) {
    err << "rcjit: unknown command '" << cmd << "'\n\n" << kUsageText;
    return kUsage;
  }
  try {
    return it->second();
  } catch (const std::invalid_argument &e) {
    err << "rcjit " << cmd << ": " << e.what() << "\n";
    return kUsage;
  } catch (const UsageError &e) {
    err << "rcjit " << cmd << ": " << e.what() << "\n";
    return kUsage;
  } catch (const po::error &e) {
    err << "rcjit " << cmd << ": " << e.what() << " (see 'rcjit " << cmd << " --help')\n";
    return kUsage;
  } catch (const std::exception &e) {
    err << "rcjit " << cmd << ": error: " << e.what() << "\n";
    return kFailure;
  }
}

} // namespace rcjit::tools
