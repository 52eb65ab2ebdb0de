// Artifact blob layout: magic, format, rcjit version, count, then (key, object) records.
#include "cache/Artifacts.h"

#include <zstd.h>

#include <algorithm>
#include <cstring>
#include <memory>

#include <rcjit/Error.h>

#include "cache/EntryFormat.h"
#include "cache/Key.h"

namespace rcjit::cache {

namespace {

constexpr char kMagic[8] = {'R', 'C', 'J', 'I', 'T', 'A', 'R', 'T'};
constexpr uint64_t kMaxBlob = uint64_t(16) << 30; // refuses decompression bombs
// No zstd block yields more than 128 KiB and none takes fewer than 4 bytes (an RLE block),
// so n compressed bytes never hold more than n * 32768: the most a header may claim.
constexpr uint64_t kMaxRatio = 32768;
// The largest window our blobs need (level 9 uses 2^22 at most); larger is refused.
constexpr int kWindowLogMax = 24;
constexpr size_t kChunk = size_t{1} << 20;

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

// Streams the frame into memory that grows only as real output arrives, never past the
// size its header declares, which itself must be one the compressed bytes can justify.
std::vector<uint8_t> decompress(const std::vector<uint8_t> &blob) {
  unsigned long long size = ZSTD_getFrameContentSize(blob.data(), blob.size());
  if (size == ZSTD_CONTENTSIZE_ERROR || size == ZSTD_CONTENTSIZE_UNKNOWN) {
    throw Error("load_artifacts: not an rcjit artifact blob (no valid zstd frame)");
  }
  const uint64_t justified = std::min<uint64_t>(kMaxBlob, blob.size() * kMaxRatio);
  if (size > justified) {
    throw Error("load_artifacts: corrupt blob: its header claims " + std::to_string(size) +
                " bytes, more than its " + std::to_string(blob.size()) +
                " compressed bytes can hold (at most " + std::to_string(justified) + ")");
  }
  std::unique_ptr<ZSTD_DStream, size_t (*)(ZSTD_DStream *)> ds(ZSTD_createDStream(),
                                                               ZSTD_freeDStream);
  if (!ds) throw Error("load_artifacts: out of memory (zstd)");
  ZSTD_DCtx_setParameter(ds.get(), ZSTD_d_windowLogMax, kWindowLogMax);
  std::vector<uint8_t> out;
  ZSTD_inBuffer in{blob.data(), blob.size(), 0};
  size_t produced = 0;
  for (;;) {
    // One spare byte past the declared size: zstd always has room, and output that uses it
    // is more than the header declared.
    if (produced == out.size() && out.size() <= size) {
      out.resize(std::min<uint64_t>(size + 1, out.size() + kChunk));
    }
    ZSTD_outBuffer o{out.data() + produced, out.size() - produced, 0};
    const size_t inBefore = in.pos;
    size_t r = ZSTD_decompressStream(ds.get(), &o, &in);
    if (ZSTD_isError(r)) {
      throw Error(std::string("load_artifacts: corrupt blob: ") + ZSTD_getErrorName(r));
    }
    produced += o.pos;
    if (produced > size) {
      throw Error("load_artifacts: corrupt blob: more data than its header declares");
    }
    if (r == 0) break; // the frame is complete (checksum verified)
    if (o.pos == 0 && in.pos == inBefore) {
      throw Error("load_artifacts: the blob is truncated or corrupt");
    }
  }
  if (produced != size || in.pos != in.size) {
    throw Error("load_artifacts: corrupt blob: " + std::to_string(produced) + " bytes of the " +
                std::to_string(size) + " its header declares" +
                (in.pos != in.size ? ", then trailing bytes" : ""));
  }
  out.resize(produced);
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
