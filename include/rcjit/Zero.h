// ZeRO data parallelism over rcjit::dist: an optimizer whose state (stage 1), gradients
// (stage 2) and parameters (stage 3) are split over the ranks instead of repeated on each.
//
// Every rank runs the same model on its slice of the global batch (as with ddp). The model's
// parameters are grouped into units; each unit is flattened, padded to a multiple of the
// world size W and cut into W equal slices: rank r owns slice r of every unit, keeps the
// optimizer state (AdamW's m and v, SGD's momentum) for that slice only, and updates only
// that slice. Stages:
//  1. after backward() the full gradients are averaged over the ranks (all_reduce_gradients);
//     step() updates this rank's slice and all-gathers every unit's updated values into the
//     parameters. Units: buckets of about bucket_bytes in parameter order.
//  2. step() reduce-scatters each unit's gradients (this rank keeps the mean of its slice
//     only and drops the full gradients), updates its slice, all-gathers the parameters.
//  3. as 2, and the parameters themselves live only as slices between steps. Units: every
//     element of every nn::ModuleList in the model (a transformer block), plus one unit of
//     all the other parameters. A unit is all-gathered into the module's parameter members
//     when the module is called (the rest when the model itself is called); a block is
//     released (its memory freed) when the next block is called; in backward, each unit's
//     gradient is reduce-scattered (non-blocking) as soon as the unit's backward is done, the
//     unit is released, and the unit called before it is gathered again for its backward.
//     The model runs eagerly this way; compiled (rcjit::compile), stage 3 is graph passes
//     instead (the zero3 pass on a pass schedule, Passes.h), and compiling it without them is
//     an Error naming the parameter.
//
// Numerics: the update of each element is optim::AdamW's (or SGD's) on the averaged
// gradient, so a run on W ranks matches one process on the whole batch up to the rounding of
// the gradient sums. Unlike optim::AdamW, the step count is per unit, and a unit whose
// gradient is absent on every rank is skipped.
//
// Collectives: every rank must construct, call, step and zero_grad in the same order, as
// with every collective; shapes are checked across ranks and a mismatch is an rcjit::Error on
// every rank. Not thread-safe: one thread drives the model and the optimizer.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <rcjit/Optim.h>
#include <rcjit/Tensor.h>

namespace rcjit::nn {
class ModuleBase;
}

namespace rcjit::dist {

struct ZeroOptions {
  int stage = 1;                            // 1, 2 or 3
  int64_t bucket_bytes = int64_t{25} << 20; // stages 1 and 2: parameter bytes per unit
  /// Stage 3: while a block runs, the gather of the block expected next is already in flight
  /// (non-blocking): in forward the block after it in the previous forward's order, in
  /// backward the block before the one being gathered back. One more block in memory.
  bool prefetch = false;
  /// Clips the averaged gradient to this total L2 norm before each update (0: off), as
  /// clip_grad_norm_ would on one process: step() sums the squares of this rank's slices,
  /// all-reduces that one number and scales the slices (every unit's gradient must be in
  /// before any unit is updated). clip_grad_norm_ on the model's parameters is wrong here:
  /// before step() they hold this rank's unaveraged gradients (stages 1-2) or none (stage 3).
  double max_grad_norm = 0;
};

/// What the optimizer's collectives cost since construction (or reset_stats()).
struct ZeroStats {
  double waitSeconds = 0; // blocked on communication (shape checks, waits, blocking gathers)
  int64_t gatheredBytes = 0, reducedBytes = 0; // per rank: parameters gathered, gradients reduced
  int gathers = 0, reductions = 0;             // collectives started
};

/// Bytes of model state this rank holds now: parameters (full ones present plus this rank's
/// slices), gradients (full ones and slices), optimizer state.
struct ModelStateBytes {
  int64_t parameters = 0, gradients = 0, optimizer = 0;
  int64_t total() const { return parameters + gradients + optimizer; }
};

/// Trains `model`'s parameters (f32 CPU leaves that require grad) with AdamW or SGD,
/// sharded over the ranks. The constructor broadcasts rank 0's parameters to every rank
/// (every rank starts from the same weights) and, for stage 3, frees the parameters' memory
/// and hooks the model's module calls; `model` must outlive the optimizer, which unhooks it
/// on destruction. Throws rcjit::Error for an unsupported parameter or stage.
class ZeroOptimizer {
public:
  ZeroOptimizer(nn::ModuleBase &model, optim::AdamWOptions adamw, ZeroOptions options = {});
  ZeroOptimizer(nn::ModuleBase &model, optim::SGDOptions sgd, ZeroOptions options = {});
  ~ZeroOptimizer();
  ZeroOptimizer(const ZeroOptimizer &) = delete;
  ZeroOptimizer &operator=(const ZeroOptimizer &) = delete;

