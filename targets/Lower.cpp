// Lowering: an optimized Graph to a Program, as three steps run in order (fuse, build
// kernels, plan buffers); the steps live in targets/lower/.
#include "targets/Lower.h"

#include <sstream>

#include <rcjit/Error.h>

#include "targets/lower/Lowering.h"

namespace rcjit {

LowerSteps::LowerSteps(const Graph &g, const std::vector<Shape> &inputStrides,
                       const LowerOptions &opts) {
  for (const Node &n : g.nodes) {
    for (const Dim &d : n.shape) {
      if (d.isSymbolic()) {
        throw Error("lower: symbolic shapes are not supported by this lowering yet");
      }
    }
  }
  l_ = std::make_unique<lowering::Lowering>(g, inputStrides, opts);
}

LowerSteps::~LowerSteps() = default;

const FusionPlan &LowerSteps::fuse() {
  l_->fuse();
  return l_->plan;
}

const Program &LowerSteps::buildKernels() {
  l_->buildKernels();
  return l_->p;
}

Program LowerSteps::planBuffers() { return l_->planBuffers(); }

Program lower(const Graph &g, const std::vector<Shape> &inputStrides, const LowerOptions &opts) {
  LowerSteps steps(g, inputStrides, opts);
  steps.fuse();
  steps.buildKernels();
  return steps.planBuffers();
}

std::string printProgram(const Program &p) {
  std::ostringstream os;
  os << "program: " << p.numInputs << " inputs, " << p.steps.size() << " steps, "
     << p.kernels.size() << " kernels, arena " << p.arenaBytes << " bytes\n";
  for (size_t i = 0; i < p.steps.size(); ++i) {
    const Step &s = p.steps[i];
    os << "  step " << i << ": ";
    switch (s.kind) {
    case Step::Kind::kernel:
      os << s.note;
      break;
    case Step::Kind::library:
      os << "library " << s.note;
      for (const PostOp &po : s.postOps) os << " +" << opName(po.op);
      break;
    case Step::Kind::eager:
      os << "eager " << s.note;
      break;
    case Step::Kind::collective:
      os << "start " << s.note;
      break;
    case Step::Kind::wait:
      os << "wait " << s.note << " (started at step " << s.kernel << ")";
      break;
    }
    os << "\n";
  }
  return os.str();
}

} // namespace rcjit
