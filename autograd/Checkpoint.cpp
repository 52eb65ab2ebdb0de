// save_tensors / load_tensors and checkpoints of a module with its optimizer's state.
#include <rcjit/Checkpoint.h>

#include <set>

#include <rcjit/Autograd.h>

#include "autograd/CheckpointFile.h"
#include "tracer/Safetensors.h"
#include "tracer/Tracer.h"

namespace rcjit {

using detail::CheckpointRead;
using detail::ExpectedParameter;
using detail::readCheckpoint;
using detail::writeCheckpoint;

namespace {

constexpr const char *kFormatKey = "rcjit.checkpoint";
constexpr const char *kFormat = "1"; // this layout: "model.NAME", "optimizer.NAME"
constexpr const char *kOptimizerKey = "rcjit.optimizer"; // "1" when the state was saved

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

std::vector<ExpectedParameter> expectedOf(const nn::ModuleBase &model) {
  std::vector<ExpectedParameter> out;
  for (const auto &[name, t] : model.named_parameters())
    out.push_back({name, t.shape(), t.dtype()});
  return out;
}

void saveModel(const std::string &path, const nn::ModuleBase &model,
               const optim::Optimizer *optimizer,
               const std::map<std::string, std::string> &metadata) {
  refuseInTrace("save_checkpoint");
  if (!optimizer) return writeCheckpoint(path, model.named_parameters(), nullptr, metadata);
  const NamedTensors state = optimizer->state_dict();
  writeCheckpoint(path, model.named_parameters(), &state, metadata);
}

// Reads and checks the whole checkpoint, restores the optimizer's state (which checks it
// whole first), then copies the parameters in place.
std::map<std::string, std::string> loadModel(const std::string &path, nn::ModuleBase &model,
                                             optim::Optimizer *optimizer) {
  refuseInTrace("load_checkpoint");
  CheckpointRead read = readCheckpoint(path, expectedOf(model), optimizer != nullptr);
  if (optimizer) {
    try {
      optimizer->load_state_dict(read.state);
    } catch (const Error &e) {
      failSafetensors(path, e.what());
    }
  }
  NoGradGuard noGrad;
  const std::vector<Tensor> params = model.parameters();
  for (size_t i = 0; i < params.size(); ++i) {
    Tensor p = params[i]; // a handle on the module's parameter: copy_ writes its storage
    p.copy_(read.params[i].to(p.device()));
  }
  return read.metadata;
}

} // namespace

namespace detail {

void writeCheckpoint(const std::string &path, const NamedTensors &params, const NamedTensors *state,
                     const std::map<std::string, std::string> &metadata) {
  checkMetadataKeys(path, metadata);
  NamedTensors all;
  for (const auto &[name, t] : params) all.emplace_back("model." + name, t);
  if (state) {
    for (const auto &[name, t] : *state) all.emplace_back("optimizer." + name, t);
  }
  std::map<std::string, std::string> meta = metadata;
  meta[kFormatKey] = kFormat;
  meta[kOptimizerKey] = state ? "1" : "0";
  writeSafetensors(path, all, meta);
}

CheckpointRead readCheckpoint(const std::string &path,
                              const std::vector<ExpectedParameter> &expected, bool withState) {
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
  std::set<std::string> wanted;
  std::vector<std::string> missing, unexpected;
  for (const ExpectedParameter &p : expected) {
    wanted.insert(p.name);
    const SafetensorsEntry *e = reader.find("model." + p.name);
    if (!e) {
      missing.push_back(p.name);
    } else if (e->shape != p.shape || e->dtype != p.dtype) {
      failSafetensors(path, "parameter '" + p.name + "' is " + std::string(dtypeName(e->dtype)) +
                                shapeStr(e->shape) + " in the file but " +
                                std::string(dtypeName(p.dtype)) + shapeStr(p.shape) +
                                " in the model");
    }
  }
  CheckpointRead out;
  for (const SafetensorsEntry &e : reader.entries()) {
    if (e.name.rfind("model.", 0) == 0) {
      if (!wanted.count(e.name.substr(6))) unexpected.push_back(e.name.substr(6));
    } else if (e.name.rfind("optimizer.", 0) == 0) {
      if (withState) out.state.emplace_back(e.name.substr(10), reader.read(e.name));
    } else {
      unexpected.push_back(e.name);
    }
  }
  if (!missing.empty() || !unexpected.empty()) {
    failSafetensors(path, "does not match the model: parameters not in the file [" +
                              listNames(missing) + "], tensors the model has no parameter for [" +
                              listNames(unexpected) + "]");
  }
  auto saved = meta.find(kOptimizerKey);
  if (withState && (saved == meta.end() || saved->second != "1")) {
    failSafetensors(path, "holds no optimizer state (saved with save_checkpoint(path, "
                          "model)): load it with load_checkpoint(path, model)");
  }
  for (const ExpectedParameter &p : expected) out.params.push_back(reader.read("model." + p.name));
  out.metadata = meta;
  return out;
}

} // namespace detail

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
  saveModel(path, model, &optimizer, metadata);
}

void save_checkpoint(const std::string &path, const nn::ModuleBase &model,
                     const std::map<std::string, std::string> &metadata) {
  saveModel(path, model, nullptr, metadata);
}

std::map<std::string, std::string> load_checkpoint(const std::string &path, nn::ModuleBase &model,
                                                   optim::Optimizer &optimizer) {
  return loadModel(path, model, &optimizer);
}

std::map<std::string, std::string> load_checkpoint(const std::string &path, nn::ModuleBase &model) {
  return loadModel(path, model, nullptr);
}

} // namespace rcjit
