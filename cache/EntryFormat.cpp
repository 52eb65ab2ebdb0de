// Entry encoding and verification; every length is checked before it is used.
#include "cache/EntryFormat.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/params.h>
#include <xxhash.h>

#include <cstring>

namespace rcjit::cache {

namespace {

constexpr char kMagic[8] = {'R', 'C', 'J', 'I', 'T', 'O', 'B', 'J'};
constexpr size_t kTagOffset = 40;
constexpr size_t kHeaderSize = kTagOffset + 32;
constexpr uint32_t kMaxField = 4096;

void putLe(uint8_t *p, uint64_t v, int n) {
  for (int i = 0; i < n; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}

uint64_t getLe(const uint8_t *p, int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}

uint64_t bodyChecksum(std::span<const uint8_t> body) {
  return XXH3_64bits(body.data(), body.size());
}

// OpenSSL's HMAC implementation, fetched once (an EVP_MAC may be shared between threads).
EVP_MAC *hmacAlgorithm() {
  static EVP_MAC *mac = EVP_MAC_fetch(nullptr, "HMAC", nullptr);
  return mac;
}

} // namespace

void initCrypto() {
  OPENSSL_init_crypto(0, nullptr);
  (void)hmacAlgorithm();
}

namespace {

// HMAC-SHA256 over the header up to the tag, then the body.
Tag computeTag(const Secret &secret, const uint8_t *head, std::span<const uint8_t> body) {
  Tag tag{};
  size_t len = 0;
  char digest[] = "SHA256";
  OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string("digest", digest, 0),
                         OSSL_PARAM_construct_end()};
  EVP_MAC_CTX *ctx = hmacAlgorithm() ? EVP_MAC_CTX_new(hmacAlgorithm()) : nullptr;
  bool ok = ctx && EVP_MAC_init(ctx, secret.data(), secret.size(), params) &&
            EVP_MAC_update(ctx, head, kTagOffset) &&
            EVP_MAC_update(ctx, body.data(), body.size()) &&
            EVP_MAC_final(ctx, tag.data(), &len, tag.size()) && len == tag.size();
  EVP_MAC_CTX_free(ctx);
  if (!ok) tag.fill(0); // never matches a real tag: the entry is refused
  return tag;
}

void copyAt(std::vector<uint8_t> &out, size_t at, const void *p, size_t n) {
  if (n) std::memcpy(out.data() + at, p, n);
}

std::vector<uint8_t> layout(const EntryFields &e) {
  size_t vl = e.version.size(), kl = e.key.size();
  std::vector<uint8_t> out(kHeaderSize + vl + kl + e.payload.size());
  copyAt(out, 0, kMagic, sizeof kMagic);
  putLe(&out[8], e.format, 4);
  putLe(&out[12], vl, 4);
  putLe(&out[16], kl, 4);
  putLe(&out[20], 0, 4);
  putLe(&out[24], e.payload.size(), 8);
  copyAt(out, kHeaderSize, e.version.data(), vl);
  copyAt(out, kHeaderSize + vl, e.key.data(), kl);
  copyAt(out, kHeaderSize + vl + kl, e.payload.data(), e.payload.size());
  putLe(&out[32], bodyChecksum(std::span(out).subspan(kHeaderSize)), 8);
  return out;
}

} // namespace

const char *rcjitVersion() { return RCJIT_VERSION_STRING; }

std::vector<uint8_t> encodeEntryWithTag(const EntryFields &e, const Tag &tag) {
  std::vector<uint8_t> out = layout(e);
  std::memcpy(&out[kTagOffset], tag.data(), tag.size());
  return out;
}

std::vector<uint8_t> encodeEntry(const EntryFields &e, const Secret &secret) {
  std::vector<uint8_t> out = layout(e);
  Tag tag = computeTag(secret, out.data(), std::span(out).subspan(kHeaderSize));
  std::memcpy(&out[kTagOffset], tag.data(), tag.size());
  return out;
}

const char *verdictText(Verdict v) {
  switch (v) {
  case Verdict::ok:
    return "ok";
  case Verdict::truncated:
    return "truncated";
  case Verdict::corrupt:
    return "corrupt (bad header)";
  case Verdict::badChecksum:
    return "checksum mismatch (corrupt)";
  case Verdict::badTag:
    return "authentication failed (forged, or written with another key)";
  case Verdict::foreignFormat:
    return "another cache format version";
  case Verdict::foreignVersion:
    return "written by another rcjit version";
  case Verdict::wrongKey:
    return "stored under another key";
  }
  return "?";
}

Verdict decodeEntry(std::span<const uint8_t> bytes, const std::string &key, const Secret &secret,
                    EntryFields &out) {
  if (bytes.size() < kHeaderSize) return Verdict::truncated;
  const uint8_t *h = bytes.data();
  if (std::memcmp(h, kMagic, sizeof kMagic) != 0) return Verdict::corrupt;
  if (getLe(h + 8, 4) != kFormatVersion) return Verdict::foreignFormat;
  uint64_t versionLen = getLe(h + 12, 4), keyLen = getLe(h + 16, 4), payloadLen = getLe(h + 24, 8);
  if (versionLen > kMaxField || keyLen > kMaxField || getLe(h + 20, 4) != 0) {
    return Verdict::corrupt;
  }
  uint64_t body = bytes.size() - kHeaderSize;
  if (payloadLen > body || versionLen + keyLen > body - payloadLen) return Verdict::truncated;
  if (versionLen + keyLen + payloadLen != body) return Verdict::corrupt;
  std::span<const uint8_t> rest = bytes.subspan(kHeaderSize);
  if (bodyChecksum(rest) != getLe(h + 32, 8)) return Verdict::badChecksum;
  Tag tag = computeTag(secret, h, rest);
  if (CRYPTO_memcmp(tag.data(), h + kTagOffset, tag.size()) != 0) return Verdict::badTag;
  out.format = kFormatVersion;
  out.version.assign(rest.begin(), rest.begin() + versionLen);
  out.key.assign(rest.begin() + versionLen, rest.begin() + versionLen + keyLen);
  if (out.version != RCJIT_VERSION_STRING) return Verdict::foreignVersion;
  if (out.key != key) return Verdict::wrongKey;
  out.payload.assign(rest.begin() + versionLen + keyLen, rest.end());
  return Verdict::ok;
}

} // namespace rcjit::cache
