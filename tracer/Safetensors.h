// The safetensors format (Hugging Face's): an 8-byte header length, a JSON header, the data.
// Reading validates every entry; writing replaces a file whole. rcjit::save_tensors and the
// checkpoints of rcjit/Checkpoint.h are written in it, and the built-in models' weights
// are read from it (models/Safetensors.h).
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <rcjit/Tensor.h>

namespace rcjit {

/// One tensor of a safetensors header; offsets are relative to the data section.
struct SafetensorsEntry {
  std::string name;
  DType dtype;
  Shape shape;
  int64_t begin = 0;
  int64_t end = 0;
};

/// A safetensors file: an 8-byte little-endian header length, a JSON header (dtype, shape,
/// data_offsets per tensor; optional "__metadata__" of strings), then the data. The
/// constructor reads and validates the header only (dtypes F32, F16, BF16, F64, I64, I32,
/// BOOL; shapes; offsets within the file); tensors are read on demand. Every problem is an
/// rcjit::Error naming the file and, where there is one, the tensor. Thread-compatible:
/// const methods may be called concurrently.
class SafetensorsReader {
public:
  explicit SafetensorsReader(std::string path);
  const std::string &path() const { return path_; }
  /// The tensors, in header (name) order.
  const std::vector<SafetensorsEntry> &entries() const { return entries_; }
  /// The entry called `name`, or null.
  const SafetensorsEntry *find(const std::string &name) const;
  const std::map<std::string, std::string> &metadata() const { return metadata_; }
  /// A new contiguous CPU tensor holding `name`'s data in the file's dtype.
  Tensor read(const std::string &name) const;

private:
  std::string path_;
  int64_t dataStart_ = 0;
  std::vector<SafetensorsEntry> entries_;
  std::map<std::string, std::string> metadata_;
};

/// Every tensor of a file, by name.
std::map<std::string, Tensor> readSafetensors(const std::string &path);
/// Writes `tensors` (any device, layout and supported dtype) in the given order, with
/// optional string metadata. The file is written beside `path` and renamed over it once
/// complete and synced, so a crash or a full disk never leaves a truncated file at `path`
/// (an earlier file there stays whole). An rcjit::Error on a duplicate name or an I/O
/// failure.
void writeSafetensors(const std::string &path,
                      const std::vector<std::pair<std::string, Tensor>> &tensors,
                      const std::map<std::string, std::string> &metadata = {});

/// Names for a message about a file's tensors: the first 8, comma-separated, then how many
/// there are in all.
std::string listNames(const std::vector<std::string> &names);
/// Throws the rcjit::Error every problem of a safetensors file is: "safetensors file
/// 'PATH': WHAT".
[[noreturn]] void failSafetensors(const std::string &path, const std::string &what);

} // namespace rcjit
