// What CpuProgram.cpp (the arena pool) and CpuCall.cpp (the call frame) share: a call's arena.
#pragma once
#include <memory>
#include <vector>

#include <rcjit/Tensor.h>

#include "targets/cpu/CpuProgram.h"
#include "tracer/TensorImpl.h"

namespace rcjit::cpu {

// Scratch memory of one call: tensor storage, so memory_stats counts it (a compiled step's
// peak includes its intermediates).
// A pooled arena between calls is idle: like a block in the storage block cache it is held
// for reuse but not counted by memory_stats, which counts what calls use.
// Owned by one call at a time (CpuProgram::acquireArena), then by the program's pool; not
// thread-safe.
struct CpuProgram::Arena {
  std::shared_ptr<detail::Storage> storage;
  char *data = nullptr;
  int64_t bytes = 0;
  bool idle = false;
  // A call's per-buffer vectors, kept with the arena so that a call allocates none of them
  // once they have grown (emptied of tensors between calls)
  std::vector<char *> bases;
  std::vector<Tensor> outBuffers, dynamic;
  // the static spec whose arena buffers `bases` holds (the last call's), or null: a call
  // of that spec binds only its inputs, outputs and dynamic buffers (a static spec lives as
  // long as the program, which owns its arenas)
  const Spec *boundFor = nullptr;
  void setIdle(bool now) {
    if (storage && idle != now)
      detail::countIdle(Device::cpu(), static_cast<int64_t>(storage->nbytes), now);
    idle = now;
  }
  ~Arena() { setIdle(false); } // counted again, so that freeing the storage uncounts it
};

} // namespace rcjit::cpu
