// The devices other than the CPU, as the tensor runtime sees them: one interface that a
// target registers (cuda: targets/cuda/CudaBackend.cpp), so the runtime never names one.
//
// Why: tensors, storage and the eager ops sit below the targets in the data path. The
// runtime asks "the backend of this tensor's device" for memory, copies and eager ops; a
// device kind with no registered backend is an rcjit::Error, never a crash.
#pragma once
#include <cstddef>
#include <memory>
#include <vector>

#include <rcjit/Tensor.h>

#include "tracer/Graph.h"
#include "tracer/ShapeInference.h"
#include "tracer/TensorImpl.h"

namespace rcjit::detail {

class DeviceBackend {
public:
  virtual ~DeviceBackend() = default;
  /// `nbytes` of memory on `d`; the Storage frees it when released. Throws rcjit::Error.
  virtual std::shared_ptr<Storage> allocate(size_t nbytes, Device d) = 0;
  /// Synchronous copies (host <-> device, device <-> device on one device). Throw on failure.
  virtual void copyToHost(void *dst, const void *src, size_t bytes, Device d) = 0;
  virtual void copyToDevice(void *dst, const void *src, size_t bytes, Device d) = 0;
  virtual void copyOnDevice(void *dst, const void *src, size_t bytes, Device d) = 0;
  /// One eager op on tensors of this device (inputs validated, `out` from inferMeta).
  virtual Tensor runOp(OpKind op, const std::vector<Tensor> &in, const Attrs &a,
                       const TensorMeta &out) = 0;
  /// A source op (full, arange) on `d`.
  virtual Tensor runSource(OpKind op, const Shape &shape, DType dtype, const Attrs &a,
                           Device d) = 0;
};

/// Registers the backend of device kind `k` (once, at library load; the backend lives for
/// the process). Thread-safe.
void registerDeviceBackend(Device::Kind k, DeviceBackend *backend);

/// The backend of `d`'s kind. Throws rcjit::Error when no backend serves it. Thread-safe.
DeviceBackend &deviceBackend(Device d);

} // namespace rcjit::detail
