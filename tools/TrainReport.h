// `rcjit train`'s report: a run's settings and each mode's figures, printed as the columns of
// torch.compile's published training table and written as JSON.
#pragma once
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <rcjit/rcjit.h>

#include "models/Models.h"
#include "tools/BenchStats.h"

namespace rcjit::tools::train {

/// What one `rcjit train` run trains and how: its flags as checked, the device and the ranks.
/// A plain value, filled by the command before the first mode trains; read-only after.
struct Settings {
  std::string model, optimizer, weights;
  Device device = Device::cpu();   // --target cuda: the model, batches and compiled code on GPU 0
  std::string targetLabel = "cpu"; // or "cuda (<GPU name>)"
  int steps = 20, inferReps = 3;
  double lr = 0;
  uint64_t seed = 0;
  bool autocast = false; // --dtype bf16: the loss under Autocast(bf16), f32 parameters
  bool maxAutotune = false, reduceOverhead = false; // for every compiled mode
  bool ddp = false;                                 // --dist ddp or zero1/2/3
  int zeroStage = 0;                                // --dist zero1/2/3
  bool prefetch = false;                            // --prefetch (zero3)
  bool checkFinite = false;         // --check-finite: a NaN or infinite loss stops the run
  std::string schedule = "default"; // --schedule: the ZeRO passes for compiled modes, or none
  int rank = 0, world = 1;          // this process's rank and the number of ranks (ddp)
  int64_t bucketBytes = int64_t{25} << 20;
  double clipGradNorm = 0; // --clip-grad-norm: the gradients' total norm bound (0: none)
  int warmup = 0;          // --warmup: steps of linear warm-up of the rate
  bool cosine = false;     // --lr-schedule cosine: then a cosine decay over the remaining steps
  int scheduleSteps = 0;   // the steps the schedule spans (--schedule-steps; firstStep + steps)
  bool scheduled() const { return warmup > 0 || cosine; }
  std::string saveTo;     // --save: a checkpoint after each mode's last step ({mode}, {step})
  int saveEvery = 0;      // --save-every: also after every step count that is a multiple of it
  std::string resumeFrom; // --resume: every mode starts from this checkpoint
  int firstStep = 0;      // the step count the --resume checkpoint was saved after (else 0)
};

/// The learning rate of step i (0-based, counted from the start of training: a resumed run's
/// steps go on from the checkpoint's count) under s's schedule: s.lr * (i + 1) / warmup
/// during the warm-up; after it, s.lr (constant) or s.lr * (1 + cos(pi * p)) / 2 with p the
/// fraction of the remaining steps of s.scheduleSteps done (cosine).
double scheduledLr(const Settings &s, int i);
/// The same from a step-count tensor (f32 scalar) with tensor ops: what a compiled whole
/// step computes inside its graph and gives to set_lr(Tensor).
Tensor scheduledLr(const Settings &s, const Tensor &i);

/// One mode's figures: the columns of the table and the JSON record. A plain value, filled by
/// the mode's run.
struct TrainRow {
  std::string mode;
  double firstStepS = 0, firstPeakMiB = 0, stepMs = 0, inferMs = 0; // medians
  Spread stepSpread, inferSpread; // the steps after the first; the timed inference calls
  std::vector<double> inferMsAll;
  double laterPeakMiB = 0; // the peak over the steps after the first (the steady state)
  std::vector<double> stepMsAll, losses;
  std::vector<double> lrs;       // per step: the optimizer's rate after the step (lr())
  std::vector<double> gradNorms; // --clip-grad-norm: per step, the norm before clipping
  std::vector<double> commMsAll; // ddp: per step, blocked on the gradients' all_reduce
  double commMs = 0;             // median of commMsAll after the first step
  bool graphDdp = false;         // ddp in full / whole mode: compiled code averages the gradients
  double tokensPerS = 0;         // global batch * seq per median training step
  double stateMiB = 0;   // tensor memory held after the last step (params, grads, optimizer)
  double maxPeakMiB = 0; // dist: the largest laterPeakMiB over the ranks
  double packedMiB = 0;  // packed weight copies alive after the inference calls (not tensors)
  double tierWaitMs = 0; // after the initial step: the wait for the optimized tier (tiered)
  // the work pool's jobs in the steps after the initial one, and those run while its threads
  // were packed onto fewer CPUs (other tasks kept every CPU busy: a busy machine's times)
  int64_t poolJobs = 0, packedJobs = 0;
  CompileStats train, infer;
};

/// Prints the table of `rows` (the modes `model` trained at `c` under `s`) with each median's
/// spread, the compile counts and a note where a mode's last loss differs from eager's.
/// Writes only to `out`.
void printTrainTable(std::ostream &out, const std::string &model, const ModelConfig &c,
                     const Settings &s, const std::vector<TrainRow> &rows);

/// Every figure of the run, step times and losses included, as the --json record.
nlohmann::json trainJson(const std::string &model, const ModelConfig &c, const Settings &s,
                         int64_t parameters, const std::vector<TrainRow> &rows);

} // namespace rcjit::tools::train
