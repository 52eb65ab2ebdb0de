// The slots of the eager kernels that targets/eager installs.
#include "tracer/EagerHook.h"

#include <atomic>

#include <rcjit/Error.h>

namespace rcjit::detail {

namespace {
// constant-initialized: filled by the installer whatever the load order of the library's files
std::atomic<decltype(EagerKernels::run)> runSlot{nullptr};
std::atomic<decltype(EagerKernels::copyInto)> copySlot{nullptr};
std::atomic<decltype(EagerKernels::addInto)> addSlot{nullptr};
std::atomic<decltype(EagerKernels::embeddingBackwardInto)> scatterSlot{nullptr};

[[noreturn]] void notInstalled() {
  throw Error("internal: no eager kernels are installed (targets/eager is not linked)");
}
} // namespace

void installEagerKernels(const EagerKernels &kernels) {
  runSlot.store(kernels.run, std::memory_order_release);
  copySlot.store(kernels.copyInto, std::memory_order_release);
  addSlot.store(kernels.addInto, std::memory_order_release);
  scatterSlot.store(kernels.embeddingBackwardInto, std::memory_order_release);
}

Tensor runEager(OpKind op, const std::vector<Tensor> &in, const Attrs &a, const TensorMeta &out) {
  auto run = runSlot.load(std::memory_order_acquire);
  if (!run) notInstalled();
  return run(op, in, a, out);
}

void copyEager(const Tensor &dst, const Tensor &src) {
  auto copy = copySlot.load(std::memory_order_acquire);
  if (!copy) notInstalled();
  copy(dst, src);
}

void addIntoEager(const Tensor &acc, const Tensor &g) {
  auto add = addSlot.load(std::memory_order_acquire);
  if (!add) notInstalled();
  add(acc, g);
}

void embeddingBackwardIntoEager(const Tensor &acc, const Tensor &grad, const Tensor &ids) {
  auto scatter = scatterSlot.load(std::memory_order_acquire);
  if (!scatter) notInstalled();
  scatter(acc, grad, ids);
}

} // namespace rcjit::detail
