// rcjit::onnx::Model: parameters registered under the file's names, and the interpreter
// that runs the graph node by node through rcjit's ops (one region per layer run).
#include <algorithm>
#include <optional>

#include <rcjit/Compile.h>
#include <rcjit/Onnx.h>
#include <rcjit/Region.h>

#include "onnx/Program.h"
#include "tracer/Tracer.h"

namespace rcjit::onnx {

namespace {

// A plain module standing for one level of a dotted parameter path.
class Scope : public nn::ModuleBase {};

bool validPath(const std::string &name) {
  if (name.empty() || name.front() == '.' || name.back() == '.') return false;
  return name.find("..") == std::string::npos;
}

void runNode(const detail::Node &n, std::vector<Value> &env, std::vector<int> *made = nullptr);

// The traced form of a host value computed from a traced tensor's sizes (Shape, and the
// shape arithmetic on it), made when a traced op first computes with it: its producer runs
// again as traced ops with Shape and Size giving traced sizes (sums of ones, which follow
// symbolic sizes). Without it the traced op would capture a host tensor made at this size
// (the TorchScript exporter's Where(Equal(shape, -1), ones, shape) before an Expand), which
// pins the sizes under dynamic shapes. Values no traced op computes with stay host-only.
// The traced forms are made again at each use and not kept: kept, one made inside a layer's
// region would become an input of the next layer's (which then differs from the first's).
// `made`: inside another value's traced form, whose list this one's join (dropped with it).
Tensor tracedOf(const Value &v, std::vector<Value> &env, std::vector<int> *made) {
  if (v.t.defined() || !v.producer) return v.t.defined() ? v.t : v.c;
  if (made) {
    runNode(*v.producer, env, made);
    return v.t;
  }
  std::vector<int> mine;
  runNode(*v.producer, env, &mine);
  Tensor out = v.t;
  for (int id : mine) env[id].t = Tensor();
  return out;
}

// Runs node n on `env`: a host pass where every input is known on the host, a traced pass
// where an input is traced (or the op makes sizes). With `made`: only the traced pass, with
// size-derived host inputs made traced (tracedOf), the values it gives a traced form listed.
void runNode(const detail::Node &n, std::vector<Value> &env, std::vector<int> *made) {
  std::vector<const Value *> ins;
  bool allConst = true, anyTraced = false, sizeDerived = false;
  for (int v : n.in) {
    ins.push_back(v < 0 ? nullptr : &env[v]);
    if (v < 0) continue;
    allConst = allConst && env[v].c.defined();
    anyTraced = anyTraced || env[v].t.defined();
    sizeDerived = sizeDerived || env[v].producer;
  }
  auto store = [&](std::vector<Tensor> outs, bool host) {
    for (size_t i = 0; i < n.out.size(); ++i) {
      if (n.out[i] < 0) continue;
      if (i >= outs.size() || !outs[i].defined()) {
        OpContext{n, {}, false}.fail("output " + std::to_string(i) + " is not produced");
      }
      (host ? env[n.out[i]].c : env[n.out[i]].t) = outs[i];
      if (!host && made) made->push_back(n.out[i]);
    }
  };
  // a traced pass; under a trace its size-derived host inputs are made traced first
  auto traced = [&](bool sizes) {
    OpContext ctx{n, ins, false};
    ctx.tracedSizes = sizes;
    if (Tracer::current())
      ctx.traced = [&env, made](const Value &v) { return tracedOf(v, env, made); };
    store(n.op->fn(ctx), false);
    return ctx;
  };
  if (made) {
    traced(true);
    return;
  }
  auto markSizeDerived = [&](bool derived) {
    for (int o : n.out) {
      if (o >= 0 && derived && !env[o].t.defined()) env[o].producer = &n;
    }
  };
  if (n.op->readsSizes) { // the sizes of a traced tensor are host values while tracing
    TracerPause pause;
    OpContext ctx{n, ins, false};
    store(n.op->fn(ctx), true);
    markSizeDerived(anyTraced || sizeDerived); // a host value's size may follow sizes too
    return;
  }
  if (allConst) {
    TracerPause pause;
    OpContext ctx{n, ins, true};
    store(n.op->fn(ctx), true);
  }
  if (!allConst || anyTraced || n.op->makesSizes) {
    OpContext ctx = traced(false);
    if (n.d.opType == "Concat" && n.d.domain.empty() && !n.out.empty() && n.out[0] >= 0) {
      Value &v = env[n.out[0]];
      for (size_t i = 0; i < ins.size(); ++i) v.catParts.push_back(ctx.in(i));
      v.catAxis = ctx.axis(ctx.attrInt("axis", 0), v.t.dim());
    }
  }
  markSizeDerived(allConst && sizeDerived);
}

} // namespace

Model::Model(std::shared_ptr<detail::Program> program) : program_(std::move(program)) {
  for (size_t i = 0; i < program_->parameters.size(); ++i) {
    const auto &[id, value] = program_->parameters[i];
    std::string name = program_->parameterNames[i];
    params_.push_back(std::make_unique<Tensor>(value));
    Tensor &slot = *params_.back();
    slots_.emplace_back(id, &slot);
    // "a.b.c" -> parameter "c" of child "a" -> "b"; a name that cannot be a path, or that
    // collides, is registered with its dots spelled '_' at the root
    size_t dot = name.rfind('.');
    bool registered = false;
    if (dot != std::string::npos && validPath(name)) {
      try {
        scopeFor(name.substr(0, dot)).register_parameter(name.substr(dot + 1), slot);
        registered = true;
      } catch (const Error &) {
      }
    }
    if (!registered) {
      std::replace(name.begin(), name.end(), '.', '_');
      if (name.empty()) name = "_";
      register_parameter(name, slot);
    }
  }
}

Model::~Model() = default;

nn::ModuleBase &Model::scopeFor(const std::string &path) {
  auto it = scopes_.find(path);
  if (it != scopes_.end()) return *it->second;
  size_t dot = path.rfind('.');
  nn::ModuleBase &parent = dot == std::string::npos ? *this : scopeFor(path.substr(0, dot));
  auto scope = std::make_unique<Scope>();
  parent.register_module(dot == std::string::npos ? path : path.substr(dot + 1), *scope);
  return *scopes_.emplace(path, std::move(scope)).first->second;
}

std::vector<Tensor> Model::operator()(const std::vector<Tensor> &inputs) const {
  const detail::Program &p = *program_;
  if (inputs.size() != p.inputIds.size()) {
    throw Error("onnx: " + p.what + ": the model takes " + std::to_string(p.inputIds.size()) +
                " inputs, got " + std::to_string(inputs.size()));
  }
  std::vector<Value> env(p.valueNames.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    const ValueInfo &info = p.inputInfo[i];
    const Tensor &x = inputs[i];
    std::string where = "onnx: " + p.what + ": input '" + info.name + "'";
    if (!x.defined()) throw Error(where + " is an undefined Tensor");
    if (info.elemType && x.dtype() != dtypeFromOnnx(info.elemType, where)) {
      throw Error(where + " must be " + onnxTypeName(info.elemType) + ", got " +
                  std::string(dtypeName(x.dtype())));
    }
    if (info.hasShape) {
      bool ok = static_cast<size_t>(x.dim()) == info.dims.size();
      for (size_t d = 0; ok && d < info.dims.size(); ++d) {
        ok = info.dims[d] < 0 || info.dims[d] == x.size(static_cast<int>(d));
      }
      if (!ok) {
        throw Error(where + " has shape " + shapeStr(x.shape()) + ", the model declares " +
                    shapeStr(info.dims) + " (-1: any size)");
      }
    }
    env[p.inputIds[i]].t = x;
  }
  for (const auto &[id, slot] : slots_) env[id].t = *slot;
  for (const auto &[id, value] : p.constants) {
    env[id].c = value;
    // a buffer (BERT's position_ids [1, 64]) is also a traced input, so that a slice of
    // it by a symbolic size stays a traced view instead of a size-dependent constant
    if (value.dim() >= 2 || value.numel() > 16) env[id].t = value;
  }
  size_t i = 0;
  while (i < p.nodes.size()) {
    int layer = p.nodes[i].layer;
    size_t j = i + 1;
    while (layer >= 0 && j < p.nodes.size() && p.nodes[j].layer == layer) ++j;
    if (layer < 0) {
      runNode(p.nodes[i], env);
    } else {
      region(p.layers[layer], [&] {
        for (size_t k = i; k < j; ++k) runNode(p.nodes[k], env);
        int last = p.nodes[j - 1].out.empty() ? -1 : p.nodes[j - 1].out[0];
        return last < 0 ? Tensor() : env[last].t;
      });
    }
    i = j;
  }
  std::vector<Tensor> out;
  for (int id : p.outputIds) out.push_back(env[id].t.defined() ? env[id].t : env[id].c);
  return out;
}

const std::vector<std::string> &Model::input_names() const { return program_->inputNames; }
const std::vector<std::string> &Model::output_names() const { return program_->outputNames; }
std::vector<std::string> Model::layers() const { return program_->layers; }
int64_t Model::opset() const { return program_->opset; }
std::string Model::producer() const { return program_->producer; }

std::vector<int64_t> Model::input_shape(size_t i) const { return program_->inputInfo.at(i).dims; }

DType Model::input_dtype(size_t i) const {
  const ValueInfo &info = program_->inputInfo.at(i);
  if (!info.elemType) return DType::f32;
  return dtypeFromOnnx(info.elemType, "onnx: " + program_->what + ": input '" + info.name + "'");
}

std::vector<std::string> Model::input_dim_params(size_t i) const {
  return program_->inputInfo.at(i).dimParams;
}

void Model::mark_dynamic_inputs(std::vector<Tensor> &inputs) const {
  for (size_t i = 0; i < inputs.size() && i < program_->inputInfo.size(); ++i) {
    const ValueInfo &info = program_->inputInfo[i];
    for (size_t d = 0; d < info.dimParams.size(); ++d) {
      if (!info.dimParams[d].empty() && static_cast<int>(d) < inputs[i].dim()) {
        mark_dynamic(inputs[i], static_cast<int>(d));
      }
    }
  }
}

// ---- OpContext -------------------------------------------------------------------------

Tensor OpContext::in(size_t i) const {
  if (!has(i)) fail("input " + std::to_string(i) + " is missing");
  const Value &v = *ins[i];
  if (hostPass) return v.c;
  if (!v.t.defined() && v.producer && traced) return traced(v);
  return v.t.defined() ? v.t : v.c;
}

std::vector<int64_t> OpContext::ints(size_t i) const {
  if (!has(i)) fail("input " + std::to_string(i) + " is missing");
  const Value &v = *ins[i];
  Tensor x = v.c.defined() ? v.c : v.t;
  // a host value (from sizes and constants) is read with the tracer paused: it may have
  // been captured by a traced op already, and reading it is no graph break
  std::optional<TracerPause> pause;
  if (v.c.defined()) pause.emplace();
  if (!isIntegral(x.dtype()) && x.dtype() != DType::boolean) {
    fail("input " + std::to_string(i) + " must be integer, got " +
         std::string(dtypeName(x.dtype())));
  }
  return x.to_vector<int64_t>();
}

double OpContext::scalar(size_t i) const {
  if (!has(i)) fail("input " + std::to_string(i) + " is missing");
  const Value &v = *ins[i];
  Tensor x = v.c.defined() ? v.c : v.t;
  std::optional<TracerPause> pause;
  if (v.c.defined()) pause.emplace();
  if (x.numel() != 1) fail("input " + std::to_string(i) + " must hold one value");
  return x.item();
}

bool OpContext::knownNonNegative(size_t i) const {
  if (!has(i) || !ins[i]->c.defined()) return false;
  const Tensor &c = ins[i]->c;
  if (!isIntegral(c.dtype()) || c.numel() > (1 << 20)) return false;
  TracerPause pause;
  for (int64_t v : c.to_vector<int64_t>()) {
    if (v < 0) return false;
  }
  return true;
}

bool OpContext::isScalarConst(size_t i) const {
  // a size-derived value under a trace is no constant: in() gives its traced form
  return has(i) && ins[i]->c.defined() && !ins[i]->t.defined() && ins[i]->c.numel() == 1 &&
         !(ins[i]->producer && traced);
}

const Attribute *OpContext::attr(const std::string &name) const {
  for (const Attribute &a : node.d.attributes) {
    if (a.name == name) return &a;
  }
  return nullptr;
}

int64_t OpContext::attrInt(const std::string &name, int64_t def) const {
  const Attribute *a = attr(name);
  return a ? a->i : def;
}

double OpContext::attrFloat(const std::string &name, double def) const {
  const Attribute *a = attr(name);
  return a ? a->f : def;
}

std::string OpContext::attrString(const std::string &name, const std::string &def) const {
  const Attribute *a = attr(name);
  return a ? a->s : def;
}

std::vector<int64_t> OpContext::attrInts(const std::string &name) const {
  const Attribute *a = attr(name);
  return a ? a->ints : std::vector<int64_t>{};
}

Tensor OpContext::attrTensor(const std::string &name) const {
  for (size_t i = 0; i < node.d.attributes.size(); ++i) {
    if (node.d.attributes[i].name == name) return node.attrTensors.at(i);
  }
  return Tensor();
}

void OpContext::fail(const std::string &why) const {
  throw Error("onnx: node '" + (node.d.name.empty() ? std::string("?") : node.d.name) + "' (" +
              node.d.opType + ", opset " + std::to_string(node.opset) + "): " + why);
}

int64_t OpContext::axis(int64_t a, int64_t rank) const {
  if (a < -rank || a >= std::max<int64_t>(rank, 1)) {
    fail("axis " + std::to_string(a) + " is out of range for rank " + std::to_string(rank));
  }
  return a < 0 ? a + rank : a;
}

// ---- the op table ----------------------------------------------------------------------

namespace {
const std::vector<std::pair<std::string, OpInfo>> &table() {
  static const OpTable t = [] {
    OpTable all;
    addElementwiseOps(all);
    addBinaryOps(all);
    addShapeOps(all);
    addNnOps(all);
    std::sort(all.begin(), all.end(),
              [](const auto &a, const auto &b) { return a.first < b.first; });
    return all;
  }();
  return t;
}
} // namespace

const OpInfo *findOp(const std::string &domain, const std::string &opType) {
  std::string key = domain + ":" + opType;
  const auto &t = table();
  auto it = std::lower_bound(t.begin(), t.end(), key,
                             [](const auto &e, const std::string &k) { return e.first < k; });
  return it != t.end() && it->first == key ? &it->second : nullptr;
}

std::vector<std::string> supportedOps() {
  std::vector<std::string> out;
  for (const auto &[k, v] : table()) {
    if (k.front() == ':') out.push_back(k.substr(1));
  }
  return out;
}

} // namespace rcjit::onnx
