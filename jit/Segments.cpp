// Compiled graph-break segments: key by hash, input layouts and (training) which inputs
// need a gradient; compile once; fill the pending tensors with the results.
#include "jit/Segments.h"

#include <sstream>

#include "autograd/Autograd.h"
#include "jit/CompileGraph.h"
#include "jit/Interpreter.h"
#include "jit/autograd/Joint.h"
#include "targets/eager/Eager.h"
#include "tracer/GraphIO.h"
#include "tracer/TensorImpl.h"

namespace rcjit {

namespace {

// `g` run eagerly with autograd recording, outside the segmented trace.
std::vector<Tensor> replayWithGrad(const Graph &g, const std::vector<Tensor> &inputs) {
  TracerPause untraced;
  std::vector<Tensor> value(g.nodes.size());
  std::vector<int> ids = g.programInputs();
  for (size_t i = 0; i < ids.size(); ++i) value[ids[i]] = inputs.at(i);
  const Device device = inputs.empty() ? Device::cpu() : inputs[0].device();
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node &n = g.nodes[i];
    if (n.op == OpKind::input) continue;
    std::vector<Tensor> in;
    for (int x : n.inputs) in.push_back(value[x]);
    value[i] = replayNode(n, in, device);
  }
  std::vector<Tensor> out;
  for (int o : g.outputs) out.push_back(value[o]);
  return out;
}

} // namespace

bool SegmentTable::run(Segment &seg) {
  std::ostringstream key;
  std::vector<bool> wantGrad;
  bool trains = false;
  if (training_ && autograd::gradEnabled()) {
    key << "train:";
    for (const Tensor &t : seg.inputs) {
      wantGrad.push_back(t.requires_grad() && isFloating(t.dtype()));
      trains = trains || wantGrad.back();
      key << (wantGrad.back() ? '1' : '0');
    }
    key << "/";
  }
  key << hashGraph(seg.graph).hex();
  std::vector<Shape> strides;
  for (const Tensor &t : seg.inputs) {
    strides.push_back(t.strides());
    key << "|" << shapeStr(t.strides());
  }
  std::shared_ptr<Executable> program;
  std::shared_ptr<TrainingPlan> plan;
  bool fresh = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (trains) {
      auto it = plans_.find(key.str());
      if (it != plans_.end()) plan = it->second;
    } else {
      auto it = programs_.find(key.str());
      if (it != programs_.end()) program = it->second;
    }
    if (plan || program) reused_ += trains ? 2 : 1;
  }
  std::vector<Tensor> outs;
  if (!program && !plan) {
    bool full;
    {
      std::lock_guard<std::mutex> lock(mu_);
      full = programs_.size() + plans_.size() >= limit_;
    }
    if (full) {
      outs = trains ? replayWithGrad(seg.graph, seg.inputs) : interpretGraph(seg.graph, seg.inputs);
    } else if (trains) {
      TrainingRequest r;
      r.samples.push_back({seg.graph, strides, {}, seg.inputs});
      r.wantGrad = wantGrad;
      r.moduleId = "rcjit_segment";
      r.label = "segment";
      plan = TrainingPlan::create(std::move(r));
      std::lock_guard<std::mutex> lock(mu_);
      plans_.emplace(key.str(), plan);
      ++compiled_; // its backward counts once a backward() compiled it (compiled())
      fresh = true;
    } else {
      CompileRequest r;
      r.moduleId = r.label = "rcjit_segment";
      r.samples.push_back({seg.graph, strides});
      program = compileGraph(std::move(r)).executable;
      std::lock_guard<std::mutex> lock(mu_);
      programs_.emplace(key.str(), program);
      ++compiled_;
      fresh = true;
    }
  }
  if (program || plan) {
    std::vector<const Tensor *> ptrs;
    for (const Tensor &t : seg.inputs) ptrs.push_back(&t);
    outs = plan ? plan->run(ptrs.data(), ptrs.size()) : program->run(ptrs.data(), ptrs.size());
  }
  for (size_t i = 0; i < seg.pending.size(); ++i) {
    eager::copyInto(seg.pending[i], outs[i]);
    // the filled tensor stands for the output: it takes over its place in the graph
    if (trains) seg.pending[i].impl()->autograd = outs[i].impl()->autograd;
  }
  return fresh;
}

int SegmentTable::compiled() const {
  std::lock_guard<std::mutex> lock(mu_);
  int n = compiled_;
  for (const auto &[key, plan] : plans_) n += plan->backwardIfCompiled() ? 1 : 0;
  return n;
}

int SegmentTable::reused() const {
  std::lock_guard<std::mutex> lock(mu_);
  return reused_;
}

} // namespace rcjit
