// `rcjit devices`: what this machine offers rcjit (CPU feature set, CUDA driver, GPUs,
// cuBLAS, libdevice), and why a missing piece is missing.
#pragma once
#include <ostream>
#include <string>
#include <vector>

namespace rcjit::tools {

/// Runs the devices command on `args` (the words after "devices"). Returns 0, or with
/// --require-cuda 1 when no GPU can be used; 2 on a usage error. Thread-safe.
int devicesCommand(const std::vector<std::string> &args, std::ostream &out, std::ostream &err);

} // namespace rcjit::tools
