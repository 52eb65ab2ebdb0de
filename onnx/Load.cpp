// Reading ONNX files: the model's bytes, external data (memory-mapped, bounded, confined to
// the model's folder), initializers decoded to tensors, and the checked, ordered Program.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <functional>
#include <unordered_map>

#include <rcjit/Onnx.h>

#include "onnx/Program.h"

namespace rcjit::onnx {

namespace fs = std::filesystem;

namespace {

// A read-only private mapping of a whole file; an Error naming the file when it cannot be.
class MappedFile {
public:
  MappedFile(const std::string &path, const std::string &what) {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw Error("onnx: " + what + ": cannot open '" + path + "': " + strerror(errno));
    struct stat st {};
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
      ::close(fd);
      throw Error("onnx: " + what + ": '" + path + "' is not a regular file");
    }
    size_ = static_cast<size_t>(st.st_size);
    if (size_ > 0) {
      void *p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
      if (p == MAP_FAILED) {
        ::close(fd);
        throw Error("onnx: " + what + ": cannot map '" + path + "': " + strerror(errno));
      }
      data_ = static_cast<const char *>(p);
    }
    ::close(fd);
  }
  ~MappedFile() {
    if (data_) ::munmap(const_cast<char *>(data_), size_);
  }
  MappedFile(const MappedFile &) = delete;
  MappedFile &operator=(const MappedFile &) = delete;
  std::string_view bytes() const { return {data_ ? data_ : "", size_}; }

private:
  const char *data_ = nullptr;
  size_t size_ = 0;
};

int64_t parseInt(const std::string &s, const std::string &key, const std::string &what) {
  if (s.empty() || s.size() > 19 || s.find_first_not_of("0123456789") != std::string::npos) {
    throw Error("onnx: " + what + ": external data " + key + " '" + s + "' is not a number");
  }
  return std::stoll(s);
}

// The external file of a tensor, checked to lie inside `dir`.
std::string externalPath(const std::string &location, const std::string &dir,
                         const std::string &tensor, const std::string &what) {
  if (dir.empty()) {
    throw Error("onnx: " + what + ": tensor '" + tensor +
                "' has external data, but the model was not loaded from a file");
  }
  fs::path loc(location);
  bool escapes = location.empty() || loc.is_absolute();
  for (const auto &part : loc) escapes = escapes || part == "..";
  if (escapes) {
    throw Error("onnx: " + what + ": tensor '" + tensor + "': external data location '" + location +
                "' must be a relative path inside the model's folder");
  }
  std::error_code ec;
  fs::path base = fs::weakly_canonical(fs::path(dir), ec);
  fs::path full = fs::weakly_canonical(fs::path(dir) / loc, ec);
  std::string b = base.string(), f = full.string();
  if (ec || f.compare(0, b.size(), b) != 0) {
    throw Error("onnx: " + what + ": tensor '" + tensor + "': external data '" + location +
                "' resolves outside the model's folder");
  }
  return f;
}

// The tensor `make` allocates, holding `want` bytes of t's external data: the file and the
// range are checked before anything is allocated.
Tensor readExternal(const TensorData &t, const std::string &dir, const std::string &what,
                    const std::function<Tensor()> &make, size_t want) {
  std::string location;
  int64_t offset = 0, length = -1;
  for (const auto &[k, v] : t.externalData) {
    if (k == "location")
      location = v;
    else if (k == "offset")
      offset = parseInt(v, k, what);
    else if (k == "length")
      length = parseInt(v, k, what);
  }
  std::string path = externalPath(location, dir, t.name, what);
  MappedFile file(path, what);
  std::string_view bytes = file.bytes();
  if (length >= 0 && static_cast<uint64_t>(length) != want) {
    throw Error("onnx: " + what + ": tensor '" + t.name + "': external data length " +
                std::to_string(length) + " disagrees with its shape (" + std::to_string(want) +
                " bytes)");
  }
  if (static_cast<uint64_t>(offset) > bytes.size() || want > bytes.size() - offset) {
    throw Error("onnx: " + what + ": tensor '" + t.name + "': external file '" + location +
                "' is too short: needs " + std::to_string(want) + " bytes at offset " +
                std::to_string(offset) + ", has " + std::to_string(bytes.size()));
  }
  Tensor out = make();
  if (want) std::memcpy(out.data_ptr(), bytes.data() + offset, want);
  return out;
}

template <class Src> void copyTyped(const std::vector<Src> &src, Tensor &out, DType dt) {
  size_t n = src.size();
  switch (dt) {
  case DType::f32:
    for (size_t i = 0; i < n; ++i) out.data<float>()[i] = static_cast<float>(src[i]);
    break;
  case DType::f64:
    for (size_t i = 0; i < n; ++i) out.data<double>()[i] = static_cast<double>(src[i]);
    break;
  case DType::i32:
    for (size_t i = 0; i < n; ++i) out.data<int32_t>()[i] = static_cast<int32_t>(src[i]);
    break;
  case DType::i64:
    for (size_t i = 0; i < n; ++i) out.data<int64_t>()[i] = static_cast<int64_t>(src[i]);
    break;
  case DType::boolean:
    for (size_t i = 0; i < n; ++i) out.data<uint8_t>()[i] = src[i] != 0;
    break;
  case DType::f16:
  case DType::bf16: // the bits, stored in int32_data
    for (size_t i = 0; i < n; ++i) {
      uint16_t bits = static_cast<uint16_t>(static_cast<int64_t>(src[i]));
      std::memcpy(static_cast<char *>(out.data_ptr()) + 2 * i, &bits, 2);
    }
    break;
  }
}

} // namespace

