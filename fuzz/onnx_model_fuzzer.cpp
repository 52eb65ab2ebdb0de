// libFuzzer harness: the ONNX importer (protobuf reader, tensor decoding, graph checks) on
// arbitrary bytes (loading only: running a fuzzed graph may legitimately ask for any size).
#include <cstdint>
#include <cstdlib>
#include <string>

#include <rcjit/Error.h>
#include <rcjit/Onnx.h>

// Any input may be refused with an rcjit::Error; any other exception or crash is a finding.
extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::string bytes(reinterpret_cast<const char *>(data), size);
  try {
    rcjit::onnx::Model m = rcjit::onnx::load_bytes(bytes); // no folder: external data refused
    for (const auto &[name, p] : m.named_parameters()) {
      if (name.empty() || !p.defined()) std::abort();
    }
  } catch (const rcjit::Error &) {
  }
  return 0;
}
