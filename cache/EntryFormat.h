// The on-disk entry: header (magic, versions, lengths, XXH3-64 checksum, HMAC-SHA256 tag),
// then the rcjit version, the key and the payload. Pure bytes in, bytes out.
#pragma once
#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace rcjit::cache {

/// Bumped whenever the entry layout or the meaning of a payload changes.
inline constexpr uint32_t kFormatVersion = 1;
/// A per-user secret for the entry tags (see Secret.h).
using Secret = std::array<uint8_t, 32>;
using Tag = std::array<uint8_t, 32>;

/// This build's rcjit version (RCJIT_VERSION_STRING).
const char *rcjitVersion();

/// Initializes OpenSSL and fetches the HMAC the entries are signed with, now. OpenSSL frees its
/// state in an exit handler it registers at its first use; a caller whose own exit handler
/// joins a thread that signs entries (jit/Tiered.cpp) calls this first, so that OpenSSL's
/// handler runs after the caller's (exit handlers run in reverse order of registration).
void initCrypto();

/// What an entry holds. `format` and `version` default to this build's.
struct EntryFields {
  uint32_t format = kFormatVersion;
  std::string version = rcjitVersion();
  std::string key;
  std::vector<uint8_t> payload;
};

/// Serializes `e` with its checksum and a tag computed with `secret`.
std::vector<uint8_t> encodeEntry(const EntryFields &e, const Secret &secret);
/// Serializes `e` with its checksum but the given tag (tests use it to forge entries).
std::vector<uint8_t> encodeEntryWithTag(const EntryFields &e, const Tag &tag);

/// Why an entry is refused (ok when it is not).
enum class Verdict {
  ok,
  truncated,      // shorter than its header says
  corrupt,        // bad magic, oversized fields, trailing bytes
  badChecksum,    // payload, version or key bytes changed
  badTag,         // not written with this user's secret: forged or foreign
  foreignFormat,  // another entry format version
  foreignVersion, // written by another rcjit version
  wrongKey,       // authentic, but stored under another key's name
};
const char *verdictText(Verdict v);

/// Checks everything about `bytes` (structure, checksum, tag in constant time, format and
/// rcjit version, that it is the entry for `key`) and on success fills `out`.
Verdict decodeEntry(std::span<const uint8_t> bytes, const std::string &key, const Secret &secret,
                    EntryFields &out);

} // namespace rcjit::cache
