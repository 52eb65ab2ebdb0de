// `rcjit train --save FILE / --resume FILE`: a mode's run written as a checkpoint after its
// last step (rcjit::save_checkpoint: parameters, optimizer state, the step count) and runs
// that go on from one, so that training N steps, saving, and resuming for M more trains as N + M
// steps in one run do.
#pragma once
#include <ostream>
#include <string>
#include <vector>

#include <rcjit/rcjit.h>

#include "tools/TrainReport.h"

namespace rcjit::tools::train {

/// Checks --save, --save-every and --resume against the run's modes, reads the --resume
/// checkpoint's step count into s.firstStep (its header alone) and sets s.scheduleSteps
/// (`scheduleSteps`, or 0: firstStep + steps). Throws std::invalid_argument or rcjit::Error.
void checkCheckpointFlags(Settings &s, const std::vector<std::string> &modes, int scheduleSteps);
/// --resume: restores the model's parameters and the optimizer's state (`local`, or ZeRO's:
/// one of them is null), and the run's rate.
void resumeMode(const Settings &s, nn::ModuleBase &model, optim::Optimizer *local,
                dist::ZeroOptimizer *zero);
/// --save: after the step that brings the count of steps trained to `stepsDone`, the mode's
/// checkpoint when that was its last step or a multiple of --save-every (rank 0 writes it),
/// said on `progress` with its size and time.
void saveMode(const Settings &s, const std::string &mode, int stepsDone, nn::ModuleBase &model,
              const optim::Optimizer *local, dist::ZeroOptimizer *zero, std::ostream &progress);

} // namespace rcjit::tools::train
