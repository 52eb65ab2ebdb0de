// The safetensors format: header parsing and validation, reading, writing.
#include "tracer/Safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "tracer/CheckedSize.h"

namespace rcjit {

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

// A non-negative JSON integer that fits int64 (offsets and sizes); `what` names it.
int64_t parseSize(const std::string &path, const std::string &name, const Json &v,
                  const char *what) {
  if (!v.is_number_unsigned() || v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
    failSafetensors(path, "tensor '" + name + "': " + what +
                              " must hold integers in [0, 2^63), got " + v.dump());
  }
  return static_cast<int64_t>(v.get<uint64_t>());
}

DType parseDtype(const std::string &path, const std::string &name, const Json &v) {
  if (!v.is_string()) failSafetensors(path, "tensor '" + name + "': \"dtype\" must be a string");
  for (const auto &[fileName, dt] : dtypeNames()) {
    if (fileName == v.get<std::string>()) return dt;
  }
  failSafetensors(path, "tensor '" + name + "': unsupported dtype '" + v.get<std::string>() +
                            "' (supported: F32, F16, BF16, F64, I64, I32, BOOL)");
}

Shape parseShape(const std::string &path, const std::string &name, const Json &v) {
  Shape shape;
  if (!v.is_array()) failSafetensors(path, "tensor '" + name + "': \"shape\" must be an array");
  for (const Json &d : v) shape.push_back(parseSize(path, name, d, "\"shape\""));
  return shape;
}

SafetensorsEntry parseEntry(const std::string &path, const std::string &name, const Json &v,
                            int64_t dataBytes) {
  if (!v.is_object())
    failSafetensors(path, "tensor '" + name + "': header entry must be an object");
  for (const char *key : {"dtype", "shape", "data_offsets"}) {
    if (!v.contains(key))
      failSafetensors(path, "tensor '" + name + "': header entry lacks \"" + key + "\"");
  }
  SafetensorsEntry e{name, parseDtype(path, name, v["dtype"]), parseShape(path, name, v["shape"])};
  const Json &off = v["data_offsets"];
  if (!off.is_array() || off.size() != 2) {
    failSafetensors(path, "tensor '" + name + "': \"data_offsets\" must be [begin, end]");
  }
  e.begin = parseSize(path, name, off[0], "\"data_offsets\"");
  e.end = parseSize(path, name, off[1], "\"data_offsets\"");
  std::string range = "[" + std::to_string(e.begin) + ", " + std::to_string(e.end) + "]";
  if (e.begin > e.end || e.end > dataBytes) {
    failSafetensors(path, "tensor '" + name + "': data_offsets " + range +
                              " out of range: the data " + "section holds " +
                              std::to_string(dataBytes) + " bytes (file truncated?)");
  }
  int64_t need = 0;
  try {
    need = detail::checkedBytes(e.shape, e.dtype, "tensor '" + name + "'");
  } catch (const Error &err) {
    failSafetensors(path, err.what());
  }
  if (e.end - e.begin != need) {
    failSafetensors(path, "tensor '" + name + "': data_offsets " + range + " hold " +
                              std::to_string(e.end - e.begin) + " bytes but " +
                              fileDtypeName(e.dtype) + " " + shapeStr(e.shape) + " needs " +
                              std::to_string(need));
  }
  return e;
}

std::map<std::string, std::string> parseMetadata(const std::string &path, const Json &v) {
  std::map<std::string, std::string> out;
  if (!v.is_object()) failSafetensors(path, "\"__metadata__\" must be an object of strings");
  for (const auto &[key, value] : v.items()) {
    if (!value.is_string())
      failSafetensors(path, "\"__metadata__\" value '" + key + "' is not a string");
    out[key] = value.get<std::string>();
  }
  return out;
}

int64_t readHeaderLength(std::ifstream &in, const std::string &path, int64_t fileBytes) {
  if (fileBytes < 8) {
    failSafetensors(path, "truncated: " + std::to_string(fileBytes) +
                              " bytes, shorter than the 8-byte header length");
  }
  uint64_t n = 0;
  in.read(reinterpret_cast<char *>(&n), 8);
  if (n > static_cast<uint64_t>(kMaxHeaderBytes)) {
    failSafetensors(path, "header length " + std::to_string(n) + " exceeds rcjit's limit of " +
                              std::to_string(kMaxHeaderBytes) + " bytes (corrupt file?)");
  }
  if (n > static_cast<uint64_t>(fileBytes - 8)) {
    failSafetensors(path, "truncated or corrupt: header length " + std::to_string(n) +
                              " exceeds the " + std::to_string(fileBytes - 8) +
                              " bytes that follow it");
  }
  return static_cast<int64_t>(n);
}

} // namespace

