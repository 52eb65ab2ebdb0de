// `rcjit run MODEL.onnx`: inputs from .npy files or seeded random values, one mode, the first
// call and the steady state timed, each output printed and written as .npy.
#include "tools/RunCommand.h"

#include <algorithm>
#include <boost/program_options.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <set>
#include <sstream>

#include <rcjit/rcjit.h>

#include "tools/Cli.h"
#include "tools/Flags.h"
#include "tools/Npy.h"

namespace po = boost::program_options;

namespace rcjit::tools {

std::pair<std::string, std::string> splitAssignment(const std::string &spec,
                                                    const std::string &flag) {
  const size_t eq = spec.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == spec.size())
    throw std::invalid_argument(flag + ": '" + spec + "' is not NAME=VALUE");
  return {spec.substr(0, eq), spec.substr(eq + 1)};
}

Shape parseShapeText(const std::string &text, const std::string &flag) {
  Shape s;
  if (text.empty() || text == "scalar") return s;
  std::string item;
  std::stringstream ss(text);
  while (std::getline(ss, item, text.find(',') != std::string::npos ? ',' : 'x')) {
    const std::optional<int64_t> v = parseInteger(item);
    if (!v || *v < 0)
      throw std::invalid_argument(flag + ": '" + text +
                                  "' is not a shape such as 1x128 (sizes 0 and up)");
    s.push_back(*v);
  }
  return s;
}

