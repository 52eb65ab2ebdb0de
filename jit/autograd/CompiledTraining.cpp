// TrainingPlan: build (joint graph, partition, two compiles) and run (forward, then an
// autograd node whose backward runs the compiled backward).
#include "jit/autograd/CompiledTraining.h"

#include <algorithm>
#include <chrono>
#include <optional>
#include <sstream>

#include <rcjit/Autograd.h>
#include <rcjit/Error.h>

#include "autograd/Autograd.h"
#include "jit/CompileGraph.h"
#include "jit/Pipeline.h"
#include "jit/Sharding.h"
#include "jit/Tiered.h"
#include "jit/autograd/Joint.h"
#include "jit/autograd/Partition.h"
#include "jit/passes/GraphBuilder.h"
#include "support/Events.h"
#include "support/Log.h"
#include "targets/SymbolicProgram.h"
#include "tracer/TensorImpl.h"

namespace rcjit {

// The autograd node of one compiled call: the saved values, until its backward ran.
class CompiledBackward final : public autograd::CustomBackward {
public:
  CompiledBackward(std::shared_ptr<const TrainingPlan> plan, std::vector<Tensor> saved,
                   std::vector<Shape> outputShapes)
      : plan_(std::move(plan)), saved_(std::move(saved)), outputShapes_(std::move(outputShapes)) {}

  std::string name() const override { return plan_->name_; }

  bool sumsInto(size_t input) const override {
    for (const TrainingPlan::Scattered &s : plan_->scattered_) {
      if (plan_->gradInput_[static_cast<size_t>(s.output)] == static_cast<int>(input)) return true;
    }
    return false;
  }

  std::vector<Tensor> backward(const std::vector<Tensor> &gradOutputs,
                               const std::vector<bool> &needs, bool retainGraph,
                               std::vector<Tensor> &sums) override {
    const TrainingPlan &p = *plan_;
    const Device dev = p.device_;
    // the saved values have the layouts the backward was compiled for (the forward's);
    // the output gradients are made row-major. Without retain_graph the program frees each
    // saved value after its last use, as eager autograd frees a node's after its backward.
    std::vector<Tensor> in;
    if (retainGraph) {
      in = saved_;
    } else {
      in = std::move(saved_);
      saved_.clear();
    }
    for (size_t k = 0; k < outputShapes_.size(); ++k) {
      Tensor g = k < gradOutputs.size() ? gradOutputs[k] : Tensor();
      if (!g.defined()) {
        g = Tensor::zeros(outputShapes_[k], p.outputDtypes_[k], dev);
      } else if (g.dtype() != p.outputDtypes_[k]) {
        g = g.to(p.outputDtypes_[k]);
      }
      in.push_back(g.is_contiguous() ? g : g.contiguous());
    }
    std::vector<Tensor> grads = p.backward().runConsuming(in);
    for (const TrainingPlan::Scattered &s : p.scattered_) {
      const size_t j = static_cast<size_t>(s.output), i = static_cast<size_t>(p.gradInput_[j]);
      const Tensor &rows = grads[j], &ids = grads[static_cast<size_t>(s.ids)];
      if (i >= needs.size() || !needs[i]) continue;
      Tensor &sum = sums[i];
      if (autograd::scatterRowsInto(sum, Shape{s.num, rows.size(-1)}, rows, ids)) {
        grads[j] = std::move(sum); // the whole gradient: the engine adds nothing to it
      } else {
        grads[j] = embedding_backward(rows, ids, s.num);
      }
    }
    std::vector<Tensor> out(p.numInputs_);
    for (size_t j = 0; j < p.gradInput_.size(); ++j) {
      size_t i = static_cast<size_t>(p.gradInput_[j]);
      if (i < needs.size() && needs[i] && !p.dropGrad_[j]) out[i] = grads[j];
    }
    return out;
  }

