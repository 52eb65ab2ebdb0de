// NumPy .npy read and write: the header dict parsed strictly, every length checked.
#include "tools/Npy.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <vector>

#include <rcjit/Error.h>

#include "tools/Cli.h"

namespace rcjit::tools {

namespace {

constexpr std::string_view kMagic = "\x93NUMPY";
constexpr size_t kMaxHeader = 1 << 20; // numpy itself refuses headers over 10000 bytes by default

struct DtypeInfo {
  std::string_view code; // without the byte-order character
  DType dtype;
  size_t itemSize;
};

constexpr DtypeInfo kDtypes[] = {
    {"f4", DType::f32, 4}, {"f8", DType::f64, 8}, {"f2", DType::f16, 2}, {"i8", DType::i64, 8},
    {"i4", DType::i32, 4}, {"i1", DType::i32, 1}, {"u1", DType::i32, 1}, {"b1", DType::boolean, 1},
};

[[noreturn]] void fail(const std::string &what, const std::string &msg) {
  throw Error("npy " + what + ": " + msg);
}

// The header's Python dict literal: {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
class DictParser {
public:
  DictParser(std::string_view text, const std::string &what) : s_(text), what_(what) {}

  void parse(NpyHeader &h) {
    bool seenDescr = false, seenOrder = false, seenShape = false;
    skipSpace();
    expect('{');
    for (;;) {
      skipSpace();
      if (peek() == '}') break;
      std::string key = string("a key");
      skipSpace();
      expect(':');
      skipSpace();
      if (key == "descr") {
        once(seenDescr, key);
        if (peek() == '[') fail(what_, "a structured dtype (descr is a list) is not supported");
        h.descr = string("the descr value");
      } else if (key == "fortran_order") {
        once(seenOrder, key);
        if (boolean())
          fail(what_, "the array is in Fortran order; only C order is supported "
                      "(numpy.ascontiguousarray before saving)");
      } else if (key == "shape") {
        once(seenShape, key);
        h.shape = shape();
      } else {
        fail(what_, "unexpected header key '" + controlEscaped(key) + "'");
      }
      skipSpace();
      if (peek() == ',') {
        ++i_;
        continue;
      }
      skipSpace();
      if (peek() != '}') fail(what_, "expected ',' or '}' in the header at byte " + pos());
    }
    ++i_;
    if (!seenDescr || !seenOrder || !seenShape) {
      fail(what_, std::string("the header lacks the key '") +
                      (!seenDescr   ? "descr"
                       : !seenOrder ? "fortran_order"
                                    : "shape") +
                      "'");
    }
    for (; i_ < s_.size(); ++i_) {
      if (s_[i_] != ' ' && s_[i_] != '\n' && s_[i_] != '\t' && s_[i_] != '\r')
        fail(what_, "unexpected text after the header dict at byte " + pos());
    }
  }

private:
  char peek() const { return i_ < s_.size() ? s_[i_] : '\0'; }
  std::string pos() const { return std::to_string(i_); }
  void skipSpace() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n' || s_[i_] == '\r'))
      ++i_;
  }
  void expect(char c) {
    if (peek() != c)
      fail(what_, std::string("expected '") + c + "' in the header at byte " + pos());
    ++i_;
  }
  void once(bool &seen, const std::string &key) {
    if (seen) fail(what_, "the header key '" + key + "' appears twice");
    seen = true;
  }
  std::string string(const char *which) {
    const char q = peek();
    if (q != '\'' && q != '"')
      fail(what_, std::string("expected ") + which +
                      " (a quoted string) "
                      "in the header at byte " +
                      pos());
    const size_t start = ++i_;
    while (i_ < s_.size() && s_[i_] != q) {
      if (s_[i_] == '\\') fail(what_, "escapes in header strings are not supported");
      ++i_;
    }
    if (i_ >= s_.size()) fail(what_, "an unterminated string in the header");
    return std::string(s_.substr(start, i_++ - start));
  }
  bool boolean() {
    if (s_.substr(i_, 4) == "True") {
      i_ += 4;
      return true;
    }
    if (s_.substr(i_, 5) == "False") {
      i_ += 5;
      return false;
    }
    fail(what_, "fortran_order is not True or False (at byte " + pos() + ")");
  }
  int64_t integer() {
    if (peek() < '0' || peek() > '9')
      fail(what_, "a shape entry is not a non-negative integer (at byte " + pos() + ")");
    int64_t v = 0;
    while (peek() >= '0' && peek() <= '9') {
      const int d = s_[i_++] - '0';
      if (v > (std::numeric_limits<int64_t>::max() - d) / 10)
        fail(what_, "a shape entry overflows 64 bits");
      v = v * 10 + d;
    }
    if (peek() == 'L') ++i_; // Python 2's long suffix, as old numpy wrote it
    return v;
  }
  Shape shape() {
    expect('(');
    Shape out;
    for (;;) {
      skipSpace();
      if (peek() == ')') break;
      out.push_back(integer());
      skipSpace();
      if (peek() == ',') {
        ++i_;
        continue;
      }
      if (peek() != ')') fail(what_, "expected ',' or ')' in the shape at byte " + pos());
    }
    ++i_;
    return out;
  }