std::string listNames(const std::vector<std::string> &names) {
  std::string out;
  for (size_t i = 0; i < names.size() && i < 8; ++i) out += (i ? ", " : "") + names[i];
  if (names.size() > 8) out += ", ... (" + std::to_string(names.size()) + " in all)";
  return out;
}

void failSafetensors(const std::string &path, const std::string &what) {
  throw Error("safetensors file '" + path + "': " + what);
}

SafetensorsReader::SafetensorsReader(std::string path) : path_(std::move(path)) {
  struct stat st {};
  if (::stat(path_.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) { // a FIFO would block the open
    failSafetensors(path_, std::string("not a regular file (") +
                               (S_ISFIFO(st.st_mode)  ? "a FIFO"
                                : S_ISDIR(st.st_mode) ? "a directory"
                                                      : "a device or socket") +
                               "): refusing to read it");
  }
  std::ifstream in(path_, std::ios::binary | std::ios::ate);
  if (!in) failSafetensors(path_, "cannot open for reading");
  int64_t fileBytes = static_cast<int64_t>(in.tellg());
  in.seekg(0);
  int64_t headerBytes = readHeaderLength(in, path_, fileBytes);
  std::string text(static_cast<size_t>(headerBytes), '\0');
  if (!in.read(text.data(), headerBytes)) failSafetensors(path_, "cannot read the header");
  dataStart_ = 8 + headerBytes;
  Json header;
  try {
    // Refuse deep nesting while parsing, before it is built.
    header = Json::parse(text, [](int depth, Json::parse_event_t, Json &) {
      if (depth > kMaxHeaderDepth) throw std::length_error("nested deeper than a header nests");
      return true;
    });
  } catch (const Json::exception &e) {
    failSafetensors(path_, std::string("bad JSON header: ") + e.what());
  } catch (const std::length_error &e) {
    failSafetensors(path_, std::string("bad JSON header: ") + e.what());
  }
  if (!header.is_object()) failSafetensors(path_, "the JSON header must be an object");
  try {
    for (const auto &[name, value] : header.items()) {
      if (name == "__metadata__") {
        metadata_ = parseMetadata(path_, value);
      } else {
        entries_.push_back(parseEntry(path_, name, value, fileBytes - dataStart_));
      }
    }
  } catch (const Json::exception &e) { // a value of an unexpected JSON type
    failSafetensors(path_, std::string("bad JSON header: ") + e.what());
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
  if (!e) failSafetensors(path_, "no tensor named '" + name + "'");
  Tensor t = Tensor::empty(e->shape, e->dtype);
  std::ifstream in(path_, std::ios::binary);
  in.seekg(dataStart_ + e->begin);
  if (e->end > e->begin && !in.read(static_cast<char *>(t.data_ptr()), e->end - e->begin)) {
    failSafetensors(path_, "tensor '" + name + "': cannot read its " +
                               std::to_string(e->end - e->begin) +
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
    if (header.contains(name)) failSafetensors(path, "duplicate tensor name '" + name + "'");
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
  const uint64_t n = text.size();
  // Written beside the file, synced, then renamed over it: `path` holds the old file or the
  // whole new one, never a part (a checkpoint overwritten by a run that dies stays loadable).
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    failSafetensors(path, "cannot open '" + tmp + "' for writing: " + std::strerror(errno));
  int err = 0;
  auto put = [&](const void *bytes, int64_t size) {
    const char *at = static_cast<const char *>(bytes);
    while (size > 0 && err == 0) {
      const ssize_t w = ::write(fd, at, static_cast<size_t>(std::min<int64_t>(size, 1 << 30)));
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) {
        err = w < 0 ? errno : EIO;
        break;
      }
      at += w;
      size -= w;
    }
  };
  put(&n, 8);
  put(text.data(), static_cast<int64_t>(text.size()));
  for (const Tensor &t : data)
    put(t.data_ptr(), t.numel() * static_cast<int64_t>(dtypeSize(t.dtype())));
  if (err == 0 && ::fsync(fd) != 0) err = errno;
  if (::close(fd) != 0 && err == 0) err = errno;
  if (err == 0 && ::rename(tmp.c_str(), path.c_str()) != 0) err = errno;
  if (err != 0) {
    ::unlink(tmp.c_str());
    failSafetensors(path, std::string("write failed: ") + std::strerror(err));
  }
}

} // namespace rcjit