  /// Clears the gradients (full ones and slices) before the next backward.
  void zero_grad();
  /// Averages the gradients over the ranks and updates the parameters (see the stages above).
  /// A collective: every rank calls it.
  void step();
  /// Stage 3: gathers every parameter back into the model for good and unhooks it (for
  /// inference or saving); step() is an Error afterwards. Stages 1 and 2: nothing to do.
  void unshard();
  /// Every parameter's full value, in model.parameters() order (copies; a collective for
  /// stage 3).
  std::vector<Tensor> full_parameters();
  /// Sets every parameter's value, in model.parameters() order and full shapes (the inverse
  /// of full_parameters()): each rank keeps its slices, and the model's parameters where
  /// they are whole (stages 1 and 2; stage 3 after unshard()). Every rank passes the same
  /// values; not a collective. A count, shape or dtype that differs is an rcjit::Error before
  /// anything changes.
  void set_full_parameters(const std::vector<Tensor> &values);

  /// The optimizer's state whole, as optim::AdamW's (or SGD's) state_dict() over
  /// model.parameters() names it ("lr" and the other hyperparameters; per parameter i
  /// "state.i.exp_avg", "state.i.exp_avg_sq", "state.i.step" or "state.i.momentum_buffer"),
  /// each parameter's state gathered from the ranks' slices: a checkpoint of it resumes on
  /// any number of ranks, or in one process with optim's optimizer, and the reverse. A
  /// parameter's "step" is its unit's count. A collective: every rank calls it and gets the
  /// whole state (copies).
  NamedTensors state_dict();
  /// Restores a state_dict() of a ZeroOptimizer on any number of ranks or of optim::AdamW /
  /// SGD over model.parameters(), with the same options but the rate: every rank passes the
  /// whole state and keeps its slices. The parameters of one unit must have state alike (all
  /// or none, one step count). Checked before anything changes, as optim's load_state_dict;
  /// not a collective.
  void load_state_dict(const NamedTensors &state);

  /// The learning rate of the next step, and setting it (checked as optim's set_lr: finite,
  /// >= 0). Every rank sets the same rate (each updates its own slices with it). Not inside
  /// rcjit::compile, like step().
  double lr() const;
  void set_lr(double lr);
  /// The total norm of the averaged gradient at the last step() (before clipping), when
  /// max_grad_norm is set; else -1.
  double last_grad_norm() const;

  int stage() const;
  /// How many units the parameters were grouped into.
  int units() const;
  const ZeroStats &stats() const;
  void reset_stats();
  /// What this rank holds now (see ModelStateBytes).
  ModelStateBytes model_state_bytes() const;

  struct Impl;

private:
  // checks the file, the state and the values on every rank before any rank changes anything
  friend std::map<std::string, std::string>
  load_checkpoint(const std::string &path, nn::ModuleBase &model, ZeroOptimizer &optimizer);
  std::unique_ptr<Impl> impl_;
};

/// A checkpoint of `model` trained with `optimizer` in rcjit::save_checkpoint's format
/// (rcjit/Checkpoint.h): every parameter and the optimizer's state whole, so it resumes on
/// any number of ranks, or in one process with optim's optimizer. A collective: every rank
/// calls it (the gathers); rank 0 writes, and a failure to write is an rcjit::Error on every
/// rank.
void save_checkpoint(const std::string &path, nn::ModuleBase &model, ZeroOptimizer &optimizer,
                     const std::map<std::string, std::string> &metadata = {});
/// Restores a checkpoint of rcjit::save_checkpoint or of the one above into `model` and
/// `optimizer` (set_full_parameters, load_state_dict) and returns its metadata. Every rank
/// reads the file (a path every rank can read); a collective: when any rank cannot read or
/// use it, every rank throws rcjit::Error and none has changed anything.
std::map<std::string, std::string> load_checkpoint(const std::string &path, nn::ModuleBase &model,
                                                   ZeroOptimizer &optimizer);

} // namespace rcjit::dist
