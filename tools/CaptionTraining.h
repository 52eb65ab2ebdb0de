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
  int steps = 40;       // training steps per strategy
  int warmupSteps = 20; // the warm-up figure: time of the first steps, compiles included
  int64_t batch = 8;
  double lr = 1e-3;
  uint64_t seed = 0;
  std::string json; // also write every figure there ("" = none)
};

/// The strategies' names, in the order they run.
const std::vector<std::string> &captionStrategies();

/// Runs every strategy of `s` on the same batches from the same initial weights and prints
/// the table (steps/s after warm-up, warm-up time, compiles, recompiles, fallbacks, first
/// and last loss, difference from eager's loss). Progress on `err`. Throws rcjit::Error.
void captionTrain(const CaptionSettings &s, std::ostream &out, std::ostream &err);

} // namespace rcjit::tools
