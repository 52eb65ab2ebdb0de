// Whether an NVIDIA GPU can be used in this process.
#pragma once

namespace rcjit {

/// True when libcuda.so.1 loads, cuInit succeeds and at least one device exists; false,
/// never a crash, where there is no driver or no GPU. Thread-safe; the answer is computed
/// once per process.
bool cuda_available();

} // namespace rcjit
