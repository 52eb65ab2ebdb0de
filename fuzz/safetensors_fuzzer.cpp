// libFuzzer harness: the safetensors reader (header validation, then every tensor read).
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include <rcjit/Error.h>

#include "models/Safetensors.h"

namespace {

// The reader takes a path: each input is written to one per-process file first, removed at
// exit.
struct Scratch {
  std::string path;
  Scratch() {
    const char *dir = std::getenv("TMPDIR");
    path = std::string(dir && *dir ? dir : "/tmp") + "/rcjit_fuzz_" + std::to_string(getpid()) +
           ".safetensors";
  }
  ~Scratch() { std::remove(path.c_str()); }
};

const std::string &scratchPath() {
  static Scratch s;
  return s.path;
}

} // namespace

// Any input may be refused with an rcjit::Error; any other exception or crash is a finding.
extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  {
    std::ofstream out(scratchPath(), std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char *>(data), static_cast<std::streamsize>(size));
  }
  try {
    rcjit::SafetensorsReader reader(scratchPath());
    for (const auto &e : reader.entries()) {
      rcjit::Tensor t = reader.read(e.name);
      // the tensor read must be the one the header describes
      if (t.shape() != e.shape || t.dtype() != e.dtype) std::abort();
    }
  } catch (const rcjit::Error &) {
  }
  return 0;
}
