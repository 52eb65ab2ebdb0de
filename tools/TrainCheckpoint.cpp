// `rcjit train --save / --resume`.
#include "tools/TrainCheckpoint.h"

#include <stdexcept>

#include "tracer/Safetensors.h"

namespace rcjit::tools::train {

namespace {

// The checkpoint file of `mode`: --save with "{mode}" replaced by the mode's name.
std::string savePath(const Settings &s, const std::string &mode) {
  std::string path = s.saveTo;
  for (size_t at = path.find("{mode}"); at != std::string::npos; at = path.find("{mode}", at)) {
    path.replace(at, 6, mode);
    at += mode.size();
  }
  return path;
}

// A metadata value of the --resume checkpoint, or an Error naming the key.
const std::string &metadataOf(const SafetensorsReader &r, const std::string &key) {
  auto it = r.metadata().find(key);
  if (it == r.metadata().end()) {
    failSafetensors(r.path(), "not a checkpoint of `rcjit train --save` (no \"" + key +
                                  "\" metadata): --resume takes one");
  }
  return it->second;
}

} // namespace

void checkCheckpointFlags(Settings &s, const std::vector<std::string> &modes,
                          const std::string &distMode, int scheduleSteps) {
  if (scheduleSteps < 0) {
    throw std::invalid_argument("--schedule-steps: " + std::to_string(scheduleSteps) +
                                " is not a number of steps");
  }
  const bool checkpoints = !s.saveTo.empty() || !s.resumeFrom.empty();
  if (checkpoints && s.zeroStage > 0) {
    throw std::invalid_argument("--save / --resume with --dist " + distMode +
                                ": not built yet (the optimizer state is sharded over the ranks; "
                                "--dist ddp saves and resumes)");
  }
  if (!s.saveTo.empty() && modes.size() > 1 && s.saveTo.find("{mode}") == std::string::npos) {
    throw std::invalid_argument("--save " + s.saveTo + " with " + std::to_string(modes.size()) +
                                " modes: put {mode} in the name (each mode writes its own "
                                "checkpoint, e.g. --save run.{mode}.safetensors)");
  }
  if (!s.resumeFrom.empty() && !s.weights.empty()) {
    throw std::invalid_argument("--weights and --resume both give the starting parameters: "
                                "choose one");
  }
  if (!s.resumeFrom.empty()) {
    SafetensorsReader reader(s.resumeFrom); // the header: a bad file fails before any training
    if (metadataOf(reader, "model") != s.model) {
      failSafetensors(s.resumeFrom, "a checkpoint of model '" + metadataOf(reader, "model") +
                                        "', not of --model " + s.model);
    }
    const std::string &step = metadataOf(reader, "step");
    size_t used = 0;
    long value = -1;
    try {
      value = std::stol(step, &used);
    } catch (const std::exception &) {
      used = 0;
    }
    if (used != step.size() || value < 0 || value > (1 << 24)) {
      failSafetensors(s.resumeFrom, "its \"step\" metadata '" + step + "' is not a step count");
    }
    s.firstStep = static_cast<int>(value);
  }
  s.scheduleSteps = scheduleSteps > 0 ? scheduleSteps : s.firstStep + s.steps;
}

void resumeMode(const Settings &s, nn::ModuleBase &model, optim::Optimizer &optimizer) {
  if (s.resumeFrom.empty()) return;
  load_checkpoint(s.resumeFrom, model, optimizer);
  // the run's own rate (--lr, or its schedule's for each step), not the saved one
  if (!s.scheduled()) optimizer.set_lr(s.lr);
}

void saveMode(const Settings &s, const std::string &mode, const nn::ModuleBase &model,
              const optim::Optimizer &optimizer) {
  if (s.saveTo.empty()) return;
  if (s.rank == 0) { // under ddp every rank holds the same parameters and state
    save_checkpoint(savePath(s, mode), model, optimizer,
                    {{"model", s.model},
                     {"mode", mode},
                     {"optimizer", s.optimizer},
                     {"step", std::to_string(s.firstStep + s.steps)},
                     {"seed", std::to_string(s.seed)}});
  }
  if (s.ddp) dist::barrier(); // no rank goes on before the file is whole
}

} // namespace rcjit::tools::train
