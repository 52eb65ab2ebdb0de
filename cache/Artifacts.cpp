// Artifact blob layout: magic, format, rcjit version, count, then (key, object) records.
#include "cache/Artifacts.h"

#include <zstd.h>

#include <cstring>

#include <rcjit/Error.h>

#include "cache/EntryFormat.h"
#include "cache/Key.h"

namespace rcjit::cache {

namespace {

constexpr char kMagic[8] = {'R', 'C', 'J', 'I', 'T', 'A', 'R', 'T'};
constexpr uint64_t kMaxBlob = uint64_t(16) << 30; // refuses decompression bombs

void put(std::vector<uint8_t> &out, uint64_t v, int n) {
  for (int i = 0; i < n; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}

void putBytes(std::vector<uint8_t> &out, const void *p, size_t n) {
  auto *b = static_cast<const uint8_t *>(p);
  out.insert(out.end(), b, b + n);
}

// A bounds-checked reader over the decompressed blob.
class Reader {
public:
  explicit Reader(const std::vector<uint8_t> &b) : b_(b) {}
  uint64_t num(int n) {
    need(static_cast<uint64_t>(n));
    uint64_t v = 0;
    for (int i = 0; i < n; ++i) v |= static_cast<uint64_t>(b_[pos_++]) << (8 * i);
    return v;
  }
  std::string str(uint64_t n) {
    need(n);
    std::string s(b_.begin() + pos_, b_.begin() + pos_ + n);
    pos_ += n;
    return s;
  }
  Bytes bytes(uint64_t n) {
    need(n);
    auto v = std::make_shared<const std::vector<uint8_t>>(b_.begin() + pos_, b_.begin() + pos_ + n);
    pos_ += n;
    return v;
  }
  bool done() const { return pos_ == b_.size(); }

private:
  void need(uint64_t n) const {
    if (n > b_.size() - pos_) throw Error("load_artifacts: the blob is truncated or corrupt");
  }
  const std::vector<uint8_t> &b_;
  size_t pos_ = 0;
};

std::vector<uint8_t> decompress(const std::vector<uint8_t> &blob) {
  unsigned long long size = ZSTD_getFrameContentSize(blob.data(), blob.size());
  if (size == ZSTD_CONTENTSIZE_ERROR || size == ZSTD_CONTENTSIZE_UNKNOWN || size > kMaxBlob) {
    throw Error("load_artifacts: not an rcjit artifact blob (no valid zstd frame)");
  }
  std::vector<uint8_t> out(size);
  size_t got = ZSTD_decompress(out.data(), out.size(), blob.data(), blob.size());
  if (ZSTD_isError(got) || got != size) {
    throw Error(std::string("load_artifacts: corrupt blob: ") +
                (ZSTD_isError(got) ? ZSTD_getErrorName(got) : "short frame"));
  }
  return out;
}

} // namespace

std::vector<uint8_t> packArtifacts(const Objects &objects) {
  std::vector<uint8_t> raw;
  putBytes(raw, kMagic, sizeof kMagic);
  put(raw, kFormatVersion, 4);
  std::string version = RCJIT_VERSION_STRING;
  put(raw, version.size(), 4);
  putBytes(raw, version.data(), version.size());
  put(raw, objects.size(), 8);
  for (const auto &[key, obj] : objects) {
    put(raw, key.size(), 4);
    putBytes(raw, key.data(), key.size());
    put(raw, obj->size(), 8);
    putBytes(raw, obj->data(), obj->size());
  }
  std::vector<uint8_t> out(ZSTD_compressBound(raw.size()));
  ZSTD_CCtx *cctx = ZSTD_createCCtx();
  ZSTD_CCtx_setParameter(cctx, ZSTD_c_compressionLevel, 9);
  ZSTD_CCtx_setParameter(cctx, ZSTD_c_checksumFlag, 1); // zstd verifies it on load
  size_t n = ZSTD_compress2(cctx, out.data(), out.size(), raw.data(), raw.size());
  ZSTD_freeCCtx(cctx);
  if (ZSTD_isError(n)) throw Error(std::string("save_artifacts: ") + ZSTD_getErrorName(n));
  out.resize(n);
  return out;
}

Objects unpackArtifacts(const std::vector<uint8_t> &blob) {
  std::vector<uint8_t> raw = decompress(blob);
  Reader r(raw);
  if (r.str(sizeof kMagic) != std::string(kMagic, sizeof kMagic)) {
    throw Error("load_artifacts: not an rcjit artifact blob (bad magic)");
  }
  if (uint64_t f = r.num(4); f != kFormatVersion) {
    throw Error("load_artifacts: artifact format " + std::to_string(f) + ", this rcjit reads " +
                std::to_string(kFormatVersion));
  }
  std::string version = r.str(r.num(4));
  if (version != RCJIT_VERSION_STRING) {
    throw Error("load_artifacts: the blob was saved by rcjit " + version + ", this is rcjit " +
                RCJIT_VERSION_STRING);
  }
  uint64_t count = r.num(8);
  Objects out;
  for (uint64_t i = 0; i < count; ++i) {
    std::string key = r.str(r.num(4));
    if (!isContentKey(key)) throw Error("load_artifacts: corrupt blob (bad key)");
    out.emplace_back(std::move(key), r.bytes(r.num(8)));
  }
  if (!r.done()) throw Error("load_artifacts: corrupt blob (trailing bytes)");
  return out;
}

} // namespace rcjit::cache
