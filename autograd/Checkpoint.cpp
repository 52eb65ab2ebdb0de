// save_tensors / load_tensors and checkpoints of a module with its optimizer's state.
#include <rcjit/Checkpoint.h>

#include <set>

#include <rcjit/Autograd.h>

#include "tracer/Safetensors.h"
#include "tracer/Tracer.h"

namespace rcjit {

namespace {

constexpr const char *kFormatKey = "rcjit.checkpoint";
constexpr const char *kFormat = "1"; // this layout: "model.NAME", "optimizer.NAME"
constexpr const char *kOptimizerKey = "rcjit.optimizer"; // "1" when the state was saved

std::string listOf(const std::vector<std::string> &names) {
  std::string out;
  for (size_t i = 0; i < names.size() && i < 6; ++i) out += (i ? ", " : "") + names[i];
  if (names.size() > 6) out += ", ... (" + std::to_string(names.size()) + " in all)";
  return out;
}

void refuseInTrace(const char *who) {
  if (!Tracer::current()) return;
  throw Error(std::string(who) + " inside a compiled function: call it between the calls");
}

void checkMetadataKeys(const std::string &path, const std::map<std::string, std::string> &m) {
  for (const auto &[key, value] : m) {
    if (key.rfind("rcjit.", 0) == 0) {
      failSafetensors(path, "metadata key '" + key + "' is reserved (keys starting \"rcjit.\")");
    }
  }
}

void writeCheckpoint(const std::string &path, const nn::ModuleBase &model,
                     const optim::Optimizer *optimizer,
                     const std::map<std::string, std::string> &metadata) {
  refuseInTrace("save_checkpoint");
  checkMetadataKeys(path, metadata);
  NamedTensors all;
  for (auto &[name, t] : model.named_parameters()) all.emplace_back("model." + name, t);
  if (optimizer) {
    for (auto &[name, t] : optimizer->state_dict()) all.emplace_back("optimizer." + name, t);
  }
  std::map<std::string, std::string> meta = metadata;
  meta[kFormatKey] = kFormat;
  meta[kOptimizerKey] = optimizer ? "1" : "0";
  writeSafetensors(path, all, meta);
}

// Reads a checkpoint, checks its parameters against the model's (names, shapes, dtypes),
// then (with an optimizer) restores the optimizer's state, which checks it whole first, and
// copies the parameters in.
std::map<std::string, std::string> readCheckpoint(const std::string &path, nn::ModuleBase &model,
                                                  optim::Optimizer *optimizer) {
  refuseInTrace("load_checkpoint");
  SafetensorsReader reader(path);
  const std::map<std::string, std::string> &meta = reader.metadata();
  auto format = meta.find(kFormatKey);
  if (format == meta.end()) {
    failSafetensors(path, "not an rcjit checkpoint (no \"rcjit.checkpoint\" metadata; a file "
                          "of plain tensors reads with load_tensors)");
  }
  if (format->second != kFormat) {
    failSafetensors(path, "checkpoint format '" + format->second + "' is not this rcjit's ('" +
                              kFormat + "')");
  }
  const auto params = model.named_parameters();
  std::set<std::string> wanted, inFile;
  std::vector<std::string> missing, unexpected;
  for (const auto &[name, t] : params) {
    wanted.insert(name);
    const SafetensorsEntry *e = reader.find("model." + name);
    if (!e) {
      missing.push_back(name);
    } else if (e->shape != t.shape() || e->dtype != t.dtype()) {
      failSafetensors(path, "parameter '" + name + "' is " + std::string(dtypeName(e->dtype)) +
                                shapeStr(e->shape) + " in the file but " +
                                std::string(dtypeName(t.dtype())) + shapeStr(t.shape()) +
                                " in the model");
    }
  }
  NamedTensors state;
  for (const SafetensorsEntry &e : reader.entries()) {
    if (e.name.rfind("model.", 0) == 0) {
      if (!wanted.count(e.name.substr(6))) unexpected.push_back(e.name.substr(6));
    } else if (e.name.rfind("optimizer.", 0) == 0) {
      if (optimizer) state.emplace_back(e.name.substr(10), reader.read(e.name));
    } else {
      unexpected.push_back(e.name);
    }
  }
  if (!missing.empty() || !unexpected.empty()) {
    failSafetensors(path, "does not match the model: parameters not in the file [" +
                              listOf(missing) + "], tensors the model has no parameter for [" +
                              listOf(unexpected) + "]");
  }
  if (optimizer) {
    auto saved = meta.find(kOptimizerKey);
    if (saved == meta.end() || saved->second != "1") {
      failSafetensors(path, "holds no optimizer state (saved with save_checkpoint(path, "
                            "model)): load it with load_checkpoint(path, model)");
    }
    try {
      optimizer->load_state_dict(state);
    } catch (const Error &e) {
      failSafetensors(path, e.what());
    }
  }
  NoGradGuard noGrad;
  for (const auto &[name, t] : params) {
    Tensor p = t; // a handle on the module's parameter: copy_ writes its storage
    p.copy_(reader.read("model." + name).to(p.device()));
  }
  return meta;
}

} // namespace

void save_tensors(const std::string &path, const NamedTensors &tensors,
                  const std::map<std::string, std::string> &metadata) {
  writeSafetensors(path, tensors, metadata);
}

TensorFile load_tensors(const std::string &path) {
  SafetensorsReader reader(path);
  TensorFile f;
  f.metadata = reader.metadata();
  for (const SafetensorsEntry &e : reader.entries())
    f.tensors.emplace_back(e.name, reader.read(e.name));
  return f;
}

void save_checkpoint(const std::string &path, const nn::ModuleBase &model,
                     const optim::Optimizer &optimizer,
                     const std::map<std::string, std::string> &metadata) {
  writeCheckpoint(path, model, &optimizer, metadata);
}

void save_checkpoint(const std::string &path, const nn::ModuleBase &model,
                     const std::map<std::string, std::string> &metadata) {
  writeCheckpoint(path, model, nullptr, metadata);
}

std::map<std::string, std::string> load_checkpoint(const std::string &path, nn::ModuleBase &model,
                                                   optim::Optimizer &optimizer) {
  return readCheckpoint(path, model, &optimizer);
}

std::map<std::string, std::string> load_checkpoint(const std::string &path, nn::ModuleBase &model) {
  return readCheckpoint(path, model, nullptr);
}

} // namespace rcjit
