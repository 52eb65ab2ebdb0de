// Eager GPU ops as one-op compiled programs.
#include "targets/cuda/CudaEager.h"

#include <atomic>
#include <cstring>
#include <sstream>

#include "cache/ClearHooks.h"
#include "targets/cuda/CudaRuntime.h"
#include "targets/eager/Eager.h"
#include "tracer/GraphIO.h"
#include "tracer/TensorImpl.h"

namespace rcjit::cuda {

namespace {

struct OpMemoTag;
using OpMemo =
    cache::detail::ProcessMemo<OpMemoTag, std::string, std::shared_ptr<Executable>, 4096>;

// The one-op graph: an input node per operand, the op, one output.
Graph oneOpGraph(OpKind op, const std::vector<Tensor> &in, const Attrs &a, const TensorMeta &out) {
  Graph g;
  for (size_t i = 0; i < in.size(); ++i) {
    Node n;
    n.op = OpKind::input;
    n.dtype = in[i].dtype();
    n.shape = staticShape(in[i].shape());
    n.inputIndex = static_cast<int>(i);
    g.add(std::move(n));
  }
  Node n;
  n.op = op;
  n.dtype = out.dtype;
  n.shape = staticShape(out.shape);
  n.attrs = a;
  for (size_t i = 0; i < in.size(); ++i) n.inputs.push_back(static_cast<int>(i));
  g.outputs.push_back(g.add(std::move(n)));
  return g;
}

// constant-initialized: filled by jit whatever the load order of the library's files
std::atomic<OneOpCompiler> oneOpCompiler{nullptr};

} // namespace

void installOneOpCompiler(OneOpCompiler compiler) {
  oneOpCompiler.store(compiler, std::memory_order_release);
}

Tensor runEagerOp(OpKind op, const std::vector<Tensor> &in, const Attrs &a, const TensorMeta &out) {
  const Device device = in.at(0).device();
  if (op == OpKind::reshape) {
    Shape strides;
    if (detail::computeViewStrides(in[0].shape(), in[0].strides(), out.shape, strides))
      return detail::makeView(in[0], out.shape, strides, in[0].offset());
    // else a copy: compiled below
  } else if (opInfo(op).category == OpCategory::View) {
    return eager::runShape(op, in, a, out); // views: only the geometry changes
  }
  Graph g = oneOpGraph(op, in, a, out);
  std::ostringstream key;
  key << device.str() << "\n" << printGraph(g);
  std::vector<Shape> strides;
  for (const Tensor &t : in) {
    strides.push_back(t.strides());
    key << "|" << shapeStr(t.strides());
  }
  std::shared_ptr<Executable> program = OpMemo::instance().find(key.str());
  if (!program) {
    // through the compiler (not the jit driver): the one-op graph has no guards or entries
    OneOpCompiler compile = oneOpCompiler.load(std::memory_order_acquire);
    if (!compile) throw Error("internal: no one-op compiler is installed for cuda eager ops");
    program = compile(std::move(g), std::move(strides), device.index,
                      "rcjit_eager_" + std::string(opName(op)));
    OpMemo::instance().add(key.str(), program);
  }
  std::vector<const Tensor *> ptrs;
  for (const Tensor &t : in) ptrs.push_back(&t);
  return program->run(ptrs.data(), ptrs.size()).at(0);
}

Tensor runSource(OpKind op, const Shape &shape, DType dtype, const Attrs &a, Device device) {
  DeviceContext &ctx = DeviceContext::get(device.index);
  if (op == OpKind::full) {
    Tensor t = detail::makeTensor(shape, dtype, device);
    // the value's bit pattern in dtype, converted the way the CPU does it
    Tensor one = eager::run(OpKind::full, {}, a, TensorMeta{dtype, {}});
    uint64_t bits = 0;
    std::memcpy(&bits, one.data_ptr(), dtypeSize(dtype));
    ctx.fill(reinterpret_cast<CUdeviceptr>(t.data_ptr()), bits, dtypeSize(dtype),
             static_cast<size_t>(t.numel()));
    return t;
  }
  Tensor host = eager::run(op, {}, a, TensorMeta{dtype, shape});
  Tensor t = detail::makeTensor(shape, dtype, device);
  ctx.copyToDevice(reinterpret_cast<CUdeviceptr>(t.data_ptr()), host.data_ptr(),
                   static_cast<size_t>(host.numel()) * dtypeSize(dtype));
  return t;
}

} // namespace rcjit::cuda
