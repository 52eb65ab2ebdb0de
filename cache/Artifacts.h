// Artifact blobs: many (key, object) pairs in one zstd-compressed, versioned byte string.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "cache/MemoryLru.h"

namespace rcjit::cache {

using Objects = std::vector<std::pair<std::string, Bytes>>;

/// Serializes and compresses `objects`. Throws rcjit::Error if zstd fails.
std::vector<uint8_t> packArtifacts(const Objects &objects);
/// Decompresses and parses a blob from packArtifacts, checking every length, the format
/// and rcjit version and each key's form. Throws rcjit::Error saying what is wrong.
Objects unpackArtifacts(const std::vector<uint8_t> &blob);

} // namespace rcjit::cache
