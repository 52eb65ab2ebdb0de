// Finding the repeated layers of an exported model from the module scopes exporters record.
#include <algorithm>
#include <unordered_map>

#include "onnx/Program.h"

namespace rcjit::onnx::detail {

namespace {

bool isDigits(const std::string &s) {
  return !s.empty() && s.find_first_not_of("0123456789") == std::string::npos;
}

// "encoder.layer.0.attention" -> "encoder.layer.0": the path up to its first numeric
// segment (not the first segment), or "" when it has none.
std::string layerOfPath(const std::string &path) {
  size_t start = 0;
  bool first = true;
  while (start <= path.size()) {
    size_t dot = path.find('.', start);
    std::string seg =
        path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    if (!first && isDigits(seg))
      return path.substr(0, dot == std::string::npos ? path.size() : dot);
    first = false;
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  return "";
}

// Joins scope components into a dotted path; a component that already spells the whole
// path so far ("encoder.layer.0" after "encoder") replaces it.
std::string joinScopes(const std::vector<std::string> &parts) {
  std::string path;
  for (std::string s : parts) {
    while (!s.empty() && (s.front() == ' ' || s.front() == '\'' || s.front() == '"')) s.erase(0, 1);
    while (!s.empty() && (s.back() == ' ' || s.back() == '\'' || s.back() == '"')) s.pop_back();
    if (s.empty()) continue;
    if (!path.empty() && s.compare(0, path.size() + 1, path + ".") == 0)
      path = s;
    else
      path = path.empty() ? s : path + "." + s;
  }
  return path;
}

std::vector<std::string> split(const std::string &s, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    size_t at = s.find(sep, start);
    out.push_back(s.substr(start, at == std::string::npos ? std::string::npos : at - start));
    if (at == std::string::npos) return out;
    start = at + 1;
  }
}

// The layer of a node from the scopes its exporter recorded: the dynamo exporter's
// name_scopes / namespace metadata, else a TorchScript node name ("/encoder/layer.0/...").
// A node whose recorded scope is outside every layer ("transformer.ln_f") is in none, even
// when it reads a layer's parameter: exporters share identical initializers between modules
// (GPT-2's final LayerNorm reads "transformer.h.0.ln_1.weight" when the values are equal).
// Only a node with no recorded scope is placed by the parameters it reads, and only when it
// computes on something else too (an Identity of a weight aliases it for another module).
// `known`: the node's place comes from a recorded scope (it is not a gap to fill).
std::string scopeOfNode(const Node &n, const Program &p, bool &known) {
  bool scoped = false;
  known = true;
  for (const auto &[k, v] : n.d.metadata) {
    if (k == "pkg.torch.onnx.name_scopes") {
      std::string body = v;
      if (!body.empty() && body.front() == '[') body.erase(0, 1);
      if (!body.empty() && body.back() == ']') body.pop_back();
      std::string l = layerOfPath(joinScopes(split(body, ',')));
      if (!l.empty()) return l;
      scoped = true;
    }
  }
  for (const auto &[k, v] : n.d.metadata) {
    if (k == "namespace") { // "': Model/encoder: Encoder/encoder.layer.0: Layer/..."
      std::vector<std::string> parts;
      for (const std::string &part : split(v, '/')) parts.push_back(part.substr(0, part.find(':')));
      std::string l = layerOfPath(joinScopes(parts));
      if (!l.empty()) return l;
      scoped = true;
    }
  }
  if (!n.d.name.empty() && n.d.name.front() == '/') { // "/encoder/layer.0/attention/MatMul"
    std::vector<std::string> parts = split(n.d.name.substr(1), '/');
    parts.pop_back();
    std::string l = layerOfPath(joinScopes(parts));
    if (!l.empty()) return l;
    scoped = scoped || !parts.empty();
  }
  if (scoped) return "";
  known = false;
  auto initializer = [&](int v) {
    for (const auto &[id, t] : p.parameters) {
      if (id == v) return true;
    }
    for (const auto &[id, t] : p.constants) {
      if (id == v) return true;
    }
    return false;
  };
  if (std::all_of(n.in.begin(), n.in.end(), [&](int v) { return v < 0 || initializer(v); }))
    return "";
  for (int v : n.in) { // a parameter "encoder.layer.0.attention.self.query.weight"
    if (v < 0) continue;
    for (size_t i = 0; i < p.parameters.size(); ++i) {
      if (p.parameters[i].first == v) {
        std::string l = layerOfPath(p.parameterNames[i]);
        if (!l.empty()) return l;
      }
    }
  }
  return "";
}

} // namespace

std::vector<std::string> findLayers(const Program &p) {
  size_t n = p.nodes.size();
  std::vector<std::string> layer(n);
  std::vector<bool> known(n);
  for (size_t i = 0; i < n; ++i) {
    bool k = false;
    layer[i] = scopeOfNode(p.nodes[i], p, k);
    known[i] = k;
  }
  // a node without a scope between two nodes of one layer (a Constant, a shape helper)
  // belongs to it, so that the layer stays one region; a node recorded outside every layer
  // (the embeddings) is no gap
  std::string prev;
  for (size_t i = 0; i < n; ++i) {
    if (!layer[i].empty() || known[i]) {
      prev = layer[i];
      continue;
    }
    size_t j = i;
    while (j < n && layer[j].empty() && !known[j]) ++j;
    if (j < n && !prev.empty() && layer[j] == prev) {
      for (size_t k = i; k < j; ++k) layer[k] = prev;
    }
    i = j - 1;
  }
  return layer;
}

} // namespace rcjit::onnx::detail
