// Built-in models' checkpoints: loading a safetensors file into a module's parameters by
// name (Hugging Face's names, transposed weights, ignored buffers) and saving them.
#include "models/Safetensors.h"

#include <algorithm>

#include "support/Regex.h"

namespace rcjit::tools {

WeightNaming WeightNaming::exact() { return {}; }

WeightNaming WeightNaming::llama() {
  return {"", {}, {"lm_head\\.weight", ".*\\.rotary_emb\\.inv_freq"}};
}

WeightNaming WeightNaming::gpt2() {
  return {"transformer.",
          {".*\\.(c_attn|c_proj|c_fc|q_attn)\\.weight"},
          {"lm_head\\.weight", "(.*\\.)?(attn|crossattention)\\.(masked_)?bias"}};
}

WeightNaming WeightNaming::vitGpt2() {
  return {"",
          {".*\\.(c_attn|c_proj|c_fc|q_attn)\\.weight"},
          {"decoder\\.lm_head\\.weight", ".*\\.(attn|crossattention)\\.(masked_)?bias",
           "encoder\\.pooler\\..*"}};
}

WeightNaming WeightNaming::forModel(const std::string &model) {
  if (model.rfind("llama", 0) == 0) return llama();
  if (model.rfind("vit-gpt2", 0) == 0) return vitGpt2();
  if (model.rfind("gpt2", 0) == 0) return gpt2();
  return exact();
}

namespace {

// Every parameter slot of m and its descendants, by dotted name, in registration order.
void collectSlots(nn::ModuleBase &m, const std::string &prefix,
                  std::vector<std::pair<std::string, Tensor *>> &out) {
  for (const auto &[name, t] : m.own_parameters()) out.emplace_back(prefix + name, t);
  for (const auto &[name, child] : m.children()) collectSlots(*child, prefix + name + ".", out);
}

bool matchesAny(const std::vector<std::regex> &patterns, const std::string &name) {
  return std::any_of(patterns.begin(), patterns.end(),
                     [&](const std::regex &r) { return std::regex_match(name, r); });
}

std::vector<std::regex> compile(const std::vector<std::string> &patterns) {
  return {patterns.begin(), patterns.end()};
}

// One planned copy: file tensor -> parameter slot.
struct Assignment {
  const SafetensorsReader *reader;
  std::string fileName;
  std::string paramName;
  Tensor *slot;
  bool transposed;
};

void checkAssignment(const SafetensorsReader &r, const SafetensorsEntry &e, const Assignment &a) {
  Shape want = a.slot->shape();
  if (a.transposed) std::reverse(want.begin(), want.end());
  if (e.shape != want) {
    failSafetensors(r.path(),
                    "tensor '" + e.name + "': shape " + shapeStr(e.shape) + " does not match " +
                        "parameter '" + a.paramName + "' " + shapeStr(a.slot->shape()) +
                        (a.transposed ? " (stored transposed, so expected " + shapeStr(want) + ")"
                                      : std::string()));
  }
  DType to = a.slot->dtype();
  bool ok = isFloating(e.dtype) ? isFloating(to)
                                : e.dtype == to || (isIntegral(e.dtype) && isIntegral(to));
  if (!ok) {
    failSafetensors(r.path(), "tensor '" + e.name + "': dtype " + std::string(dtypeName(e.dtype)) +
                                  " cannot be converted to parameter '" + a.paramName +
                                  "' of dtype " + std::string(dtypeName(to)));
  }
}

} // namespace

LoadReport loadWeights(nn::ModuleBase &m, const std::vector<std::string> &paths,
                       const WeightNaming &naming, bool strict) {
  std::vector<SafetensorsReader> readers(paths.begin(), paths.end());
  std::vector<std::pair<std::string, Tensor *>> ordered;
  collectSlots(m, "", ordered);
  std::map<std::string, Tensor *> slots(ordered.begin(), ordered.end());
  std::vector<std::regex> transposed = compile(naming.transposed);
  std::vector<std::regex> ignored = compile(naming.ignored);
  LoadReport report;
  std::vector<Assignment> plan;
  std::map<std::string, bool> assigned;
  for (const SafetensorsReader &reader : readers) {
    for (const SafetensorsEntry &e : reader.entries()) {
      std::string name = slots.count(e.name) ? e.name : naming.modulePrefix + e.name;
      auto it = slots.find(name);
      if (it == slots.end() || assigned[name]) {
        (matchesAny(ignored, e.name) ? report.ignored : report.unexpected).push_back(e.name);
        continue;
      }
      assigned[name] = true;
      plan.push_back({&reader, e.name, name, it->second, matchesAny(transposed, name)});
      checkAssignment(reader, e, plan.back());
    }
  }
  for (const auto &[name, slot] : ordered) {
    if (!assigned[name]) report.missing.push_back(name);
  }
  if (strict && (!report.missing.empty() || !report.unexpected.empty())) {
    failSafetensors(listNames(paths), "does not match the model: missing parameters [" +
                                          listNames(report.missing) + "], unexpected tensors [" +
                                          listNames(report.unexpected) + "]");
  }
  for (const Assignment &a : plan) {
    Tensor t = a.reader->read(a.fileName);
    a.slot->copy_(a.transposed ? transpose(t, 0, 1) : t);
    report.loaded.push_back(a.fileName);
  }
  return report;
}

LoadReport loadWeights(nn::ModuleBase &m, const std::string &path, const WeightNaming &naming,
                       bool strict) {
  return loadWeights(m, std::vector<std::string>{path}, naming, strict);
}

void saveWeights(nn::ModuleBase &m, const std::string &path, const WeightNaming &naming) {
  std::vector<std::regex> transposed = compile(naming.transposed);
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (auto &[name, t] : m.named_parameters()) {
    tensors.emplace_back(name, matchesAny(transposed, name) ? transpose(t, 0, 1) : t);
  }
  writeSafetensors(path, tensors);
}

} // namespace rcjit::tools