  std::string_view s_;
  size_t i_ = 0;
  const std::string &what_;
};

uint32_t readLe(std::string_view b, size_t at, size_t n) {
  uint32_t v = 0;
  for (size_t k = 0; k < n; ++k)
    v |= static_cast<uint32_t>(static_cast<uint8_t>(b[at + k])) << (8 * k);
  return v;
}

// The dtype of `descr`: '<' (or '|', '=' for one byte) then a known code.
void setDtype(NpyHeader &h, const std::string &what) {
  const std::string &d = h.descr;
  const std::string shown = "'" + controlEscaped(d) + "'";
  if (d.size() < 2) fail(what, "unknown dtype " + shown);
  const char order = d[0];
  const std::string_view code = std::string_view(d).substr(1);
  for (const DtypeInfo &t : kDtypes) {
    if (code != t.code) continue;
    if (order == '>' && t.itemSize > 1)
      fail(what, "dtype " + shown +
                     " is big-endian; only little-endian data is supported "
                     "(numpy: a.astype(a.dtype.newbyteorder('<')))");
    if (order != '<' && order != '|' && order != '=' && order != '>')
      fail(what, "dtype " + shown + " has an unknown byte order '" + std::string(1, order) + "'");
    h.dtype = t.dtype;
    h.itemSize = t.itemSize;
    return;
  }
  fail(what, "dtype " + shown +
                 " is not supported (float32, float64, float16, int64, int32, "
                 "int8, uint8 and bool are)");
}

} // namespace

size_t NpyHeader::dataBytes() const {
  size_t n = itemSize;
  for (int64_t d : shape) {
    if (d != 0 && n > std::numeric_limits<size_t>::max() / static_cast<size_t>(d))
      throw Error("npy: the shape " + shapeStr(shape) + " overflows the address space");
    n *= static_cast<size_t>(d);
  }
  return n;
}

NpyHeader parseNpyHeader(std::string_view bytes, const std::string &what) {
  if (bytes.size() < kMagic.size() || bytes.substr(0, kMagic.size()) != kMagic)
    fail(what, "not a .npy file (the magic \\x93NUMPY is missing)");
  if (bytes.size() < 10)
    fail(what, "the file ends inside the header (" + std::to_string(bytes.size()) + " bytes)");
  NpyHeader h;
  h.major = static_cast<uint8_t>(bytes[6]);
  h.minor = static_cast<uint8_t>(bytes[7]);
  if ((h.major != 1 && h.major != 2 && h.major != 3) || h.minor != 0)
    fail(what, "format version " + std::to_string(h.major) + "." + std::to_string(h.minor) +
                   " is not 1.0, 2.0 or 3.0");
  const size_t lenBytes = h.major == 1 ? 2 : 4;
  if (bytes.size() < 8 + lenBytes) fail(what, "the file ends inside the header length");
  const size_t len = readLe(bytes, 8, lenBytes);
  if (len > kMaxHeader)
    fail(what, "the header claims " + std::to_string(len) + " bytes (over the 1 MiB limit)");
  h.dataOffset = 8 + lenBytes + len;
  if (bytes.size() < h.dataOffset)
    fail(what, "the file ends inside the header (" + std::to_string(len) + " bytes claimed, " +
                   std::to_string(bytes.size() - 8 - lenBytes) + " present)");
  const std::string_view text = bytes.substr(8 + lenBytes, len);
  for (char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if (u >= 0x80 || (u < 0x20 && c != '\n' && c != '\t' && c != '\r'))
      fail(what, "the header holds a byte that is not printable ASCII");
  }
  DictParser(text, what).parse(h);
  setDtype(h, what);
  try {
    h.dataBytes(); // overflow check
  } catch (const Error &e) {
    fail(what, std::string(e.what()).substr(5));
  }
  return h;
}

