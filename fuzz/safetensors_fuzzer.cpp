// libFuzzer harness: the safetensors reader (header validation, then every tensor read), and
// the same bytes as a checkpoint loaded into a small model and its AdamW (load_checkpoint),
// which must refuse them without changing anything or load them whole.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include <rcjit/rcjit.h>

#include "fuzz/CheckpointModel.h"
#include "tracer/Safetensors.h"

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
  rcjit::fuzz::CheckpointModel m;
  rcjit::optim::AdamW opt(m.parameters());
  rcjit::fuzz::stepOnce(m, opt);
  std::vector<rcjit::Tensor> before;
  for (const auto &[name, t] : opt.state_dict()) before.push_back(t.clone());
  for (const rcjit::Tensor &p : m.parameters()) before.push_back(p.detach().clone());
  try {
    rcjit::load_checkpoint(scratchPath(), m, opt);
  } catch (const rcjit::Error &) { // refused: nothing may have changed
    std::vector<rcjit::Tensor> after;
    for (const auto &[name, t] : opt.state_dict()) after.push_back(t);
    for (const rcjit::Tensor &p : m.parameters()) after.push_back(p);
    if (after.size() != before.size()) std::abort();
    for (size_t i = 0; i < after.size(); ++i) {
      if (!rcjit::allclose(after[i], before[i], 0, 0)) std::abort();
    }
  }
  return 0;
}
