// TrainingPlan: build (joint graph, partition, two compiles) and run (forward, then an
// autograd node whose backward runs the compiled backward).
#include "jit/autograd/CompiledTraining.h"

#include <sstream>

#include <rcjit/Autograd.h>
#include <rcjit/Error.h>

#include "autograd/Autograd.h"
#include "jit/CompileGraph.h"
#include "jit/autograd/Joint.h"
#include "jit/autograd/Partition.h"
#include "tracer/TensorImpl.h"

namespace rcjit {

// The autograd node of one compiled call: the saved values, until its backward ran.
class CompiledBackward final : public autograd::CustomBackward {
public:
  CompiledBackward(std::shared_ptr<const TrainingPlan> plan, std::vector<Tensor> saved)
      : plan_(std::move(plan)), saved_(std::move(saved)) {}

  std::string name() const override { return plan_->name_; }

  std::vector<Tensor> backward(const std::vector<Tensor> &gradOutputs,
                               const std::vector<bool> &needs) override {
    const TrainingPlan &p = *plan_;
    std::vector<Tensor> in;
    // the backward program was compiled for row-major inputs
    for (const Tensor &s : saved_) in.push_back(s.is_contiguous() ? s : s.contiguous());
    for (size_t k = 0; k < p.outputShapes_.size(); ++k) {
      Tensor g = k < gradOutputs.size() ? gradOutputs[k] : Tensor();
      if (!g.defined()) {
        g = Tensor::zeros(p.outputShapes_[k], p.outputDtypes_[k], device());
      } else if (g.dtype() != p.outputDtypes_[k]) {
        g = g.to(p.outputDtypes_[k]);
      }
      in.push_back(g.is_contiguous() ? g : g.contiguous());
    }
    std::vector<const Tensor *> ptrs;
    for (const Tensor &t : in) ptrs.push_back(&t);
    std::vector<Tensor> grads = p.backward_->run(ptrs.data(), ptrs.size());
    std::vector<Tensor> out(p.numInputs_);
    for (size_t j = 0; j < p.gradInput_.size(); ++j) {
      size_t i = static_cast<size_t>(p.gradInput_[j]);
      if (i < needs.size() && needs[i]) out[i] = grads[j];
    }
    return out;
  }

  void release() override { saved_.clear(); }

private:
  Device device() const { return saved_.empty() ? Device::cpu() : saved_[0].device(); }
  std::shared_ptr<const TrainingPlan> plan_;
  std::vector<Tensor> saved_;
};

std::shared_ptr<TrainingPlan>
TrainingPlan::create(const Graph &forward, const std::vector<Tensor> &inputs,
                     const std::vector<bool> &wantGrad, const ExecutableOptions &exec,
                     const std::string &moduleId, const std::string &label) {
  auto plan = std::make_shared<TrainingPlan>();
  plan->name_ = label;
  plan->numInputs_ = inputs.size();
  for (size_t i = 0; i < wantGrad.size(); ++i) {
    if (wantGrad[i]) plan->gradInput_.push_back(static_cast<int>(i));
  }
  for (int o : forward.outputs) {
    plan->outputShapes_.push_back(concreteShape(forward.nodes[o].shape));
    plan->outputDtypes_.push_back(forward.nodes[o].dtype);
  }
  Partition part;
  {
    NoGradGuard noGrad; // the joint trace records no eager autograd nodes
    part = partitionJoint(buildJointGraph(forward, inputs, wantGrad));
  }
  plan->savedOutput_ = part.savedOutput;
  plan->savedBytes_ = part.savedBytes;

  // the forward and the backward, each through the one compile path
  auto compileHalf = [&](const Graph &g, std::vector<Shape> strides, const char *suffix,
                         const char *half) {
    CompileRequest r;
    r.exec = exec;
    r.moduleId = moduleId + suffix;
    r.label = label + " " + half;
    r.samples.push_back({g, std::move(strides)});
    return compileGraph(std::move(r));
  };
  std::vector<Shape> strides;
  for (const Tensor &t : inputs) strides.push_back(t.strides());
  CompileResult fr = compileHalf(part.forward, std::move(strides), "_fwd", "forward");
  plan->forwardGraph_ = std::move(fr.graphs.at(0));
  plan->forward_ = std::move(fr.executable);
  // the backward takes row-major inputs (CompiledBackward makes them so)
  std::vector<Shape> rowMajor;
  for (int id : part.backward.programInputs()) {
    rowMajor.push_back(detail::contiguousStrides(concreteShape(part.backward.nodes[id].shape)));
  }
  CompileResult br = compileHalf(part.backward, std::move(rowMajor), "_bwd", "backward");
  plan->backwardGraph_ = std::move(br.graphs.at(0));
  plan->backward_ = std::move(br.executable);
  return plan;
}

std::vector<Tensor> TrainingPlan::run(const Tensor *const *inputs, size_t n) const {
  std::vector<Tensor> all = forward_->run(inputs, n);
  std::vector<Tensor> saved;
  // detached handles: an output that is also saved must not own its own node (a cycle)
  for (int k : savedOutput_) saved.push_back(autograd::detachedHandle(all[static_cast<size_t>(k)]));
  all.resize(outputShapes_.size());
  std::vector<Tensor> in;
  for (size_t i = 0; i < n; ++i) in.push_back(*inputs[i]);
  auto node = std::make_shared<CompiledBackward>(shared_from_this(), std::move(saved));
  autograd::recordCustom(std::move(node), in, all);
  return all;
}

std::string TrainingPlan::print() const {
  std::ostringstream os;
  os << "training: forward " << forward_->program().steps.size() << " steps, backward "
     << backward_->program().steps.size() << " steps, " << savedOutput_.size() << " saved values ("
     << savedBytes_ << " bytes held until backward)\n";
  return os.str();
}

} // namespace rcjit