namespace {

// The tensor of header `h` over the `h.dataBytes()` bytes at `data`.
Tensor fromData(const NpyHeader &h, const char *data, const std::string &what) {
  const size_t n = h.dataBytes();
  Tensor t = Tensor::empty(h.shape, h.dtype);
  if (h.itemSize == 1 && h.dtype == DType::i32) { // int8 / uint8 widened
    const bool isSigned = h.descr[1] == 'i';
    int32_t *dst = t.data<int32_t>();
    for (size_t k = 0; k < n; ++k) {
      dst[k] = isSigned ? static_cast<int32_t>(static_cast<int8_t>(data[k]))
                        : static_cast<int32_t>(static_cast<uint8_t>(data[k]));
    }
    return t;
  }
  if (n) std::memcpy(t.data_ptr(), data, n);
  if (h.dtype == DType::boolean) {
    const auto *b = static_cast<const uint8_t *>(t.data_ptr());
    for (size_t k = 0; k < n; ++k) {
      if (b[k] > 1)
        fail(what,
             "bool element " + std::to_string(k) + " is " + std::to_string(b[k]) + ", not 0 or 1");
    }
  }
  return t;
}

void checkLength(const NpyHeader &h, size_t present, const std::string &what) {
  const size_t want = h.dataBytes();
  if (present != want)
    fail(what, "the data is " + std::to_string(present) + " bytes; " + h.descr + " " +
                   shapeStr(h.shape) + " needs " + std::to_string(want) +
                   (present < want ? " (truncated)" : " (trailing bytes)"));
}

} // namespace

Tensor decodeNpy(std::string_view bytes, const std::string &what) {
  const NpyHeader h = parseNpyHeader(bytes, what);
  checkLength(h, bytes.size() - h.dataOffset, what);
  return fromData(h, bytes.data() + h.dataOffset, what);
}

Tensor readNpy(const std::string &path) {
  checkRegularFile(path, ".npy file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("npy " + path + ": cannot open (" + std::strerror(errno) + ")");
  std::error_code ec;
  const uintmax_t size = std::filesystem::file_size(path, ec);
  if (ec) throw Error("npy " + path + ": cannot read its size (" + ec.message() + ")");
  // The header: the fixed prefix, then as many bytes as it claims (bounded by kMaxHeader).
  std::string head(std::min<uintmax_t>(size, 12), '\0');
  in.read(head.data(), static_cast<std::streamsize>(head.size()));
  if (head.size() >= 10) {
    const size_t lenBytes = static_cast<uint8_t>(head[6]) == 1 ? 2 : 4;
    const size_t len = head.size() >= 8 + lenBytes ? readLe(head, 8, lenBytes) : 0;
    const size_t want = std::min<uintmax_t>(size, 8 + lenBytes + std::min(len, kMaxHeader + 1));
    if (want > head.size()) {
      const size_t had = head.size();
      head.resize(want);
      in.read(head.data() + had, static_cast<std::streamsize>(want - had));
    }
  }
  if (!in) throw Error("npy " + path + ": read failed");
  const NpyHeader h = parseNpyHeader(head, path);
  checkLength(h, static_cast<size_t>(size) - h.dataOffset, path);
  std::vector<char> data(h.dataBytes());
  in.seekg(static_cast<std::streamoff>(h.dataOffset));
  in.read(data.data(), static_cast<std::streamsize>(data.size()));
  if (!in) throw Error("npy " + path + ": the data could not be read");
  return fromData(h, data.data(), path);
}

std::string encodeNpy(const Tensor &t0) {
  if (!t0.defined()) throw Error("npy: cannot write an undefined tensor");
  Tensor t = t0.detach().to(Device::cpu());
  if (t.dtype() == DType::bf16) t = t.to(DType::f32);
  t = t.contiguous();
  std::string descr;
  switch (t.dtype()) {
  case DType::f32:
    descr = "<f4";
    break;
  case DType::f64:
    descr = "<f8";
    break;
  case DType::f16:
    descr = "<f2";
    break;
  case DType::i32:
    descr = "<i4";
    break;
  case DType::i64:
    descr = "<i8";
    break;
  case DType::boolean:
    descr = "|b1";
    break;
  case DType::bf16:
    break; // converted above
  }
  std::string shape = "(";
  for (size_t k = 0; k < t.shape().size(); ++k)
    shape += std::to_string(t.shape()[k]) +
             (t.shape().size() == 1 || k + 1 < t.shape().size() ? "," : "") +
             (k + 1 < t.shape().size() ? " " : "");
  shape += ")";
  std::string dict = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': " + shape + ", }";
  const bool v2 = dict.size() + 1 + 10 > 65535;
  const size_t prefix = v2 ? 12 : 10;
  dict.append((64 - (prefix + dict.size() + 1) % 64) % 64, ' ');
  dict += '\n';
  std::string out(kMagic);
  out += static_cast<char>(v2 ? 2 : 1);
  out += '\0';
  for (size_t k = 0; k < (v2 ? 4u : 2u); ++k)
    out += static_cast<char>((dict.size() >> (8 * k)) & 0xff);
  out += dict;
  const size_t bytes = static_cast<size_t>(t.numel()) * dtypeSize(t.dtype());
  out.append(static_cast<const char *>(t.data_ptr()), bytes);
  return out;
}

void writeNpy(const std::string &path, const Tensor &t) {
  const std::string bytes = encodeNpy(t);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw Error("npy " + path + ": cannot write (" + std::strerror(errno) + ")");
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  closeOutput(out, "npy", path);
}

} // namespace rcjit::tools
