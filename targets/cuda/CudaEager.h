// Eager ops on device tensors: each op runs as a compiled one-op program on the GPU (the same
// lowering and kernels as compiled graphs), never by copying to the host.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include <rcjit/Tensor.h>

#include "targets/Executable.h"
#include "tracer/Graph.h"
#include "tracer/ShapeInference.h"

namespace rcjit::cuda {

/// Computes `op` on device tensors `in` (all on one device). View ops return views; other
/// ops compile a one-op program once per (op, attrs, input layouts, device), kept for the
/// process, and run it. Throws rcjit::Error for an op with no GPU implementation.
Tensor runEagerOp(OpKind op, const std::vector<Tensor> &in, const Attrs &a, const TensorMeta &out);

/// A source op (full, arange) of `shape` and `dtype` on device `device`: `full` fills with
/// the driver's memset; `arange` is computed on the host and copied (small by nature).
Tensor runSource(OpKind op, const Shape &shape, DType dtype, const Attrs &a, Device device);

/// Compiles a one-op graph for the GPU `device`: the compile path (jit/CompileGraph.h), which
/// sits above the targets, so jit installs it (jit/Hooks.cpp) when librcjit.so loads.
/// `strides` holds the strides of each graph input; `name` names the module and the graph
/// in the passes log. The result is shared (the caller keeps it for the process).
using OneOpCompiler = std::shared_ptr<Executable> (*)(Graph g, std::vector<Shape> strides,
                                                      int device, const std::string &name);
/// Installs the one-op compiler (once, at library load). Thread-safe.
void installOneOpCompiler(OneOpCompiler compiler);

} // namespace rcjit::cuda