DType dtypeFromOnnx(int32_t t, const std::string &where) {
  switch (static_cast<OnnxType>(t)) {
  case OnnxType::f32:
    return DType::f32;
  case OnnxType::f64:
    return DType::f64;
  case OnnxType::f16:
    return DType::f16;
  case OnnxType::bf16:
    return DType::bf16;
  case OnnxType::i32:
    return DType::i32;
  case OnnxType::i64:
    return DType::i64;
  case OnnxType::boolean:
    return DType::boolean;
  default:
    break;
  }
  throw Error("onnx: " + where + ": element type " + onnxTypeName(t) +
              " has no rcjit dtype (f32, f64, f16, bf16, i32, i64, bool)");
}

namespace detail {

Tensor decodeTensor(const TensorData &t, const std::string &dir, const std::string &what) {
  std::string where = what + ": tensor '" + t.name + "'";
  if (t.hasSegment) throw Error("onnx: " + where + ": segmented tensors are not supported");
  DType dt = dtypeFromOnnx(t.dataType, where);
  int64_t numel = 1;
  for (int64_t d : t.dims) {
    if (d < 0 || (d > 0 && numel > (int64_t(1) << 40) / d)) {
      throw Error("onnx: " + where + ": bad shape " + shapeStr(t.dims));
    }
    numel *= d;
  }
  size_t want = static_cast<size_t>(numel) * dtypeSize(dt);
  // every size is checked before the tensor is allocated: a file may declare any shape
  auto make = [&] { return Tensor::empty(t.dims, dt); };
  if (t.external) return readExternal(t, dir, what, make, want);
  auto count = [&](size_t have, const char *field) {
    if (have != static_cast<size_t>(numel)) {
      throw Error("onnx: " + where + ": " + field + " has " + std::to_string(have) +
                  " values, its shape " + shapeStr(t.dims) + " needs " + std::to_string(numel));
    }
  };
  if (t.hasRaw) {
    if (t.raw.size() != want) {
      throw Error("onnx: " + where + ": raw_data has " + std::to_string(t.raw.size()) +
                  " bytes, its shape " + shapeStr(t.dims) + " and type " +
                  onnxTypeName(t.dataType) + " need " + std::to_string(want));
    }
    Tensor out = make();
    if (want) std::memcpy(out.data_ptr(), t.raw.data(), want);
    if (dt == DType::boolean) {
      for (int64_t i = 0; i < numel; ++i) out.data<uint8_t>()[i] = out.data<uint8_t>()[i] != 0;
    }
    return out;
  }
  if (dt == DType::f32) {
    count(t.floats.size(), "float_data");
  } else if (dt == DType::f64) {
    count(t.doubles.size(), "double_data");
  } else if (dt == DType::i64) {
    count(t.int64s.size(), "int64_data");
  } else {
    count(t.int32s.size(), "int32_data");
  }
  Tensor out = make();
  if (dt == DType::f32) {
    copyTyped(t.floats, out, dt);
  } else if (dt == DType::f64) {
    copyTyped(t.doubles, out, dt);
  } else if (dt == DType::i64) {
    copyTyped(t.int64s, out, dt);
  } else {
    copyTyped(t.int32s, out, dt);
  }
  return out;
}

} // namespace detail

Model load_bytes(const std::string &bytes, const std::string &dir) {
  ModelData m = parseModel(bytes, "model");
  return Model(detail::buildProgram(m, dir, "model"));
}

Model load(const std::string &path) {
  MappedFile file(path, path);
  if (file.bytes().empty()) throw Error("onnx: " + path + ": empty file, not an ONNX model");
  ModelData m = parseModel(file.bytes(), path);
  std::string dir = fs::path(path).parent_path().string();
  return Model(detail::buildProgram(m, dir.empty() ? "." : dir, path));
}

Tensor load_tensor_proto(const std::string &path) {
  MappedFile file(path, path);
  TensorData t = parseTensor(file.bytes(), path);
  return detail::decodeTensor(t, fs::path(path).parent_path().string(), path);
}

} // namespace rcjit::onnx
