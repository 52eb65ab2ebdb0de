// The eager target's entry point: dispatch one op to its family by category; installed as
// the tensor runtime's eager kernels (tracer/EagerHook.h).
#include "targets/eager/Eager.h"

#include "dist/IrCollectives.h"
#include "tracer/DeviceBackend.h"
#include "tracer/EagerHook.h"

namespace rcjit::eager {

Tensor run(OpKind op, const std::vector<Tensor> &in, const Attrs &a, const TensorMeta &out) {
  if (op == OpKind::check_target) return runCheckTarget(in.at(0), a); // a host read anywhere
  if (!in.empty() && !in[0].device().is_cpu()) {
    return detail::deviceBackend(in[0].device()).runOp(op, in, a, out);
  }
  switch (opInfo(op).category) {
  case OpCategory::Unary:
  case OpCategory::Binary:
  case OpCategory::Compare:
  case OpCategory::Where:
    return runElementwise(op, in, out);
  case OpCategory::Reduce:
  case OpCategory::Normalize:
    return runReduce(op, in.at(0), a, out);
  case OpCategory::Matmul:
    return runMatmul(op, in, a, out);
  case OpCategory::Nn:
    return runNn(op, in, a, out);
  case OpCategory::Source:
  case OpCategory::View:
  case OpCategory::Copy:
    return runShape(op, in, a, out);
  case OpCategory::Collective:
    return dist::detail::runCollectiveOp(op, in.at(0), a, out);
  }
  throw Error("eager: no kernel for op " + std::string(opName(op)));
}

namespace {
// The tensor runtime runs its ops through these (tracer/EagerHook.h): installed when
// librcjit.so loads, before any code outside it can make a tensor.
const bool installed = [] {
  detail::installEagerKernels({&run, &copyInto, &addInto, &embeddingBackwardInto});
  return true;
}();
} // namespace

} // namespace rcjit::eager