namespace {

// splitmix64: the seeded integers of --shape (the same on every machine)
uint64_t mix(uint64_t &state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

bool endsWith(const std::string &s, const std::string &tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

Tensor randomInput(const std::string &name, const Shape &shape, DType dtype, uint64_t seed,
                   int64_t intMax) {
  if (isFloating(dtype)) return Tensor::randn(shape, seed).to(dtype);
  if (dtype == DType::boolean) return Tensor::ones(shape, DType::boolean);
  std::string lower = name;
  std::transform(lower.begin(), lower.end(), lower.begin(), ::tolower);
  if (endsWith(lower, "mask")) return Tensor::ones(shape, dtype);
  if (lower.find("token_type") != std::string::npos) return Tensor::zeros(shape, dtype);
  Tensor t = Tensor::empty(shape, DType::i64);
  uint64_t state = seed;
  int64_t *p = t.data<int64_t>();
  for (int64_t k = 0; k < t.numel(); ++k)
    p[k] = static_cast<int64_t>(mix(state) % static_cast<uint64_t>(intMax));
  return t.to(dtype);
}

// The element type the file declares for each input (f32 where it declares none).
std::vector<DType> declaredDtypes(const onnx::Model &m) {
  std::vector<DType> out;
  for (size_t i = 0; i < m.input_names().size(); ++i) out.push_back(m.input_dtype(i));
  return out;
}

} // namespace

OnnxWorkload::OnnxWorkload(const std::string &path)
    : path_(path), model_(onnx::load(path)), dtypes_(declaredDtypes(model_)) {}

int OnnxWorkload::markDynamic(std::vector<Tensor> &inputs) const {
  int marked = 0;
  for (size_t i = 0; i < inputs.size() && i < model_.input_names().size(); ++i) {
    const std::vector<std::string> params = model_.input_dim_params(i);
    for (size_t d = 0; d < params.size() && static_cast<int>(d) < inputs[i].dim(); ++d) {
      if (params[d].empty() || inputs[i].size(static_cast<int>(d)) < 2) continue;
      mark_dynamic(inputs[i], static_cast<int>(d), 2);
      ++marked;
    }
  }
  return marked;
}

std::string OnnxWorkload::declaredShape(size_t i) const {
  const std::vector<int64_t> dims = model_.input_shape(i);
  const std::vector<std::string> params = model_.input_dim_params(i);
  std::string s = "[";
  for (size_t d = 0; d < dims.size(); ++d) {
    if (d) s += ", ";
    s += dims[d] >= 0                              ? std::to_string(dims[d])
         : d < params.size() && !params[d].empty() ? params[d]
                                                   : "?";
  }
  return s + "]";
}

std::vector<Tensor> OnnxWorkload::inputs(const std::map<std::string, std::string> &files,
                                         const std::map<std::string, Shape> &shapes,
                                         const RandomInputs &random) const {
  const std::vector<std::string> &names = model_.input_names();
  std::string known;
  for (const std::string &n : names) known += (known.empty() ? "" : ", ") + n;
  auto checkName = [&](const std::string &n, const std::string &flag) {
    if (std::find(names.begin(), names.end(), n) == names.end())
      throw Error(flag + " " + n + ": the model has no input '" + n + "' (its inputs: " + known +
                  ")");
  };
  for (const auto &[n, f] : files) {
    checkName(n, "--input");
    if (shapes.count(n)) throw Error("input '" + n + "' is given by both --input and --shape");
  }
  for (const auto &[n, s] : shapes) checkName(n, "--shape");
  std::vector<Tensor> out;
  for (size_t i = 0; i < names.size(); ++i) {
    const std::string &n = names[i];
    const DType want = dtypes_[i];
    Tensor t;
    std::string from;
    if (auto f = files.find(n); f != files.end()) {
      t = readNpy(f->second);
      from = f->second;
    } else if (auto s = shapes.find(n); s != shapes.end()) {
      t = randomInput(n, s->second, want, random.seed + i, random.intMax);
      from = "--shape";
    } else {
      throw Error("input '" + n + "' " + std::string(dtypeName(want)) + " " + declaredShape(i) +
                  " has no value: give --input " + n + "=FILE.npy or --shape " + n + "=SIZES");
    }
    if (t.dtype() != want)
      throw Error("input '" + n + "' (" + from + "): " + std::string(dtypeName(t.dtype())) +
                  ", but the model takes " + std::string(dtypeName(want)));
    const std::vector<int64_t> dims = model_.input_shape(i);
    bool ok = dims.empty() || dims.size() == t.shape().size();
    for (size_t d = 0; ok && d < dims.size(); ++d) ok = dims[d] < 0 || dims[d] == t.shape()[d];
    if (!ok)
      throw Error("input '" + n + "' (" + from + "): shape " + shapeStr(t.shape()) +
                  ", but the model declares " + declaredShape(i));
    out.push_back(t);
  }
  return out;
}

namespace {

using Forward = std::function<std::vector<Tensor>(const std::vector<Tensor> &)>;

struct RunFlags {
  std::string model, outDir, mode = "eager", expected;
  std::vector<std::string> inputs, shapes;
  RandomInputs random;
  bool dynamic = false;
  int reps = 10, show = 6;
  double rtol = 2e-3;
};

// "a/b:0" -> "a_b_0": an output name as a file name
std::string fileNameOf(const std::string &name) {
  std::string s;
  for (char c : name)
    s += std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_' ? c : '_';
  return s.empty() || s[0] == '.' ? "_" + s : s;
}

std::string valuesText(const Tensor &t, int show) {
  const Tensor flat = t.reshape({t.numel()});
  const int64_t n = std::min<int64_t>(show, t.numel());
  if (n <= 0) return "";
  const std::vector<double> v =
      rcjit::slice(flat, 0, 0, n).to(DType::f64).contiguous().to_vector<double>();
  std::string s;
  char buf[32];
  for (double x : v) {
    std::snprintf(buf, sizeof buf, "%.6g", x);
    s += (s.empty() ? "" : " ") + std::string(buf);
  }
  return s + (t.numel() > n ? " ..." : "");
}

// max |got - want| / max |want| (0 when both are all zero)
double relativeError(const Tensor &got, const Tensor &want) {
  const std::vector<double> a = got.to(DType::f64).contiguous().to_vector<double>();
  const std::vector<double> b = want.to(DType::f64).contiguous().to_vector<double>();
  double diff = 0, scale = 0;
  for (size_t k = 0; k < a.size(); ++k) {
    diff = std::max(diff, std::fabs(a[k] - b[k]));
    scale = std::max(scale, std::fabs(b[k]));
  }
  if (std::isnan(diff)) return diff;
  return scale > 0 ? diff / scale : diff;
}

// Compares the outputs with DIR/NAME.npy; returns false when one is over rtol.
bool compareExpected(const RunFlags &f, const std::vector<std::string> &names,
                     const std::vector<Tensor> &outs, std::ostream &out) {
  bool ok = true;
  for (size_t k = 0; k < outs.size(); ++k) {
    const std::string p = f.expected + "/" + fileNameOf(names[k]) + ".npy";
    if (!std::filesystem::exists(p)) {
      out << "  " << names[k] << ": no " << p << " to compare with\n";
      continue;
    }
    const Tensor want = readNpy(p);
    if (want.shape() != outs[k].shape()) {
      out << "  " << names[k] << ": shape " << shapeStr(outs[k].shape()) << ", expected "
          << shapeStr(want.shape()) << " (" << p << ")\n";
      ok = false;
      continue;
    }
    const double e = relativeError(outs[k], want);
    const bool pass = e <= f.rtol;
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.3g", e);
    out << "  " << names[k] << ": relative error " << buf << " vs " << p
        << (pass ? " (ok)" : " (over --rtol)") << "\n";
    ok = ok && pass;
  }
  return ok;
}

void printModel(std::ostream &out, OnnxWorkload &w, const std::vector<Tensor> &inputs,
                const RunFlags &f, double loadMs) {
  onnx::Model &m = w.model();
  const std::vector<std::string> layers = m.layers();
  out << "model " << w.path() << ": opset " << m.opset() << ", producer '" << m.producer() << "', "
      << plural(static_cast<int64_t>(m.named_parameters().size()), "parameter tensor") << ", "
      << plural(static_cast<int64_t>(layers.size()), "repeated layer")
      << (layers.empty() ? "" : " (" + layers.front() + " ... " + layers.back() + ")")
      << "; loaded in " << formatMeasured(loadMs) << " ms\n";
  std::map<std::string, std::string> files;
  for (const std::string &s : f.inputs) files.insert(splitAssignment(s, "--input"));
  for (size_t i = 0; i < inputs.size(); ++i) {
    const std::string &n = m.input_names()[i];
    out << "input  " << n << ": " << dtypeName(inputs[i].dtype()) << " "
        << shapeStr(inputs[i].shape()) << " (declared " << w.declaredShape(i) << "), "
        << (files.count(n) ? "from " + files[n] : "random (--shape)") << "\n";
  }
}

int run(const RunFlags &f, std::ostream &out, std::ostream &err) {
  std::map<std::string, std::string> files;
  std::map<std::string, Shape> shapes;
  for (const std::string &s : f.inputs) {
    auto [n, p] = splitAssignment(s, "--input");
    if (!files.emplace(n, p).second) throw std::invalid_argument("--input " + n + " given twice");
  }
  for (const std::string &s : f.shapes) {
    auto [n, text] = splitAssignment(s, "--shape");
    if (!shapes.emplace(n, parseShapeText(text, "--shape " + n)).second)
      throw std::invalid_argument("--shape " + n + " given twice");
  }
  if (!f.outDir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(f.outDir, ec);
    if (!std::filesystem::is_directory(f.outDir))
      throw Error("--output: cannot create the directory " + f.outDir +
                  (ec ? " (" + ec.message() + ")" : ""));
  }
  auto t0 = std::chrono::steady_clock::now();
  OnnxWorkload w(f.model);
  const double loadMs = msSince(t0);
  std::vector<Tensor> inputs = w.inputs(files, shapes, f.random);
  printModel(out, w, inputs, f, loadMs);
  CompileOptions opts;
  opts.mode = f.mode == "full" ? Mode::full : Mode::regional;
  if (f.dynamic && w.markDynamic(inputs) == 0)
    err << "run: --dynamic: no input dim is named by the file and 2 or more; nothing marked\n";
  Forward fn = [&w](const std::vector<Tensor> &in) { return w.model()(in); };
  std::function<CompileStats()> stats = [] { return CompileStats{}; };
  if (f.mode != "eager") {
    auto cm = compile(w.model(), opts);
    fn = [cm](const std::vector<Tensor> &in) { return cm(in); };
    stats = [cm] { return cm.stats(); };
  }
  err << "run: " << f.mode << (f.dynamic ? " (dynamic)" : "") << ": first call\n";
  t0 = std::chrono::steady_clock::now();
  std::vector<Tensor> outs = fn(inputs);
  const double firstMs = msSince(t0);
  const CompileStats s0 = stats();
  const double tierWaitMs = waitForOptimizedTier();
  std::vector<double> samples;
  for (int i = 0; i < f.reps; ++i) {
    auto t1 = std::chrono::steady_clock::now();
    fn(inputs);
    samples.push_back(msSince(t1));
  }
  const CompileStats s = stats();
  out << "mode " << f.mode << (f.dynamic ? ", dynamic" : "") << ": first call "
      << formatMeasured(firstMs) << " ms";
  if (f.mode != "eager")
    out << " (tracing + compiling " << formatMeasured(s0.compile_seconds * 1e3) << " ms, "
        << plural(s0.compiles, "compile") << ", " << plural(s0.cache_hits, "cache hit") << ")";
  out << "; then " << plural(f.reps, "call") << ": median " << formatMeasured(median(samples))
      << " ms, min " << formatMeasured(*std::min_element(samples.begin(), samples.end())) << " ms";
  if (f.mode != "eager" && s.compiles != s0.compiles)
    out << " (" << plural(s.compiles - s0.compiles, "recompile") << " while timing)";
  out << tierReadyNote(tierWaitMs) << "\n";
  const std::vector<std::string> &names = w.model().output_names();
  for (size_t k = 0; k < outs.size(); ++k) {
    out << "output " << names[k] << ": " << dtypeName(outs[k].dtype()) << " "
        << shapeStr(outs[k].shape()) << ": " << valuesText(outs[k], f.show) << "\n";
    if (!f.outDir.empty()) {
      const std::string p = f.outDir + "/" + fileNameOf(names[k]) + ".npy";
      writeNpy(p, outs[k]);
      out << "  wrote " << p << "\n";
    }
  }
  if (!f.expected.empty() && !compareExpected(f, names, outs, out)) {
    err << "rcjit run: an output differs from --expected by more than --rtol " << f.rtol << "\n";
    return kFailure;
  }
  return kOk;
}

} // namespace

int runCommand(const std::vector<std::string> &args, std::ostream &out, std::ostream &err) {
  NoGradGuard noGrad; // inference: the imported parameters require grad, record nothing
  RunFlags f;
  po::options_description desc(
      "rcjit run MODEL.onnx: run an ONNX model on .npy or seeded random inputs");
  desc.add_options()("help,h", "show this help")(
      "model", po::value(&f.model), "the .onnx file (also the first argument without a flag)")(
      "input", po::value(&f.inputs)->composing(),
      "NAME=FILE.npy: graph input NAME from a NumPy file (repeat per input)")(
      "shape", po::value(&f.shapes)->composing(),
      "NAME=1x128: graph input NAME of that shape with seeded random values: floating inputs "
      "standard normal; integer ones all ones where the name ends in 'mask', zeros where it "
      "holds 'token_type', else uniform in [0, --int-max); bool ones true")(
      "seed", po::value(&f.random.seed)->default_value(0), "seed of the --shape values")(
      "int-max", po::value(&f.random.intMax)->default_value(100),
      "integer --shape values are below this (token ids: at most the vocabulary size)")(
      "output", po::value(&f.outDir), "write each output to DIR/NAME.npy")(
      "mode", po::value(&f.mode)->default_value("eager"), "eager, full or regional")(
      "dynamic", po::bool_switch(&f.dynamic),
      "the input dims the file names (dim_params) symbolic: one compile for every size")(
      "reps", po::value(&f.reps)->default_value(10), "timed calls after the first")(
      "show", po::value(&f.show)->default_value(6), "values printed per output")(
      "expected", po::value(&f.expected),
      "compare each output with DIR/NAME.npy (max |a-b| / max |b|); over --rtol: exit 1")(
      "rtol", po::value(&f.rtol)->default_value(2e-3), "relative error allowed by --expected");
  po::positional_options_description pos;
  pos.add("model", 1);
  po::variables_map vm;
  if (!parseFlags(desc, pos, args, vm, out)) return kOk;
  if (f.model.empty()) throw std::invalid_argument("missing the MODEL.onnx to run");
  if (f.mode != "eager" && f.mode != "full" && f.mode != "regional")
    throw std::invalid_argument("--mode: '" + f.mode + "' is not eager, full or regional");
  if (f.dynamic && f.mode == "eager")
    throw std::invalid_argument("--dynamic needs --mode full or regional");
  if (f.reps < 1 || f.show < 0 || f.random.intMax < 1 || !(f.rtol >= 0))
    throw std::invalid_argument("--reps and --int-max must be positive, --show and --rtol not "
                                "negative");
  return run(f, out, err);
}

} // namespace rcjit::tools