  void release() override { saved_.clear(); }

private:
  std::shared_ptr<const TrainingPlan> plan_;
  std::vector<Tensor> saved_;
  std::vector<Shape> outputShapes_; // of this call's outputs (symbolic plans vary)
};

namespace {

// The tensors a joint trace binds to `g`'s program inputs: `given[i]` where it is defined
// and has the input's shape, else an uninitialized tensor of that shape (never read).
std::vector<Tensor> standIns(const Graph &g, const std::vector<Tensor> &given, Device device) {
  std::vector<Tensor> out;
  std::vector<int> ids = g.programInputs();
  for (size_t i = 0; i < ids.size(); ++i) {
    const Node &n = g.nodes[static_cast<size_t>(ids[i])];
    Shape shape = concreteShape(n.shape);
    if (i < given.size() && given[i].defined() && given[i].shape() == shape &&
        given[i].dtype() == n.dtype) {
      out.push_back(given[i]);
    } else {
      out.push_back(detail::makeTensor(shape, n.dtype, device));
    }
  }
  return out;
}

} // namespace

namespace {

// What is sharded in the backward: the saved values that are sharded inputs of the forward,
// and the gradients of sharded inputs (`gradInput`: the inputs that get one, in backward
// output order). `dropGrad` gets, per backward output, whether its unit's shard gradient
// was counted already (a unit's gradient is handed on once).
ShardingState backwardShardingOf(const ShardingState &forward, const Partition &part,
                                 const std::vector<int> &gradInput, std::vector<bool> &dropGrad) {
  ShardingState backward;
  dropGrad.assign(gradInput.size(), false);
  if (forward.empty()) return backward;
  backward.world_size = forward.world_size;
  backward.rank = forward.rank;
  backward.stage = forward.stage;
  const Graph &fwd = part.forward;
  const std::vector<int> ids = fwd.programInputs();
  auto shardedAt = [&](int programInput) -> const ShardedInput * {
    for (const ShardedInput &in : forward.inputs) {
      if (in.input == programInput) return &in;
    }
    return nullptr;
  };
  // stage 3: a saved parameter is its shard (stages 1 and 2 save the whole parameter)
  for (size_t sv = 0; sv < part.savedOutput.size() && forward.stage >= 3; ++sv) {
    const int node = fwd.outputs[static_cast<size_t>(part.savedOutput[sv])];
    for (size_t i = 0; i < ids.size(); ++i) {
      if (ids[i] != node) continue;
      if (const ShardedInput *in = shardedAt(static_cast<int>(i)))
        backward.inputs.push_back({static_cast<int>(sv), -1, in->param});
    }
  }
  std::vector<const detail::TensorImpl *> counted; // shards whose gradient is handed on
  for (size_t j = 0; j < gradInput.size(); ++j) {
    const ShardedInput *in = shardedAt(gradInput[j]);
    if (!in) continue;
    ShardedInput *merged = nullptr;
    for (ShardedInput &b : backward.inputs) {
      if (b.input >= 0 && b.grad_output < 0 && b.param.name == in->param.name &&
          b.param.shard.impl() == in->param.shard.impl() && b.param.offset == in->param.offset)
        merged = &b;
    }
    if (merged) {
      merged->grad_output = static_cast<int>(j);
    } else {
      backward.inputs.push_back({-1, static_cast<int>(j), in->param});
    }
    const detail::TensorImpl *shard = in->param.shard.impl().get();
    dropGrad[j] = std::find(counted.begin(), counted.end(), shard) != counted.end();
    if (!dropGrad[j]) counted.push_back(shard);
  }
  return backward;
}

// The backward outputs (gradients, in gradInput order) that are an embedding's scatter,
// embedding_backward(rows, ids) without a base that nothing else reads, in f32 or f64: each
// becomes the rows' gradient plus an output appended for the ids (scatteredGradients).
std::vector<int> scatterOutputs(const Graph &bg, size_t numGrads) {
  const std::vector<int> uses = useCounts(bg);
  std::vector<int> out;
  for (size_t j = 0; j < numGrads && j < bg.outputs.size(); ++j) {
    const int o = bg.outputs[j];
    const Node &n = bg.nodes[static_cast<size_t>(o)];
    if (n.op == OpKind::embedding_backward && n.inputs.size() == 2 && n.attrs.dims.size() == 2 &&
        uses[static_cast<size_t>(o)] == 1 && (n.dtype == DType::f32 || n.dtype == DType::f64))
      out.push_back(static_cast<int>(j));
  }
  return out;
}

// A tied weight used in two compiled regions (gpt2's token embedding and LM head) gets one
// gradient from each backward, and the engine sums them. Where one of them is the scatter
// of an embedding, the backward program returns the rows' gradient and the ids instead,
// and CompiledBackward scatters them into the other gradient's block when the engine holds
// it alone (autograd::CustomBackward::sumsInto), so the sum needs no block of its own, as
// the embedding_grad_sum pass gets inside one program; else into a new block, as the
// program would have (embedding_backward runs eagerly in a CPU program either way). Host
// plans only, without sharding or passes from outside the pipeline (a pass may take every
// output of a backward graph for a gradient: ddp_gradient_pass all-reduces them), and only
// where every sample's partition has the same scatters. Rewrites the partitions' backward
// graphs.
std::vector<TrainingPlan::Scattered> scatteredGradients(std::vector<Partition> &parts,
                                                        size_t numGrads, Device device,
                                                        const ShardingState &sharding) {
  if (!device.is_cpu() || !sharding.empty() || outsidePassesActive()) return {};
  const std::vector<int> js = scatterOutputs(parts[0].backward, numGrads);
  for (const Partition &part : parts) {
    if (scatterOutputs(part.backward, numGrads) != js) return {};
  }
  std::vector<TrainingPlan::Scattered> out;
  for (int j : js) {
    const Node &n =
        parts[0]
            .backward.nodes[static_cast<size_t>(parts[0].backward.outputs[static_cast<size_t>(j)])];
    out.push_back({j, static_cast<int>(parts[0].backward.outputs.size()), n.attrs.dims[0]});
    for (Partition &part : parts) {
      Graph &bg = part.backward;
      const Node &eb = bg.nodes[static_cast<size_t>(bg.outputs[static_cast<size_t>(j)])];
      const int rows = eb.inputs[0], ids = eb.inputs[1];
      bg.outputs[static_cast<size_t>(j)] = rows;
      bg.outputs.push_back(ids);
    }
  }
  return out;
}

enum class Half { forward, backward };

// One half through the one compile path.
CompileResult compileHalf(const TrainingRequest &r, const ShardingState &sharding, Half h,
                          std::vector<GraphSample> samples) {
  const bool forward = h == Half::forward;
  const char *half = forward ? "forward" : "backward";
  CompileRequest c;
  c.sharding = sharding;
  c.exec = r.exec;
  c.moduleId = r.moduleId + (forward ? "_fwd" : "_bwd");
  c.label = r.label + " " + half;
  c.samples = std::move(samples);
  // the forward's first tier may interpret it; a backward's elementwise work (the gradients
  // of every fused op) keeps its compiled fast tier
  c.interpretFirst = forward;
  if (r.samples.size() > 1) {
    c.symbolic = r.symbolic;
    // a symbolic backward finds its sizes among its own inputs (the saved values)
    c.symbolic.findSources = c.symbolic.findSources || !forward;
  }
  CompileResult res = compileGraph(std::move(c));
  if (!res.notSymbolic.empty()) throw Error(std::string(half) + ": " + res.notSymbolic);
  return res;
}

// The backward's samples: it takes the saved values as the forward `fp` returns them
// (views stay views) and the output gradients row-major (CompiledBackward makes them so);
// it reads its sizes from them.
std::vector<GraphSample> backwardSamples(const TrainingRequest &r,
                                         const std::vector<Partition> &parts, const Program &fp) {
  std::vector<GraphSample> samples;
  for (size_t k = 0; k < r.samples.size(); ++k) {
    Program specialized =
        fp.symbols.empty() ? Program{} : specializeProgram(fp, r.samples[k].syms.data());
    const Program &at = fp.symbols.empty() ? fp : specialized;
    std::vector<Shape> strides;
    for (int id : parts[k].backward.programInputs()) {
      const int arg = parts[k].backward.nodes[id].inputIndex;
      if (arg < static_cast<int>(parts[k].savedOutput.size())) {
        strides.push_back(at.values[at.outputs[parts[k].savedOutput[arg]]].strides);
      } else {
        strides.push_back(
            detail::contiguousStrides(concreteShape(parts[k].backward.nodes[id].shape)));
      }
    }
    samples.push_back(GraphSample{parts[k].backward, std::move(strides), r.samples[k].syms});
  }
  return samples;
}

// The passes of the two halves agree on what crosses between them, and a sharded
// parameter's gradient is its unit's shard gradient: else an Error naming the parameter.
void checkHalvesAgree(const std::string &label, const Graph &fg, const Graph &bg,
                      const ShardingState &backwardSharding, const std::vector<int> &savedOutput,
                      const std::vector<bool> &dropGrad) {
  const std::vector<int> bids = bg.programInputs();
  for (const ShardedInput &in : backwardSharding.inputs) {
    if (in.input >= 0) {
      const Node &got = bg.nodes[static_cast<size_t>(bids.at(static_cast<size_t>(in.input)))];
      const Node &given = fg.nodes[static_cast<size_t>(
          fg.outputs.at(static_cast<size_t>(savedOutput[static_cast<size_t>(in.input)])))];
      if (got.shape != given.shape) {
        throw Error(label + ": the backward reads the saved " + in.param.name + " as " +
                    shapeStr(concreteShape(got.shape)) + " but the forward saves " +
                    shapeStr(concreteShape(given.shape)) +
                    " (the pass schedule rewrote one half and not the other)");
      }
    }
    if (in.grad_output >= 0 && !dropGrad[static_cast<size_t>(in.grad_output)] &&
        backwardSharding.stage >= 3) {
      const Node &g =
          bg.nodes[static_cast<size_t>(bg.outputs.at(static_cast<size_t>(in.grad_output)))];
      if (concreteShape(g.shape) != Shape{in.param.shard.numel()}) {
        throw Error(label + " backward: the gradient of " + in.param.name +
                    ", a sharded parameter, is " + shapeStr(concreteShape(g.shape)) +
                    ", not its unit's shard gradient [" + std::to_string(in.param.shard.numel()) +
                    "]: compile it with a pass schedule that runs the zero3 pass");
      }
    }
  }
}

} // namespace

// ZeRO stages 1 and 2: where a zero1 / zero2 pass made a unit's gradient its shard
// gradient ([S]), that output goes to the shard (redirect_); without the pass every
// parameter's gradient goes to the parameter, none dropped.
void TrainingPlan::shardedGradients(TrainingPlan &plan, const ShardingState &backwardSharding) {
  if (backwardSharding.empty() || backwardSharding.stage >= 3) return;
  const Graph &bg = plan.backwardGraph_;
  // a unit is reduced when its first output is its shard gradient (the others: scalar zeros)
  std::vector<const detail::TensorImpl *> reducedShards;
  for (const ShardedInput &in : backwardSharding.inputs) {
    if (in.grad_output < 0 || plan.dropGrad_[static_cast<size_t>(in.grad_output)]) continue;
    const Node &g =
        bg.nodes[static_cast<size_t>(bg.outputs.at(static_cast<size_t>(in.grad_output)))];
    // the pass's reduce_scatter, not a whole gradient of the same shape (one rank, 1-D)
    if (g.op == OpKind::reduce_scatter && concreteShape(g.shape) == Shape{in.param.shard.numel()})
      reducedShards.push_back(in.param.shard.impl().get());
  }
  std::vector<bool> reduced(plan.gradInput_.size(), false);
  for (const ShardedInput &in : backwardSharding.inputs) {
    if (in.grad_output >= 0)
      reduced[static_cast<size_t>(in.grad_output)] =
          std::find(reducedShards.begin(), reducedShards.end(), in.param.shard.impl().get()) !=
          reducedShards.end();
  }
  for (size_t j = 0; j < reduced.size(); ++j) {
    if (reduced[j] && !plan.dropGrad_[j]) plan.redirect_.push_back(static_cast<int>(j));
    if (!reduced[j]) plan.dropGrad_[j] = false;
  }
}

// What compiling the backward reads: the request (its samples' symbol values, options and
// names), each sample's partition and the backward's sharding.
struct TrainingPlan::PendingBackward {
  TrainingRequest request;
  std::vector<Partition> parts;
  ShardingState backwardSharding;
  std::optional<logging::CompileContext> context; // the entry whose compile made the plan
};

std::shared_ptr<TrainingPlan> TrainingPlan::create(TrainingRequest r) {
  if (r.samples.empty()) throw Error("compiled training: no graph to compile");
  const Graph &forward = r.samples[0].graph;
  auto plan = std::make_shared<TrainingPlan>();
  plan->name_ = r.label;
  plan->numInputs_ = r.wantGrad.size();
  for (size_t i = 0; i < r.wantGrad.size(); ++i) {
    if (r.wantGrad[i]) plan->gradInput_.push_back(static_cast<int>(i));
  }
  plan->numOutputs_ = forward.outputs.size();
  for (int o : forward.outputs) plan->outputDtypes_.push_back(forward.nodes[o].dtype);
  const Device device = r.exec.target == Target::cuda ? Device::cuda(r.exec.device) : Device::cpu();
  plan->device_ = device;
  // each sample's joint graph, partitioned as the traced one is
  std::vector<Partition> parts;
  {
    NoGradGuard noGrad; // the joint trace records no eager autograd nodes
    for (const TrainingSample &s : r.samples) {
      JointGraph j = buildJointGraph(s.graph, standIns(s.graph, s.inputs, device), r.wantGrad);
      parts.push_back(partitionJoint(j, parts.empty() ? nullptr : &parts[0]));
    }
  }
  plan->savedOutput_ = parts[0].savedOutput;
  plan->savedBytes_ = parts[0].savedBytes;

  // the forward now, through the one compile path; the backward when a backward() first
  // reaches it, or now where it must fail at the compile (symbolic, sharded)
  auto pending = std::make_shared<PendingBackward>();
  if (const logging::CompileContext *c = logging::CompileScope::current()) pending->context = *c;
  pending->backwardSharding =
      backwardShardingOf(r.sharding, parts[0], plan->gradInput_, plan->dropGrad_);
  plan->scattered_ = scatteredGradients(parts, plan->gradInput_.size(), device, r.sharding);
  std::vector<GraphSample> forwardSamples;
  for (size_t k = 0; k < r.samples.size(); ++k)
    forwardSamples.push_back({parts[k].forward, r.samples[k].strides, r.samples[k].syms});
  CompileResult fr = compileHalf(r, r.sharding, Half::forward, std::move(forwardSamples));
  plan->forwardGraph_ = std::move(fr.graphs.at(0));
  plan->forward_ = std::move(fr.executable);
  checkShardedInputs(plan->forwardGraph_, r.sharding, r.label + " forward");
  // (and under a pass schedule, whose passes the entry's compile scope holds)
  const bool now = r.samples.size() > 1 || !r.sharding.empty() || !scheduleKey().empty();
  for (TrainingSample &sample : r.samples) { // the backward reads their symbol values only
    sample.graph = Graph();
    sample.inputs.clear();
  }
  pending->parts = std::move(parts);
  pending->request = std::move(r);
  plan->pending_ = std::move(pending);
  if (now) {
    std::lock_guard<std::mutex> lock(plan->backwardMu_);
    plan->compileBackward(*plan->pending_, false);
    plan->backwardSeconds_ = 0;                                // part of the entry's compile
    shardedGradients(*plan, plan->pending_->backwardSharding); // before any call delivers one
  }
  return plan;
}

void TrainingPlan::compileBackward(PendingBackward &p, bool lazy) const {
  const TrainingRequest &r = p.request;
  // the steps and cache lookups of a lazy compile name the entry, as the forward's did
  std::optional<logging::CompileScope> scope;
  if (p.context && !logging::CompileScope::current()) scope.emplace(*p.context);
  auto t0 = std::chrono::steady_clock::now();
  CompileResult br = compileHalf(r, p.backwardSharding, Half::backward,
                                 backwardSamples(r, p.parts, forward_->program()));
  Graph graph = std::move(br.graphs.at(0));
  checkHalvesAgree(r.label, forwardGraph_, graph, p.backwardSharding, savedOutput_, dropGrad_);
  backwardGraph_ = std::move(graph);
  backward_ = std::move(br.executable);
  // the output_code log showed the forward's code with the entry; the backward's comes now
  if (lazy && p.context && !backward_->llvmIr().empty() &&
      logging::wanted(logging::Kind::output_code)) {
    logging::emit(
        logging::OutputCodeEvent{.function = p.context->function,
                                 .name = p.context->name,
                                 .entry = p.context->entry,
                                 .llvmIr = "; " + r.label + " backward\n" + backward_->llvmIr()});
  }
  backwardSeconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  backwardReady_.store(true, std::memory_order_release);
}

const Executable &TrainingPlan::backward() const {
  if (!backwardReady_.load(std::memory_order_acquire)) {
    std::lock_guard<std::mutex> lock(backwardMu_);
    if (!backwardReady_.load(std::memory_order_relaxed)) compileBackward(*pending_, true);
  }
  return *backward_;
}

const Executable *TrainingPlan::backwardIfCompiled() const {
  return backwardReady_.load(std::memory_order_acquire) ? backward_.get() : nullptr;
}

const Graph &TrainingPlan::backwardGraph() const {
  return backwardReady_.load(std::memory_order_acquire) ? backwardGraph_
                                                        : pending_->parts.at(0).backward;
}

double TrainingPlan::backwardSeconds() const {
  return backwardReady_.load(std::memory_order_acquire) ? backwardSeconds_ : 0.0;
}

std::vector<Tensor> TrainingPlan::run(const Tensor *const *inputs, size_t n) const {
  std::vector<Tensor> all = forward_->run(inputs, n);
  std::vector<Tensor> saved;
  // detached handles: an output that is also saved must not own its own node (a cycle)
  for (int k : savedOutput_) saved.push_back(autograd::detachedHandle(all[static_cast<size_t>(k)]));
  all.resize(numOutputs_);
  std::vector<Shape> shapes;
  for (const Tensor &o : all) shapes.push_back(o.shape());
  std::vector<Tensor> in;
  for (size_t i = 0; i < n; ++i) in.push_back(*inputs[i]);
  for (int j : redirect_) { // ZeRO 1/2: the unit's reduce-scattered gradient goes to its shard
    const size_t i = static_cast<size_t>(gradInput_[static_cast<size_t>(j)]);
    ShardedParameter p;
    if (i < in.size() && sharded_parameter(in[i], p)) in[i] = p.shard;
  }
  auto node =
      std::make_shared<CompiledBackward>(shared_from_this(), std::move(saved), std::move(shapes));
  autograd::recordCustom(std::move(node), in, all);
  return all;
}

std::string TrainingPlan::print() const {
  std::ostringstream os;
  const std::string tier = tierNote(*forward_);
  if (!tier.empty()) os << "forward " << tier << "\n";
  os << "training: forward " << forward_->program().steps.size() << " steps, backward ";
  if (const Executable *b = backwardIfCompiled()) {
    os << b->program().steps.size() << " steps, ";
  } else {
    os << "not compiled yet (compiled when a backward() first reaches it), ";
  }
  os << savedOutput_.size() << " saved values (" << savedBytes_ << " bytes held until backward)\n";
  return os.str();
}

} // namespace rcjit
