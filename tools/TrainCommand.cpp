// `rcjit train`: per mode, a fresh copy of a built-in model (same seed, same weights) trains
// for N steps on one deterministic synthetic batch stream; the table has the columns of the
// published torch.compile training table (initial step time and peak memory, training and
// inference time per step) plus the first and last loss. With `--dist ddp` under mpirun,
// every rank trains on its slice of the global batch and the gradients are averaged over
// the ranks (rcjit::dist); rank 0 prints.
#include "tools/TrainCommand.h"

#include "tools/BenchStats.h"
#include "tools/CaptionTraining.h"
#include "tools/TrainCheckpoint.h"
#include "tools/TrainReport.h"

#include <algorithm>
#include <boost/program_options.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

#include <rcjit/DistPasses.h>
#include <rcjit/rcjit.h>

#include "dist/CompiledWaits.h"
#include "models/ModelCommon.h"
#include "models/Models.h"
#include "models/Safetensors.h"
#include "support/WorkPool.h"
#include "targets/cuda/CudaRuntime.h"
#include "tools/Cli.h"
#include "tools/Flags.h"

namespace po = boost::program_options;

namespace rcjit::tools {

namespace {

using train::printTrainTable;
using train::Settings;
using train::trainJson;
using train::TrainRow;

// Token ids of the synthetic stream stay below this (every built-in token model's vocabulary
// is larger), so a few steps already show the loss falling.
constexpr int64_t kStreamVocab = 256;

// One step's batch: the model's inputs and the loss target.
struct Batch {
  std::vector<Tensor> inputs;
  Tensor target; // i64 next tokens (cross_entropy), or floating relu(input) (mse)
};

// The synthetic stream, deterministic in (seed, step). An i64 [batch, seq] input (token ids)
// holds arithmetic progressions modulo kStreamVocab (random start, stride one of 1, 2, 3, 5, 7),
// and the target is each position's next token: learnable from the context. Other inputs are
// seeded normals. A model without token inputs regresses relu of its first input (mse).
Batch batchAt(const std::vector<Tensor> &templates, uint64_t seed, int step) {
  static const int64_t strides[] = {1, 2, 3, 5, 7};
  Batch b;
  bool tokens = false;
  uint64_t base = mix64(seed ^ (0x747261696E000000ull + static_cast<uint64_t>(step)));
  for (size_t i = 0; i < templates.size(); ++i) {
    const Tensor &t = templates[i];
    if (t.dtype() == DType::i64 && t.dim() == 2 && !tokens) {
      int64_t rows = t.size(0), seq = t.size(1);
      std::vector<int64_t> ids(static_cast<size_t>(rows * seq)), next(ids.size());
      for (int64_t r = 0; r < rows; ++r) {
        uint64_t h = mix64(base + static_cast<uint64_t>(r));
        int64_t start = static_cast<int64_t>(h % kStreamVocab), stride = strides[(h >> 32) % 5];
        for (int64_t s = 0; s < seq; ++s) {
          ids[static_cast<size_t>(r * seq + s)] = (start + s * stride) % kStreamVocab;
          next[static_cast<size_t>(r * seq + s)] = (start + (s + 1) * stride) % kStreamVocab;
        }
      }
      b.inputs.push_back(Tensor::from_vector(ids, {rows, seq}));
      b.target = Tensor::from_vector(next, {rows, seq});
      tokens = true;
    } else if (isFloating(t.dtype())) {
      b.inputs.push_back(Tensor::randn(t.shape(), mix64(base + 1000 + i), t.dtype()));
    } else {
      throw Error("rcjit train: input " + std::to_string(i) + " of the model is " +
                  std::string(dtypeName(t.dtype())) +
                  "; the synthetic stream makes token ids [batch, seq] and floating inputs");
    }
  }
  if (!tokens) b.target = relu(b.inputs.at(0));
  return b;
}

// Rank `rank`'s rows of a global batch: `world` equal slices along dim 0.
Batch sliceOfBatch(const Batch &global, int rank, int world) {
  auto rows = [&](const Tensor &t) {
    const int64_t n = t.size(0) / world;
    return slice(t, 0, rank * n, (rank + 1) * n).contiguous();
  };
  Batch b;
  for (const Tensor &t : global.inputs) b.inputs.push_back(rows(t));
  b.target = rows(global.target);
  return b;
}

Mode parseTrainMode(const std::string &m) {
  if (m == "eager") return Mode::eager;
  if (m == "full") return Mode::full;
  if (m == "regional") return Mode::regional;
  if (m == "whole") return Mode::full; // the whole step (forward, backward, update) compiled
  throw std::invalid_argument("--modes: unknown mode '" + m +
                              "' (expected eager, full, regional, whole)");
}

// The pass schedule of a compiled mode under --dist zero3 --schedule default (DeepCompile's):
// zero3 from the first step; from the third on, once the first steps ran, also prefetch
// (gathers started one unit ahead) and selective_unshard (the smallest units kept gathered
// from the forward to the backward).
std::vector<ScheduleStep> zeroSchedule(const Settings &s) {
  if (s.schedule == "none") return {};
  if (s.schedule == "zero3") return {{0, {"zero3"}}}; // no prefetch: for comparisons
  return {{0, {"zero3"}}, {2, {"zero3", "selective_unshard", "prefetch"}}};
}

// A NaN or infinite loss: PyTorch trains on without a word (torch.autograd.detect_anomaly
// finds the op, GradScaler skips the step); rcjit train says so once per mode, or with
// --check-finite stops with an Error.
void nonFiniteLoss(const std::string &model, const std::string &mode, int step, double loss,
                   const Settings &s, bool &warned, std::ostream &err) {
  char what[160];
  std::snprintf(what, sizeof what, "%s %s step %d: the loss is %g", model.c_str(), mode.c_str(),
                step + 1, loss);
  if (s.checkFinite) throw Error(std::string("--check-finite: ") + what);
  if (warned) return;
  warned = true;
  err << "train: warning: " << what
      << "; training goes on (as PyTorch's would) from non-finite weights; --check-finite "
         "stops at the first one\n";
}

// The compile options of `mode` under `s`; `graphDdp`: ddp in full mode, where the compiled
// backward averages the gradients itself, with bucketed all_reduce nodes that a graph pass
// places as soon as each bucket's gradients exist (dist::ddp_gradient_pass); eager and
// regional mode average them after backward()
CompileOptions trainOptions(const std::string &mode, const Settings &s, bool graphDdp) {
  CompileOptions opts;
  opts.mode = parseTrainMode(mode);
  opts.target = s.device.is_cuda() ? Target::cuda : Target::cpu;
  opts.max_autotune = s.maxAutotune;
  opts.reduce_overhead = s.reduceOverhead;
  if (s.zeroStage == 3 && opts.mode != Mode::eager) opts.schedule = zeroSchedule(s);
  // zero1 / zero2 in full mode: the compiled backward reduce-scatters the gradients into the
  // optimizer's slices (regional mode: the optimizer reduces them after backward())
  if ((s.zeroStage == 1 || s.zeroStage == 2) && opts.mode == Mode::full && s.schedule != "none")
    opts.schedule = {{0, {"zero" + std::to_string(s.zeroStage)}}};
  if (graphDdp) {
    const std::string pass = "rcjit_train_ddp_" + std::to_string(s.bucketBytes);
    if (!has_scheduled_pass(pass))
      register_scheduled_pass(pass, dist::ddp_gradient_pass(s.bucketBytes));
    opts.schedule = {{0, {pass}}};
  }
  return opts;
}

// The optimizer of one mode's run: ZeRO's, or AdamW or SGD over the model's parameters.
struct TrainOptimizer {
  std::vector<Tensor> params;              // none held under ZeRO-3: the parameters live as slices
  std::unique_ptr<optim::Optimizer> local; // AdamW or SGD, when not under ZeRO
  std::optional<dist::ZeroOptimizer> zero;
};

void makeOptimizer(Model &m, const Settings &s, TrainOptimizer &o) {
  const optim::AdamWOptions adamwOptions{.lr = s.lr};
  const optim::SGDOptions sgdOptions{.lr = s.lr, .momentum = 0.9};
  if (s.zeroStage > 0) { // broadcasts rank 0's weights itself
    const dist::ZeroOptions zo{.stage = s.zeroStage,
                               .bucket_bytes = s.bucketBytes,
                               .prefetch = s.prefetch,
                               .max_grad_norm = s.clipGradNorm};
    if (s.optimizer == "adamw") {
      o.zero.emplace(m.module(), adamwOptions, zo);
    } else {
      o.zero.emplace(m.module(), sgdOptions, zo);
    }
  } else {
    o.params = m.module().parameters();
    if (s.ddp) dist::broadcast_parameters(o.params); // every rank starts from rank 0's weights
    if (s.optimizer == "adamw") {
      o.local = std::make_unique<optim::AdamW>(o.params, adamwOptions);
    } else {
      o.local = std::make_unique<optim::SGD>(o.params, sgdOptions);
    }
  }
}

// The figures after the last training step: memory (the largest over the ranks under
// ddp), the step times' spread, the throughput and the communication time.
void finishTrainRow(TrainRow &r, const Settings &s, const ModelConfig &global, const ModelConfig &c,
                    int64_t memoryBefore) {
  r.laterPeakMiB = static_cast<double>(memory_stats(s.device).peak_bytes) / (1 << 20);
  r.stateMiB = static_cast<double>(memory_stats(s.device).current_bytes - memoryBefore) / (1 << 20);
  r.maxPeakMiB = r.laterPeakMiB;
  if (s.ddp) { // every rank's figures: rank 0 prints the largest
    Tensor mib = Tensor::zeros({2}, DType::f64);
    mib.data<double>()[0] = r.stateMiB;
    mib.data<double>()[1] = r.maxPeakMiB;
    dist::all_reduce(mib, dist::ReduceOp::max);
    r.stateMiB = mib.data<double>()[0];
    r.maxPeakMiB = mib.data<double>()[1];
  }
  r.stepSpread = summarize(std::vector<double>(r.stepMsAll.begin() + 1, r.stepMsAll.end()));
  r.stepMs = r.stepSpread.median;
  r.tokensPerS = static_cast<double>(global.batch * c.seq) / (r.stepMs / 1e3);
  if (s.ddp) r.commMs = median(std::vector<double>(r.commMsAll.begin() + 1, r.commMsAll.end()));
}

// The inference columns: the forward alone, no graph recorded, compiled the same way; the
// first call (its compile) is not timed.
void measureInference(TrainRow &r, Model &m, const CompileOptions &opts,
                      const std::vector<Tensor> &templates, const Settings &s) {
  NoGradGuard noGrad;
  CompileOptions inferOpts = opts;
  // ZeRO-3 keeps the parameters sharded: the compiled forward gathers each unit before its
  // first use and frees it after its last (eager: the optimizer's hooks gather per block),
  // so no rank packs full weight copies; otherwise no scheduled pass has anything to do
  inferOpts.schedule.clear();
  if (s.zeroStage == 3 && opts.mode != Mode::eager) inferOpts.schedule = {{0, {"zero3"}}};
  auto forward = compile([&](const std::vector<Tensor> &in) { return m.forward(in); }, inferOpts);
  std::vector<Tensor> in = batchAt(templates, s.seed, s.steps).inputs;
  if (s.device.is_cuda()) {
    for (Tensor &t : in) t = t.to(s.device);
  }
  Autocast ac(DType::bf16, s.autocast);
  forward(in);
  std::vector<double> times;
  for (int i = 0; i < s.inferReps; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    forward(in);
    if (s.device.is_cuda()) cuda::DeviceContext::get(0).synchronize();
    times.push_back(msSince(t0));
  }
  r.inferMsAll = times;
  r.inferSpread = summarize(times);
  r.inferMs = r.inferSpread.median;
  r.infer = forward.stats();
  r.packedMiB = static_cast<double>(memory_stats().packed_weight_bytes) / (1 << 20);
}

// Step i's batch: the global batch of the stream (this rank's rows under ddp) with the
// target last, on the device.
std::vector<Tensor> trainBatch(const std::vector<Tensor> &globalTemplates, const Settings &s,
                               int i) {
  Batch b = batchAt(globalTemplates, s.seed, i);
  if (s.ddp) b = sliceOfBatch(b, s.rank, s.world);
  b.inputs.push_back(b.target);
  if (s.device.is_cuda()) {
    for (Tensor &t : b.inputs) t = t.to(s.device);
  }
  return std::move(b.inputs);
}

// Step i's figures: its time, its loss (the mean over the ranks under ddp), the first
// step's peak memory; and its progress line.
void recordStep(TrainRow &r, const Tensor &l, double ms, int i, const std::string &model,
                const Settings &s, std::chrono::steady_clock::time_point start, bool &warned,
                std::ostream &err) {
  double lossValue = l.item();
  if (s.ddp) { // the global batch's mean loss
    Tensor mean = Tensor::full({}, lossValue, DType::f64);
    dist::all_reduce(mean, dist::ReduceOp::mean);
    lossValue = mean.item();
  }
  if (i == 0) {
    r.firstStepS = ms / 1e3;
    r.firstPeakMiB = static_cast<double>(memory_stats(s.device).peak_bytes) / (1 << 20);
    reset_peak_memory_stats(s.device);
  }
  r.stepMsAll.push_back(ms);
  r.losses.push_back(lossValue);
  if (!std::isfinite(lossValue)) nonFiniteLoss(model, r.mode, i, lossValue, s, warned, err);
  char line[200];
  std::snprintf(line, sizeof line, "train: %s %s step %d/%d: loss %.4f, %.1f ms (%.1f s)\n",
                model.c_str(), r.mode.c_str(), i + 1, s.steps, r.losses.back(), ms,
                msSince(start) / 1e3);
  err << line << std::flush;
}

// --clip-grad-norm: the gradients clipped to that total norm before the update; a whole step
// clips without reading the norm on the host (clip_grads_with_norm_). ZeRO clips in its
// step() (ZeroOptions::max_grad_norm).
// Returns the norm before clipping (an f64 scalar; undefined without --clip-grad-norm).
Tensor clipGradients(const std::vector<Tensor> &params, const Settings &s, bool whole) {
  if (s.clipGradNorm <= 0) return Tensor();
  if (!whole) return Tensor::full({}, clip_grad_norm_(params, s.clipGradNorm), DType::f64);
  Tensor norm = get_total_norm(grads_of(params));
  clip_grads_with_norm_(params, s.clipGradNorm, norm);
  return norm;
}

// Step i's rate under --warmup / --lr-schedule: set on the host before the step, or (a
// whole step) computed in its graph from the step count, given as its last input.
void setStepLr(std::optional<dist::ZeroOptimizer> &zero, optim::Optimizer *local, const Settings &s,
               int i, bool whole, std::vector<Tensor> &inputs) {
  if (whole) {
    inputs.push_back(Tensor::full({}, i));
  } else if (zero) {
    zero->set_lr(scheduledLr(s, i));
  } else {
    local->set_lr(scheduledLr(s, i));
  }
}

TrainRow trainOne(const ModelInfo &info, const ModelConfig &c, const std::string &mode,
                  const Settings &s, std::ostream &err) {
  cache::clear(); // cold: every mode compiles from scratch
  const int64_t memoryBefore = memory_stats(s.device).current_bytes;
  std::unique_ptr<Model> m = info.build(c);
  if (!s.weights.empty()) loadWeights(m->module(), s.weights, WeightNaming::forModel(info.name));
  if (s.device.is_cuda()) m->to(s.device);
  const std::vector<Tensor> templates = m->makeInputs(c);
  const size_t nIn = templates.size();
  ModelConfig global = c; // ddp: the stream makes the global batch; each rank takes its rows
  global.batch = c.batch * s.world;
  const std::vector<Tensor> globalTemplates = m->makeInputs(global);
  const bool graphDdp = s.ddp && s.zeroStage == 0 && mode == "full";
  // ddp in a whole step: dist::all_reduce_gradients traced between backward() and the update
  const bool wholeDdp = s.ddp && s.zeroStage == 0 && mode == "whole";
  const CompileOptions opts = trainOptions(mode, s, graphDdp);
  auto lossFn = [&](const std::vector<Tensor> &in) {
    std::vector<Tensor> inputs(in.begin(), in.begin() + static_cast<std::ptrdiff_t>(nIn));
    Tensor out = m->forward(inputs);
    if (in.back().dtype() == DType::i64) return cross_entropy(out, in.back());
    if (out.shape() != in.back().shape()) {
      throw Error("rcjit train: " + info.name + " has no token input and its output " +
                  shapeStr(out.shape()) + " is not shaped like its input " +
                  shapeStr(in.back().shape()) + ": there is no target to regress");
    }
    return mse_loss(out, in.back());
  };
  auto loss = compile(lossFn, opts);
  TrainOptimizer o;
  makeOptimizer(*m, s, o);
  optim::Optimizer *local = o.local.get();
  train::resumeMode(s, m->module(), local, o.zero ? &*o.zero : nullptr);
  std::optional<dist::ZeroOptimizer> &zero = o.zero;
  // whole: one compiled function runs zero_grad, the forward, backward() and the step, so
  // they are one graph; the others compile the loss and run backward and the step outside
  const bool whole = mode == "whole";
  // a scheduled whole step takes the step count last and sets the rate in its graph
  auto step = [&](const std::vector<Tensor> &in) {
    if (s.scheduled()) local->set_lr(scheduledLr(s, in.back()));
    local->zero_grad();
    Tensor l = lossFn({in.begin(), in.end() - (s.scheduled() ? 1 : 0)});
    l.backward();
    if (wholeDdp) dist::all_reduce_gradients(o.params, s.bucketBytes);
    Tensor norm = clipGradients(o.params, s, true);
    local->step();
    return norm.defined() ? std::vector<Tensor>{l.detach(), norm} : std::vector<Tensor>{l.detach()};
  };
  auto wholeStep = compile(step, opts);
  TrainRow r;
  r.mode = mode;
  r.graphDdp = graphDdp || wholeDdp;
  auto start = std::chrono::steady_clock::now();
  bool warned = false; // of a loss that is not finite
  const WorkPool &pool = WorkPool::instance();
  int64_t jobs0 = 0, packed0 = 0; // at the end of the initial step
  for (int i = 0; i < s.steps; ++i) {
    std::vector<Tensor> inputs = trainBatch(globalTemplates, s, s.firstStep + i);
    if (s.scheduled()) setStepLr(zero, local, s, s.firstStep + i, whole, inputs);
    if (i == 0) reset_peak_memory_stats(s.device);
    auto t0 = std::chrono::steady_clock::now();
    Tensor l, norm; // norm: the gradients' before clipping (--clip-grad-norm)
    if (whole) {
      Autocast ac(DType::bf16, s.autocast);
      std::vector<Tensor> outs = wholeStep(inputs);
      l = outs[0];
      if (outs.size() > 1) norm = outs[1];
      if (wholeDdp) r.commMsAll.push_back(0); // inside the compiled step: not timed apart
    } else if (zero) { // ZeRO: the optimizer averages the gradients over the ranks itself
      // zero3 gathers in forward and backward: the optimizer's own, or compiled code's
      const double waited =
          zero->stats().waitSeconds + dist::detail::compiledCollectiveWaitSeconds();
      zero->zero_grad();
      {
        Autocast ac(DType::bf16, s.autocast);
        l = loss(inputs);
      }
      l.backward();
      zero->step();
      if (s.clipGradNorm > 0) norm = Tensor::full({}, zero->last_grad_norm(), DType::f64);
      r.commMsAll.push_back(
          (zero->stats().waitSeconds + dist::detail::compiledCollectiveWaitSeconds() - waited) *
          1e3);
    } else {
      local->zero_grad();
      {
        Autocast ac(DType::bf16, s.autocast);
        l = loss(inputs);
      }
      l.backward();
      if (graphDdp) { // averaged inside the compiled backward: no separate wait
        r.commMsAll.push_back(0);
      } else if (s.ddp) { // each rank's loss is the mean over its equal slice: average them
        r.commMsAll.push_back(dist::all_reduce_gradients(o.params, s.bucketBytes).waitSeconds *
                              1e3);
      }
      norm = clipGradients(o.params, s, false);
      local->step();
    }
    if (s.device.is_cuda()) cuda::DeviceContext::get(0).synchronize(); // the step's kernels ran
    recordStep(r, l, msSince(t0), i, info.name, s, start, warned, err);
    train::saveMode(s, mode, s.firstStep + i + 1, m->module(), local, zero ? &*zero : nullptr, err);
    r.lrs.push_back(zero ? zero->lr() : local->lr());
    if (norm.defined()) r.gradNorms.push_back(norm.item());
    // the steps after the initial one are timed on the optimized tier, as bench's calls are
    if (i == 0 && mode != "eager") r.tierWaitMs = waitForOptimizedTier();
    if (i == 0) {
      jobs0 = pool.pooledJobs();
      packed0 = pool.packedJobs();
    }
  }
  r.poolJobs = pool.pooledJobs() - jobs0;
  r.packedJobs = pool.packedJobs() - packed0;
  finishTrainRow(r, s, global, c, memoryBefore);
  r.train = whole ? wholeStep.stats() : loss.stats();
  measureInference(r, *m, opts, templates, s);
  return r;
}

// The flags of `rcjit train` that are not Settings fields as they are given.
struct TrainFlags {
  std::string modes, dtype, json, lr, strategies, distMode, target, lrSchedule;
  int64_t batch = 4, seq = 128;
  int scheduleSteps = 0;
  double bucketMiB = 25;
  int layers = -1;
};

// The flags' descriptions, bound to `s` and `f`.
void addTrainOptions(po::options_description &desc, Settings &s, TrainFlags &f) {
  desc.add_options()("help,h", "show this help")(
      "model", po::value(&s.model)->default_value("gpt2"), "model name (see 'rcjit models')")(
      "modes", po::value(&f.modes)->default_value("eager,full,regional"),
      "comma list of modes: eager, full, regional, whole (forward, backward and optimizer "
      "step compiled as one graph)")("batch", po::value(&f.batch)->default_value(4), "batch size")(
      "seq", po::value(&f.seq)->default_value(128), "sequence length")(
      "steps", po::value(&s.steps)->default_value(20),
      "training steps per mode (at least 2; with --strategy the default is 60: a warm-up of 20, "
      "then the 40 steps/s measures)")("layers", po::value(&f.layers)->default_value(-1),
                                       "override the number of layers")(
      "dtype", po::value(&f.dtype)->default_value("f32"),
      "f32, or bf16: matmul, linear, conv2d and attention under Autocast(bf16) with f32 "
      "parameters, optimizer state and gradients")(
      "optimizer", po::value(&s.optimizer)->default_value("adamw"),
      "adamw (PyTorch's defaults) or sgd (momentum 0.9)")(
      "lr", po::value(&f.lr), "learning rate (default 1e-3 for adamw, 1e-2 for sgd)")(
      "clip-grad-norm", po::value(&s.clipGradNorm)->default_value(0),
      "clip the gradients to this total L2 norm before each update (0: no clipping); a whole "
      "step clips inside its graph (get_total_norm, clip_grads_with_norm_)")(
      "warmup", po::value(&s.warmup)->default_value(0),
      "steps of linear warm-up of the learning rate (lr * (i + 1) / N at step i)")(
      "lr-schedule", po::value(&f.lrSchedule)->default_value("constant"),
      "after the warm-up: constant, or cosine (decays towards 0 over the remaining steps); a "
      "whole step computes the rate in its graph from the step count (set_lr(Tensor))")(
      "schedule-steps", po::value(&f.scheduleSteps)->default_value(0),
      "the steps --lr-schedule cosine decays over (default: the run's, counted from the start "
      "of training: with --resume, the checkpoint's steps + --steps); give the whole run's "
      "length to a run that will be resumed")(
      "save", po::value(&s.saveTo),
      "after each mode's last step write a checkpoint to FILE (parameters, optimizer state, "
      "step count; safetensors; {mode} in FILE is replaced by the mode's name, needed with "
      "several modes, and {step} by the count of steps trained)")(
      "save-every", po::value(&s.saveEvery)->default_value(0),
      "with --save: also write the checkpoint after every N-th step (counted from the start "
      "of training; put {step} in FILE to keep each, else each replaces the last)")(
      "resume", po::value(&s.resumeFrom),
      "start every mode from the checkpoint FILE of `rcjit train --save` "
      "(its parameters, optimizer state and step count: the batch stream and "
      "the rate schedule go on from there)")("seed", po::value(&s.seed)->default_value(0),
                                             "seed of the weights and the batch stream")(
      "json", po::value(&f.json), "also write every figure, step times and losses to FILE")(
      "weights", po::value(&s.weights),
      "start from parameters in FILE.safetensors (Hugging Face names; every shape checked); "
      "without it the weights are random (seeded)")(
      "strategy", po::value(&f.strategies),
      "vit-gpt2 only: the captioning workflow at CPU sizes under these comma-separated "
      "dynamic-shape strategies (pad-max, pad-longest, mark-dynamic, buckets, modular, "
      "regional, warm; or all), each against eager on the same batches")(
      "max-autotune", po::bool_switch(&s.maxAutotune),
      "compiled modes with CompileOptions::max_autotune")(
      "reduce-overhead", po::bool_switch(&s.reduceOverhead),
      "compiled modes with CompileOptions::reduce_overhead")(
      "target", po::value(&f.target)->default_value("cpu"),
      "cpu or cuda (an NVIDIA GPU: the model, its batches and the compiled code on GPU 0)")(
      "dist", po::value(&f.distMode)->default_value("none"),
      "none; ddp: data parallel over the ranks mpirun starts (--batch is the global batch); "
      "zero1, zero2, zero3: ddp with the optimizer state, + gradients, + parameters sharded "
      "over the ranks (zero3 compiled: through the pass schedule, see --schedule)")(
      "schedule", po::value(&s.schedule)->default_value("default"),
      "zero3, compiled modes: default (the pass zero3 from step 0, + selective_unshard and "
      "prefetch from step 2), zero3 (the zero3 pass alone) or none (no passes: zero3 runs "
      "eagerly, --modes eager); zero1/zero2, full mode: the zero1/zero2 pass (reduce-scatters "
      "in the compiled backward) unless none")(
      "bucket-mb", po::value(&f.bucketMiB)->default_value(25),
      "ddp: MiB of gradients per non-blocking all_reduce; zero1/zero2: MiB of parameters per "
      "sharded unit")("prefetch", po::bool_switch(&s.prefetch),
                      "zero3: gather the block expected next while one runs")(
      "check-finite", po::bool_switch(&s.checkFinite),
      "stop with an error at the first NaN or infinite loss (without it: a warning, once per "
      "mode, and training goes on, as in PyTorch)");
}

// The flags checked, in the order their messages are given, and Settings filled from them
// (not yet the device and the ranks). Throws std::invalid_argument.
void checkTrainFlags(Settings &s, const TrainFlags &f, const po::variables_map &vm) {
  if (f.batch <= 0 || f.seq <= 0) throw std::invalid_argument("--batch and --seq must be positive");
  checkSeqFlag(modelNamed(s.model), f.seq); // before anything sized by it is allocated
  if (s.steps < 2) {
    throw std::invalid_argument("--steps: " + std::to_string(s.steps) +
                                " is fewer than 2 (the step time is the median after the first)");
  }
  checkLayersFlag(f.layers);
  if (f.dtype != "f32" && f.dtype != "bf16") {
    throw std::invalid_argument("--dtype: '" + f.dtype + "' is not f32 or bf16");
  }
  s.autocast = f.dtype == "bf16";
  if (f.target != "cpu" && f.target != "cuda") {
    throw std::invalid_argument("--target: '" + f.target + "' is not cpu or cuda");
  }
  if (f.target == "cuda" && (f.distMode != "none" || vm.count("strategy"))) {
    throw std::invalid_argument("--target cuda trains in one process on one GPU (no --dist, "
                                "no --strategy: collectives on GPU tensors need NCCL, not "
                                "built yet)");
  }
  if (s.optimizer != "adamw" && s.optimizer != "sgd") {
    throw std::invalid_argument("--optimizer: '" + s.optimizer + "' is not adamw or sgd");
  }
  s.lr = s.optimizer == "adamw" ? 1e-3 : 1e-2;
  if (vm.count("lr")) {
    size_t used = 0;
    try {
      s.lr = std::stod(f.lr, &used);
    } catch (const std::exception &) {
      used = 0;
    }
    if (used != f.lr.size() || !(s.lr > 0) || !std::isfinite(s.lr)) {
      throw std::invalid_argument("--lr: '" + f.lr + "' is not a positive number");
    }
  }
  if (!(s.clipGradNorm >= 0) || !std::isfinite(s.clipGradNorm)) {
    char value[32];
    std::snprintf(value, sizeof value, "%g", s.clipGradNorm);
    throw std::invalid_argument("--clip-grad-norm: " + std::string(value) +
                                " is not a finite number >= 0");
  }
  if (s.clipGradNorm > 0 && vm.count("strategy")) {
    throw std::invalid_argument("--clip-grad-norm: the captioning workflow (--strategy) does "
                                "not clip");
  }
  if (s.warmup < 0) {
    throw std::invalid_argument("--warmup: " + std::to_string(s.warmup) +
                                " is not a number of steps (0 or more)");
  }
  if (f.lrSchedule != "constant" && f.lrSchedule != "cosine") {
    throw std::invalid_argument("--lr-schedule: '" + f.lrSchedule + "' is not constant or cosine");
  }
  s.cosine = f.lrSchedule == "cosine";
  if (s.scheduled() && vm.count("strategy")) {
    throw std::invalid_argument("--warmup and --lr-schedule: the captioning workflow "
                                "(--strategy) keeps its rate constant");
  }
  if (f.distMode == "zero1" || f.distMode == "zero2" || f.distMode == "zero3") {
    s.zeroStage = f.distMode.back() - '0';
  } else if (f.distMode != "none" && f.distMode != "ddp") {
    throw std::invalid_argument("--dist: unknown mode '" + f.distMode +
                                "' (expected none, ddp, zero1, zero2 or zero3)");
  }
  if (!(f.bucketMiB > 0) || !std::isfinite(f.bucketMiB)) {
    char value[32];
    std::snprintf(value, sizeof value, "%g", f.bucketMiB);
    throw std::invalid_argument("--bucket-mb: " + std::string(value) +
                                " is not a positive number of MiB");
  }
  s.bucketBytes = std::max<int64_t>(1, static_cast<int64_t>(f.bucketMiB * (1 << 20)));
  if (f.distMode != "none" && vm.count("strategy")) {
    throw std::invalid_argument("--strategy: the captioning workflow runs in one process "
                                "(no --dist)");
  }
  if ((vm.count("save") || vm.count("resume")) && vm.count("strategy")) {
    throw std::invalid_argument("--save / --resume: the captioning workflow (--strategy) keeps "
                                "no checkpoints");
  }
}

// --strategy: the captioning workflow (tools/CaptionTraining.h).
int captionCommand(const Settings &s, const TrainFlags &f, const po::variables_map &vm,
                   std::ostream &out, std::ostream &err) {
  if (s.model != "vit-gpt2") {
    throw std::invalid_argument("--strategy: the captioning workflow trains vit-gpt2 (use "
                                "--model vit-gpt2), not " +
                                s.model);
  }
  if (f.dtype != "f32" || vm.count("weights") || !vm["layers"].defaulted() || s.maxAutotune ||
      s.reduceOverhead || s.optimizer != "adamw") {
    throw std::invalid_argument("--strategy: the captioning workflow trains f32 with AdamW "
                                "at its own CPU size (no --dtype, --weights, --layers, "
                                "--optimizer, --max-autotune, --reduce-overhead)");
  }
  CaptionSettings cs;
  for (const std::string &name : splitList(f.strategies)) {
    if (name == "all") {
      cs.strategies = captionStrategies();
      continue;
    }
    const auto &known = captionStrategies();
    if (std::find(known.begin(), known.end(), name) == known.end()) {
      throw std::invalid_argument("--strategy: unknown strategy '" + name +
                                  "' (expected pad-max, pad-longest, mark-dynamic, buckets, "
                                  "modular, regional, warm, eager or all)");
    }
    cs.strategies.push_back(name);
  }
  if (cs.strategies.empty()) throw std::invalid_argument("--strategy needs a value");
  if (!vm["steps"].defaulted()) cs.steps = s.steps; // else the workflow's own default
  cs.warmupSteps = captionWarmupSteps(cs.steps);
  cs.batch = vm["batch"].defaulted() ? 8 : f.batch;
  cs.lr = s.lr;
  cs.seed = s.seed;
  cs.json = f.json;
  captionTrain(cs, out, err);
  return kOk;
}

// The --modes list, checked against the other flags. Throws std::invalid_argument.
std::vector<std::string> trainModes(const Settings &s, const TrainFlags &f) {
  std::vector<std::string> modeList = splitList(f.modes);
  if (modeList.empty()) throw std::invalid_argument("--modes needs a value");
  for (const std::string &m : modeList) parseTrainMode(m);
  if (f.distMode != "none" && f.distMode != "ddp" &&
      std::find(modeList.begin(), modeList.end(), "whole") != modeList.end()) {
    throw std::invalid_argument("--modes whole with --dist " + f.distMode +
                                " is not built yet: the sharded optimizer step is not compiled "
                                "(--dist ddp compiles a whole step)");
  }
  if (s.scheduled() && f.target == "cuda" &&
      std::find(modeList.begin(), modeList.end(), "whole") != modeList.end()) {
    throw std::invalid_argument("--warmup / --lr-schedule with --modes whole on cuda: the rate "
                                "computed in the graph has not run on a GPU yet (the other modes "
                                "set it on the host)");
  }
  if (s.prefetch && s.zeroStage != 3) {
    throw std::invalid_argument("--prefetch: only --dist zero3 gathers parameters as the model "
                                "runs");
  }
  if (s.schedule != "default" && s.schedule != "zero3" && s.schedule != "none") {
    throw std::invalid_argument("--schedule: '" + s.schedule + "' is not default, zero3 or none");
  }
  if (s.zeroStage == 3) {
    for (const std::string &m : modeList) {
      if (m != "eager" && s.schedule == "none") {
        throw std::invalid_argument("--dist zero3 --schedule none runs no passes, so the "
                                    "eager hooks gather each block as it is called and the "
                                    "model runs eagerly: use --modes eager (or --schedule "
                                    "default: the zero3 pass gathers inside compiled code)");
      }
    }
  }
  return modeList;
}

} // namespace

int trainCommand(const std::vector<std::string> &args, std::ostream &out, std::ostream &err) {
  po::options_description desc(
      "rcjit train: train a built-in model per mode on a synthetic batch stream");
  Settings s;
  TrainFlags f;
  addTrainOptions(desc, s, f);
  po::variables_map vm;
  if (!parseFlags(desc, args, vm, out)) return kOk;
  checkTrainFlags(s, f, vm);
  if (vm.count("strategy")) return captionCommand(s, f, vm, out, err);
  const std::vector<std::string> modeList = trainModes(s, f);
  train::checkCheckpointFlags(s, modeList, f.scheduleSteps);
  const ModelInfo &info = modelNamed(s.model);
  if (f.target == "cuda") { // a clear Error here when there is no GPU
    s.device = Device::cuda();
    s.targetLabel = "cuda (" + cuda::DeviceContext::get(0).info().name + ")";
  }
  if (f.distMode != "none") {
    dist::init(); // the launcher's ranks; a world of 1 without mpirun
    s.ddp = true;
    s.rank = dist::rank();
    s.world = dist::world_size();
    if (f.batch % s.world != 0) {
      throw std::invalid_argument("--batch " + std::to_string(f.batch) +
                                  " is the global batch: it must be divisible by the " +
                                  std::to_string(s.world) + " ranks");
    }
  }
  // ddp: rank 0 prints and writes the JSON; the others train silently
  std::ostream silent(nullptr); // no buffer: discards what it is given
  std::ostream &shown = s.rank == 0 ? out : silent;
  std::ostream &progress = s.rank == 0 ? err : silent;
  if (s.rank != 0) f.json.clear();
  std::ofstream jsonFile = openJsonOutput(f.json); // checked before the work starts
  ModelConfig c;
  c.batch = f.batch / s.world;
  c.seq = f.seq;
  c.layers = f.layers;
  c.seed = s.seed;
  TempCacheDir tmp("train"); // a fresh cache: every mode's first step is cold
  std::vector<TrainRow> rows;
  for (const std::string &mode : modeList) {
    progress << "train: " << s.model << " " << mode << ", " << s.steps << " steps ...\n";
    rows.push_back(trainOne(info, c, mode, s, progress));
  }
  printTrainTable(shown, s.model, c, s, rows);
  if (!f.json.empty()) {
    jsonFile << trainJson(s.model, c, s, info.countParameters(c), rows).dump(2) << "\n";
    closeOutput(jsonFile, "--json", f.json);
  }
  return kOk;
}

} // namespace rcjit::tools
