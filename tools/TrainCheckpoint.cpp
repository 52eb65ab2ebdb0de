// `rcjit train --save / --resume`.
#include "tools/TrainCheckpoint.h"

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <stdexcept>

#include "tools/Cli.h"
#include "tracer/Safetensors.h"

namespace rcjit::tools::train {

namespace {

// `text` with every `field` replaced by `value`.
std::string replaced(std::string text, const std::string &field, const std::string &value) {
  for (size_t at = text.find(field); at != std::string::npos; at = text.find(field, at)) {
    text.replace(at, field.size(), value);
    at += value.size();
  }
  return text;
}

// The checkpoint file of `mode` after `steps` steps: --save with "{mode}" and "{step}"
// replaced.
std::string savePath(const Settings &s, const std::string &mode, int steps) {
  return replaced(replaced(s.saveTo, "{mode}", mode), "{step}", std::to_string(steps));
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

void checkCheckpointFlags(Settings &s, const std::vector<std::string> &modes, int scheduleSteps) {
  if (scheduleSteps < 0) {
    throw std::invalid_argument("--schedule-steps: " + std::to_string(scheduleSteps) +
                                " is not a number of steps");
  }
  if (!s.saveTo.empty() && modes.size() > 1 && s.saveTo.find("{mode}") == std::string::npos) {
    throw std::invalid_argument("--save " + s.saveTo + " with " + std::to_string(modes.size()) +
                                " modes: put {mode} in the name (each mode writes its own "
                                "checkpoint, e.g. --save run.{mode}.safetensors)");
  }
  if (s.saveEvery < 0 || (s.saveEvery > 0 && s.saveTo.empty())) {
    throw std::invalid_argument("--save-every " + std::to_string(s.saveEvery) +
                                ": a number of steps (1 or more) with --save FILE");
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
    const std::optional<int64_t> value = parseInteger(step);
    if (!value || *value < 0 || *value > (1 << 24)) {
      failSafetensors(s.resumeFrom, "its \"step\" metadata '" + step + "' is not a step count");
    }
    s.firstStep = static_cast<int>(*value);
  }
  s.scheduleSteps = scheduleSteps > 0 ? scheduleSteps : s.firstStep + s.steps;
}

void resumeMode(const Settings &s, nn::ModuleBase &model, optim::Optimizer *local,
                dist::ZeroOptimizer *zero) {
  if (s.resumeFrom.empty()) return;
  if (zero) {
    dist::load_checkpoint(s.resumeFrom, model, *zero);
  } else {
    load_checkpoint(s.resumeFrom, model, *local);
  }
  // the run's own rate (--lr, or its schedule's for each step), not the saved one
  if (s.scheduled()) return;
  if (zero) {
    zero->set_lr(s.lr);
  } else {
    local->set_lr(s.lr);
  }
}

void saveMode(const Settings &s, const std::string &mode, int stepsDone, nn::ModuleBase &model,
              const optim::Optimizer *local, dist::ZeroOptimizer *zero, std::ostream &progress) {
  const bool last = stepsDone == s.firstStep + s.steps;
  if (s.saveTo.empty() || !(last || (s.saveEvery > 0 && stepsDone % s.saveEvery == 0))) return;
  const std::string path = savePath(s, mode, stepsDone);
  const std::map<std::string, std::string> metadata = {{"model", s.model},
                                                       {"mode", mode},
                                                       {"optimizer", s.optimizer},
                                                       {"step", std::to_string(stepsDone)},
                                                       {"seed", std::to_string(s.seed)}};
  const auto t0 = std::chrono::steady_clock::now();
  if (zero) {
    dist::save_checkpoint(path, model, *zero, metadata);
  } else if (s.rank == 0) { // under ddp every rank holds the same parameters and state
    save_checkpoint(path, model, *local, metadata);
  }
  if (s.ddp && !zero) dist::barrier(); // no rank goes on before the file is whole
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::error_code ec;
  const auto bytes = s.rank == 0 ? std::filesystem::file_size(path, ec) : 0;
  char line[160];
  std::snprintf(line, sizeof line, " after step %d (%.1f MiB, %.2f s)\n", stepsDone,
                ec ? 0.0 : static_cast<double>(bytes) / (1 << 20), seconds);
  progress << "train: " << mode << ": checkpoint " << path << line << std::flush;
}

} // namespace rcjit::tools::train
