// The hooks that layers below jit declare and jit installs: the one-op compiler of the cuda
// eager ops (targets/cuda/CudaEager.h), installed when librcjit.so loads.
#include <utility>

#include "jit/CompileGraph.h"
#include "targets/cuda/CudaEager.h"

namespace rcjit {

namespace {

// Through the compiler (not the jit driver): the one-op graph has no guards or entries.
std::shared_ptr<Executable> compileOneOp(Graph g, std::vector<Shape> strides, int device,
                                         const std::string &name) {
  CompileRequest r;
  r.exec.target = Target::cuda;
  r.exec.device = device;
  r.moduleId = r.label = name;
  r.exec.cudaGraphs = false; // one or two launches: nothing to save
  r.samples.push_back({std::move(g), std::move(strides)});
  return compileGraph(std::move(r)).executable;
}

const bool installed = [] {
  cuda::installOneOpCompiler(&compileOneOp);
  return true;
}();

} // namespace

} // namespace rcjit
