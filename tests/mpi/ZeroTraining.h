// The mpi tests' training run: 20 steps of the 2-layer gpt2 on this rank's slice of the
// shared global batches (TrainingBatches.h), with one process's optimizer, ddp's gradient
// average or dist::ZeroOptimizer, compiled in any mode and with any pass schedule, or part
// of those steps from and to a checkpoint; what the tests compare against one process.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <rcjit/rcjit.h>

#include "models/ModelGpt2.h"
#include "tests/mpi/TrainingBatches.h"

namespace rcjit::test {

struct ZeroTrainOptions {
  int stage = -1;    // -1: one process on the whole batch; 0: ddp; 1-3: ZeroOptimizer's stage
  bool adamw = true; // else SGD with momentum
  Mode mode = Mode::eager;
  bool prefetch = false;                   // ZeroOptions::prefetch (the eager stage 3's)
  int64_t bucketBytes = int64_t{64} << 10; // ddp's buckets, stages 1-2's units: several in flight
  std::vector<ScheduleStep> schedule;      // CompileOptions::schedule (the ZeRO passes)
  int64_t memoryBudget = 0;                // CompileOptions::memory_budget
  int halveLrAt = -1;                      // from this step on, set_lr(lr / 2)
  double maxGradNorm = 0; // ZeroOptions::max_grad_norm; clip_grad_norm_ without ZeRO
  int firstStep = 0, endStep = kMpiSteps; // the steps trained: [firstStep, endStep)
  std::string resumeFrom; // a checkpoint loaded before the first step (load_checkpoint)
  std::string saveTo;     // a checkpoint written after the last step (rank 0 writes)
};

struct ZeroTrainRun {
  std::vector<double> losses;   // per step, the mean over the ranks
  std::vector<double> gradNorms; // per step, with maxGradNorm: the norm before clipping
  std::vector<Tensor> params;   // final values, model.parameters() order
  int64_t stateBytes = 0;       // memory_stats: held after the last step, less what was before
  int64_t peakBytes = 0;        // memory_stats: the peak of the steps after the first
  dist::ModelStateBytes ledger; // the optimizer's own count (ZeRO runs)
  int units = 0;
  int gathers = 0;    // all-gathers the optimizer itself started (not the compiled code)
  int reductions = 0; // reductions the optimizer itself started (not the compiled code)
  CompileStats stats;
  std::string explain;
};

inline ZeroTrainRun zeroTrain(const ZeroTrainOptions &o) {
  const bool distributed = o.stage >= 0;
  const int world = distributed ? dist::world_size() : 1, rank = distributed ? dist::rank() : 0;
  tools::ModelConfig c;
  c.batch = kMpiGlobalBatch / world;
  c.seq = kMpiSeq;
  c.seed = rank == 0 ? 0 : 1000 + static_cast<uint64_t>(rank);
  const int64_t before = memory_stats().current_bytes;
  std::unique_ptr<tools::Model> m = tools::buildGpt2(tools::Gpt2Config{}, c);
  ZeroTrainRun out;
  const optim::AdamWOptions ao{.lr = 3e-3};
  const optim::SGDOptions so{.lr = 0.1, .momentum = 0.9};
  std::unique_ptr<optim::Optimizer> opt; // without ZeRO
  std::optional<dist::ZeroOptimizer> zero;
  if (o.stage >= 1) {
    const dist::ZeroOptions zo{.stage = o.stage,
                               .bucket_bytes = o.bucketBytes,
                               .prefetch = o.prefetch,
                               .max_grad_norm = o.maxGradNorm};
    o.adamw ? zero.emplace(m->module(), ao, zo) : zero.emplace(m->module(), so, zo);
    out.units = zero->units();
  } else {
    std::vector<Tensor> params = m->module().parameters();
    if (o.stage == 0) dist::broadcast_parameters(params);
    opt = o.adamw ? std::unique_ptr<optim::Optimizer>(std::make_unique<optim::AdamW>(params, ao))
                  : std::make_unique<optim::SGD>(params, so);
  }
  auto loss = compile(
      [&](const std::vector<Tensor> &in) { return cross_entropy(m->forward({in[0]}), in[1]); },
      CompileOptions{.mode = o.mode, .schedule = o.schedule, .memory_budget = o.memoryBudget});
  if (!o.resumeFrom.empty()) {
    zero ? dist::load_checkpoint(o.resumeFrom, m->module(), *zero)
         : load_checkpoint(o.resumeFrom, m->module(), *opt);
  }
  for (int step = o.firstStep; step < o.endStep; ++step) {
    auto [ids, next] = mpiGlobalBatch(step);
    const int64_t rows = kMpiGlobalBatch / world;
    ids = slice(ids, 0, rank * rows, (rank + 1) * rows).contiguous();
    next = slice(next, 0, rank * rows, (rank + 1) * rows).contiguous();
    if (step == o.firstStep + 1) reset_peak_memory_stats();
    if (step == o.halveLrAt) {
      const double lr = (o.adamw ? ao.lr : so.lr) / 2;
      zero ? zero->set_lr(lr) : opt->set_lr(lr);
    }
    zero ? zero->zero_grad() : opt->zero_grad();
    Tensor l = loss(std::vector<Tensor>{ids, next});
    l.backward();
    if (zero) {
      zero->step();
      if (o.maxGradNorm > 0) out.gradNorms.push_back(zero->last_grad_norm());
    } else {
      if (o.stage == 0) dist::all_reduce_gradients(m->module().parameters(), o.bucketBytes);
      if (o.maxGradNorm > 0)
        out.gradNorms.push_back(clip_grad_norm_(m->module().parameters(), o.maxGradNorm));
      opt->step();
    }
    Tensor mean = Tensor::full({}, l.item(), DType::f64);
    if (distributed) dist::all_reduce(mean, dist::ReduceOp::mean);
    out.losses.push_back(mean.item());
  }
  if (!o.saveTo.empty() && zero) {
    dist::save_checkpoint(o.saveTo, m->module(), *zero); // a collective: rank 0 writes
  } else if (!o.saveTo.empty()) { // every rank holds the same state: rank 0 writes
    if (rank == 0) save_checkpoint(o.saveTo, m->module(), *opt);
    dist::barrier();
  }
  out.peakBytes = memory_stats().peak_bytes - before;
  out.stateBytes = memory_stats().current_bytes - before;
  out.stats = loss.stats();
  out.explain = loss.explain();
  if (zero) {
    out.ledger = zero->model_state_bytes();
    out.gathers = zero->stats().gathers;
    out.reductions = zero->stats().reductions;
  }
  out.params = zero ? zero->full_parameters() : m->module().parameters();
  return out;
}

} // namespace rcjit::test
