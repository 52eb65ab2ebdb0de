// The safetensors format: header parsing and validation, reading, writing, weight loading.
#include "models/Safetensors.h"

#include <sys/stat.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <fstream>

#include <nlohmann/json.hpp>

#include "support/Regex.h"
#include "tracer/CheckedSize.h"

namespace rcjit::tools {

static_assert(std::endian::native == std::endian::little, "safetensors data is little-endian");

namespace {

using Json = nlohmann::json;

// The largest JSON header read. Upstream safetensors allows 100 MB, but a parsed header
// takes ~20x its size in memory (a 98 MB header cost 1.9 GB); the headers of real models
// are tens of KB (Llama 3.1 8B: ~30 KB), so 16 MiB leaves a wide margin.
constexpr int64_t kMaxHeaderBytes = int64_t{16} << 20;
// A header nests 3 deep ({name: {"shape": [...]}}); deeper input is refused while parsing.
constexpr int kMaxHeaderDepth = 3;

const std::vector<std::pair<std::string, DType>> &dtypeNames() {
  static const std::vector<std::pair<std::string, DType>> names = {
      {"F32", DType::f32}, {"F16", DType::f16}, {"BF16", DType::bf16},   {"F64", DType::f64},
      {"I64", DType::i64}, {"I32", DType::i32}, {"BOOL", DType::boolean}};
  return names;
}

std::string fileDtypeName(DType d) {
  for (const auto &[name, dt] : dtypeNames()) {
    if (dt == d) return name;
  }
  throw Error("safetensors: dtype " + std::string(dtypeName(d)) + " cannot be stored");
}

[[noreturn]] void fail(const std::string &path, const std::string &what) {
  throw Error("safetensors file '" + path + "': " + what);
}

// A non-negative JSON integer that fits int64 (offsets and sizes); `what` names it.
int64_t parseSize(const std::string &path, const std::string &name, const Json &v,
                  const char *what) {
  if (!v.is_number_unsigned() || v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
    fail(path,
         "tensor '" + name + "': " + what + " must hold integers in [0, 2^63), got " + v.dump());
  }
  return static_cast<int64_t>(v.get<uint64_t>());
}

DType parseDtype(const std::string &path, const std::string &name, const Json &v) {
  if (!v.is_string()) fail(path, "tensor '" + name + "': \"dtype\" must be a string");
  for (const auto &[fileName, dt] : dtypeNames()) {
    if (fileName == v.get<std::string>()) return dt;
  }
  fail(path, "tensor '" + name + "': unsupported dtype '" + v.get<std::string>() +
                 "' (supported: F32, F16, BF16, F64, I64, I32, BOOL)");
}

Shape parseShape(const std::string &path, const std::string &name, const Json &v) {
  Shape shape;
  if (!v.is_array()) fail(path, "tensor '" + name + "': \"shape\" must be an array");
  for (const Json &d : v) shape.push_back(parseSize(path, name, d, "\"shape\""));
  return shape;
}

SafetensorsEntry parseEntry(const std::string &path, const std::string &name, const Json &v,
                            int64_t dataBytes) {
  if (!v.is_object()) fail(path, "tensor '" + name + "': header entry must be an object");
  for (const char *key : {"dtype", "shape", "data_offsets"}) {
    if (!v.contains(key)) fail(path, "tensor '" + name + "': header entry lacks \"" + key + "\"");
  }
  SafetensorsEntry e{name, parseDtype(path, name, v["dtype"]), parseShape(path, name, v["shape"])};
  const Json &off = v["data_offsets"];
  if (!off.is_array() || off.size() != 2) {
    fail(path, "tensor '" + name + "': \"data_offsets\" must be [begin, end]");
  }
  e.begin = parseSize(path, name, off[0], "\"data_offsets\"");
  e.end = parseSize(path, name, off[1], "\"data_offsets\"");
  std::string range = "[" + std::to_string(e.begin) + ", " + std::to_string(e.end) + "]";
  if (e.begin > e.end || e.end > dataBytes) {
    fail(path, "tensor '" + name + "': data_offsets " + range + " out of range: the data " +
                   "section holds " + std::to_string(dataBytes) + " bytes (file truncated?)");
  }
  int64_t need = 0;
  try {
    need = detail::checkedBytes(e.shape, e.dtype, "tensor '" + name + "'");
  } catch (const Error &err) {
    fail(path, err.what());
  }
  if (e.end - e.begin != need) {
    fail(path, "tensor '" + name + "': data_offsets " + range + " hold " +
                   std::to_string(e.end - e.begin) + " bytes but " + fileDtypeName(e.dtype) + " " +
                   shapeStr(e.shape) + " needs " + std::to_string(need));
  }
  return e;
}

std::map<std::string, std::string> parseMetadata(const std::string &path, const Json &v) {
  std::map<std::string, std::string> out;
  if (!v.is_object()) fail(path, "\"__metadata__\" must be an object of strings");
  for (const auto &[key, value] : v.items()) {
    if (!value.is_string()) fail(path, "\"__metadata__\" value '" + key + "' is not a string");
    out[key] = value.get<std::string>();
  }
  return out;
}

int64_t readHeaderLength(std::ifstream &in, const std::string &path, int64_t fileBytes) {
  if (fileBytes < 8) {
    fail(path, "truncated: " + std::to_string(fileBytes) +
                   " bytes, shorter than the 8-byte header length");
  }
  uint64_t n = 0;
  in.read(reinterpret_cast<char *>(&n), 8);
  if (n > static_cast<uint64_t>(kMaxHeaderBytes)) {
    fail(path, "header length " + std::to_string(n) + " exceeds rcjit's limit of " +
                   std::to_string(kMaxHeaderBytes) + " bytes (corrupt file?)");
  }
  if (n > static_cast<uint64_t>(fileBytes - 8)) {
    fail(path, "truncated or corrupt: header length " + std::to_string(n) + " exceeds the " +
                   std::to_string(fileBytes - 8) + " bytes that follow it");
  }
  return static_cast<int64_t>(n);
}

} // namespace

SafetensorsReader::SafetensorsReader(std::string path) : path_(std::move(path)) {
  struct stat st {};
  if (::stat(path_.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) { // a FIFO would block the open
    fail(path_, std::string("not a regular file (") +
                    (S_ISFIFO(st.st_mode)  ? "a FIFO"
                     : S_ISDIR(st.st_mode) ? "a directory"
                                           : "a device or socket") +
                    "): refusing to read it");
  }
  std::ifstream in(path_, std::ios::binary | std::ios::ate);
  if (!in) fail(path_, "cannot open for reading");
  int64_t fileBytes = static_cast<int64_t>(in.tellg());
  in.seekg(0);
  int64_t headerBytes = readHeaderLength(in, path_, fileBytes);
  std::string text(static_cast<size_t>(headerBytes), '\0');
  if (!in.read(text.data(), headerBytes)) fail(path_, "cannot read the header");
  dataStart_ = 8 + headerBytes;
  Json header;
  try {
    // Refuse deep nesting while parsing, before it is built.
    header = Json::parse(text, [](int depth, Json::parse_event_t, Json &) {
      if (depth > kMaxHeaderDepth) throw std::length_error("nested deeper than a header nests");
      return true;
    });
  } catch (const Json::exception &e) {
    fail(path_, std::string("bad JSON header: ") + e.what());
  } catch (const std::length_error &e) {
    fail(path_, std::string("bad JSON header: ") + e.what());
  }
  if (!header.is_object()) fail(path_, "the JSON header must be an object");
  try {
    for (const auto &[name, value] : header.items()) {
      if (name == "__metadata__") {
        metadata_ = parseMetadata(path_, value);
      } else {
        entries_.push_back(parseEntry(path_, name, value, fileBytes - dataStart_));
      }
    }
  } catch (const Json::exception &e) { // a value of an unexpected JSON type
    fail(path_, std::string("bad JSON header: ") + e.what());
  }
}

const SafetensorsEntry *SafetensorsReader::find(const std::string &name) const {
  for (const SafetensorsEntry &e : entries_) {
    if (e.name == name) return &e;
  }
  return nullptr;
}

Tensor SafetensorsReader::read(const std::string &name) const {
  const SafetensorsEntry *e = find(name);
  if (!e) fail(path_, "no tensor named '" + name + "'");
  Tensor t = Tensor::empty(e->shape, e->dtype);
  std::ifstream in(path_, std::ios::binary);
  in.seekg(dataStart_ + e->begin);
  if (e->end > e->begin && !in.read(static_cast<char *>(t.data_ptr()), e->end - e->begin)) {
    fail(path_, "tensor '" + name + "': cannot read its " + std::to_string(e->end - e->begin) +
                    " bytes (file truncated or changed?)");
  }
  return t;
}

std::map<std::string, Tensor> readSafetensors(const std::string &path) {
  SafetensorsReader reader(path);
  std::map<std::string, Tensor> out;
  for (const SafetensorsEntry &e : reader.entries()) out[e.name] = reader.read(e.name);
  return out;
}

void writeSafetensors(const std::string &path,
                      const std::vector<std::pair<std::string, Tensor>> &tensors,
                      const std::map<std::string, std::string> &metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::vector<Tensor> data;
  int64_t offset = 0;
  for (const auto &[name, t] : tensors) {
    if (header.contains(name)) fail(path, "duplicate tensor name '" + name + "'");
    Tensor host = t.to(Device::cpu()).contiguous();
    int64_t bytes = host.numel() * static_cast<int64_t>(dtypeSize(host.dtype()));
    header[name] = {{"dtype", fileDtypeName(host.dtype())},
                    {"shape", host.shape()},
                    {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
    data.push_back(host);
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) fail(path, "cannot open for writing");
  uint64_t n = text.size();
  out.write(reinterpret_cast<const char *>(&n), 8);
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  for (const Tensor &t : data) {
    out.write(static_cast<const char *>(t.data_ptr()),
              static_cast<std::streamsize>(t.numel() * static_cast<int64_t>(dtypeSize(t.dtype()))));
  }
  int err = out ? 0 : errno; // a write that already failed left its reason
  if (out) {
    errno = 0;
    out.flush();
    err = errno;
  }
  out.close();
  if (!out) fail(path, std::string("write failed: ") + std::strerror(err ? err : errno));
}

WeightNaming WeightNaming::exact() { return {}; }

WeightNaming WeightNaming::llama() {
  return {"", {}, {"lm_head\\.weight", ".*\\.rotary_emb\\.inv_freq"}};
}

WeightNaming WeightNaming::gpt2() {
  return {"transformer.",
          {".*\\.(c_attn|c_proj|c_fc|q_attn)\\.weight"},
          {"lm_head\\.weight", "(.*\\.)?(attn|crossattention)\\.(masked_)?bias"}};
}

WeightNaming WeightNaming::vitGpt2() {
  return {"",
          {".*\\.(c_attn|c_proj|c_fc|q_attn)\\.weight"},
          {"decoder\\.lm_head\\.weight", ".*\\.(attn|crossattention)\\.(masked_)?bias",
           "encoder\\.pooler\\..*"}};
}

WeightNaming WeightNaming::forModel(const std::string &model) {
  if (model.rfind("llama", 0) == 0) return llama();
  if (model.rfind("vit-gpt2", 0) == 0) return vitGpt2();
  if (model.rfind("gpt2", 0) == 0) return gpt2();
  return exact();
}

namespace {

// Every parameter slot of m and its descendants, by dotted name, in registration order.
void collectSlots(nn::ModuleBase &m, const std::string &prefix,
                  std::vector<std::pair<std::string, Tensor *>> &out) {
  for (const auto &[name, t] : m.own_parameters()) out.emplace_back(prefix + name, t);
  for (const auto &[name, child] : m.children()) collectSlots(*child, prefix + name + ".", out);
}

bool matchesAny(const std::vector<std::regex> &patterns, const std::string &name) {
  return std::any_of(patterns.begin(), patterns.end(),
                     [&](const std::regex &r) { return std::regex_match(name, r); });
}

std::vector<std::regex> compile(const std::vector<std::string> &patterns) {
  return {patterns.begin(), patterns.end()};
}

std::string listNames(const std::vector<std::string> &names) {
  std::string out;
  for (size_t i = 0; i < names.size() && i < 8; ++i) out += (i ? ", " : "") + names[i];
  if (names.size() > 8) out += ", ... (" + std::to_string(names.size()) + " in all)";
  return out;
}

// One planned copy: file tensor -> parameter slot.
struct Assignment {
  const SafetensorsReader *reader;
  std::string fileName;
  std::string paramName;
  Tensor *slot;
  bool transposed;
};

void checkAssignment(const SafetensorsReader &r, const SafetensorsEntry &e, const Assignment &a) {
  Shape want = a.slot->shape();
  if (a.transposed) std::reverse(want.begin(), want.end());
  if (e.shape != want) {
    fail(r.path(), "tensor '" + e.name + "': shape " + shapeStr(e.shape) + " does not match " +
                       "parameter '" + a.paramName + "' " + shapeStr(a.slot->shape()) +
                       (a.transposed ? " (stored transposed, so expected " + shapeStr(want) + ")"
                                     : std::string()));
  }
  DType to = a.slot->dtype();
  bool ok = isFloating(e.dtype) ? isFloating(to)
                                : e.dtype == to || (isIntegral(e.dtype) && isIntegral(to));
  if (!ok) {
    fail(r.path(), "tensor '" + e.name + "': dtype " + std::string(dtypeName(e.dtype)) +
                       " cannot be converted to parameter '" + a.paramName + "' of dtype " +
                       std::string(dtypeName(to)));
  }
}

} // namespace

LoadReport loadWeights(nn::ModuleBase &m, const std::vector<std::string> &paths,
                       const WeightNaming &naming, bool strict) {
  std::vector<SafetensorsReader> readers(paths.begin(), paths.end());
  std::vector<std::pair<std::string, Tensor *>> ordered;
  collectSlots(m, "", ordered);
  std::map<std::string, Tensor *> slots(ordered.begin(), ordered.end());
  std::vector<std::regex> transposed = compile(naming.transposed);
  std::vector<std::regex> ignored = compile(naming.ignored);
  LoadReport report;
  std::vector<Assignment> plan;
  std::map<std::string, bool> assigned;
  for (const SafetensorsReader &reader : readers) {
    for (const SafetensorsEntry &e : reader.entries()) {
      std::string name = slots.count(e.name) ? e.name : naming.modulePrefix + e.name;
      auto it = slots.find(name);
      if (it == slots.end() || assigned[name]) {
        (matchesAny(ignored, e.name) ? report.ignored : report.unexpected).push_back(e.name);
        continue;
      }
      assigned[name] = true;
      plan.push_back({&reader, e.name, name, it->second, matchesAny(transposed, name)});
      checkAssignment(reader, e, plan.back());
    }
  }
  for (const auto &[name, slot] : ordered) {
    if (!assigned[name]) report.missing.push_back(name);
  }
  if (strict && (!report.missing.empty() || !report.unexpected.empty())) {
    fail(listNames(paths), "does not match the model: missing parameters [" +
                               listNames(report.missing) + "], unexpected tensors [" +
                               listNames(report.unexpected) + "]");
  }
  for (const Assignment &a : plan) {
    Tensor t = a.reader->read(a.fileName);
    a.slot->copy_(a.transposed ? transpose(t, 0, 1) : t);
    report.loaded.push_back(a.fileName);
  }
  return report;
}

LoadReport loadWeights(nn::ModuleBase &m, const std::string &path, const WeightNaming &naming,
                       bool strict) {
  return loadWeights(m, std::vector<std::string>{path}, naming, strict);
}

void saveWeights(nn::ModuleBase &m, const std::string &path, const WeightNaming &naming) {
  std::vector<std::regex> transposed = compile(naming.transposed);
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (auto &[name, t] : m.named_parameters()) {
    tensors.emplace_back(name, matchesAny(transposed, name) ? transpose(t, 0, 1) : t);
  }
  writeSafetensors(path, tensors);
}

} // namespace rcjit::tools
