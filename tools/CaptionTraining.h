// The captioning training workflow of the torch.compile guide, at CPU sizes: a small
// vit-gpt2 trained with AdamW on synthetic images and variable-length captions under the
// dynamic-shape strategies the guide compares (rcjit train --model vit-gpt2 --strategy ...).
#pragma once
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

namespace rcjit::tools {

struct CaptionSettings {
  /// Any of: eager, pad-max, pad-longest, mark-dynamic, buckets, modular, regional, warm.
  std::vector<std::string> strategies;
  int steps = 60;       // training steps per strategy (rcjit train's default with --strategy)
  int warmupSteps = 20; // the warm-up figure: time of the first steps, compiles included
  int64_t batch = 8;
  double lr = 1e-3;
  uint64_t seed = 0;
  std::string json; // also write every figure there ("" = none)
};

/// The warm-up of a run of `steps` steps: the first 20, or the first half of a shorter run,
/// so that steps/s always measures the steps after it.
int captionWarmupSteps(int steps);

/// The strategies' names, in the order they run.
const std::vector<std::string> &captionStrategies();

/// Runs every strategy of `s` on the same batches from the same initial weights and prints
/// the table (steps/s after warm-up, warm-up time, compiles, recompiles, fallbacks, first
/// and last loss, difference from eager's loss). Progress on `err`. A run with no step after
/// its warm-up prints "too short" for steps/s (null in the JSON), never 0. A loss that is
/// NaN or infinite is said once per strategy on `err`. Throws rcjit::Error.
void captionTrain(const CaptionSettings &s, std::ostream &out, std::ostream &err);

} // namespace rcjit::tools
