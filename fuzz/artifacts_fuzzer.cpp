// libFuzzer harness: artifact blobs (load_artifacts, what `rcjit cache import` reads).
//
// Each input is loaded twice: as a blob (a zstd frame: the decompression bounds), and
// compressed here first, so that the fuzzer also reaches the record parser directly.
#include <zstd.h>

#include <cstdint>
#include <cstdlib>
#include <vector>

#include <rcjit/Cache.h>
#include <rcjit/Error.h>

namespace {

void load(const std::vector<uint8_t> &blob) {
  try {
    (void)rcjit::cache::load_artifacts(blob);
  } catch (const rcjit::Error &) {
  }
  rcjit::cache::clear(); // the memory cache: each input starts from an empty one
}

} // namespace

extern "C" int LLVMFuzzerInitialize(int *, char ***) {
  rcjit::cache::set_dir("off"); // memory only: nothing is written to disk
  return 0;
}

// Any input may be refused with an rcjit::Error; any other exception or crash is a finding.
extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  load(std::vector<uint8_t>(data, data + size));
  std::vector<uint8_t> frame(ZSTD_compressBound(size));
  size_t n = ZSTD_compress(frame.data(), frame.size(), data, size, 1);
  if (ZSTD_isError(n)) std::abort();
  frame.resize(n);
  load(frame);
  return 0;
}
