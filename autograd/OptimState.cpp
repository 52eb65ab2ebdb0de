// Optimizer state as named tensors: state_dict() and load_state_dict() of SGD and AdamW,
// checked as a whole before anything changes and restored in place.
#include <rcjit/Optim.h>

#include <charconv>
#include <cmath>
#include <map>
#include <string>

#include <rcjit/Autograd.h>

#include "autograd/OptimOptions.h"
#include "tracer/Tracer.h"

namespace rcjit::optim {

namespace {

// What one optimizer's state holds: its hyperparameters (this optimizer's values; "lr"
// first, the one a state may change) and the names of a parameter's state tensors, with
// the shape and dtype each must have.
struct StateLayout {
  std::string who; // "AdamW::load_state_dict"
  std::vector<std::pair<std::string, double>> hyper;
  std::vector<std::string> names;
  const std::vector<std::pair<Shape, DType>> &states; // per parameter: its moments' shape, dtype
  // the shape and dtype of a parameter's state `name`: its moments', a step count's f32 {}
  std::pair<Shape, DType> expect(size_t param, const std::string &name) const {
    if (name == "step") return {Shape{}, DType::f32};
    return states[param];
  }
};

// The shortest text that reads back as v (0.95, not 0.94999999999999996).
std::string number(double v) {
  char buf[32];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

[[noreturn]] void bad(const StateLayout &l, const std::string &what) {
  throw Error(l.who + ": " + what);
}

// A one-element floating hyperparameter's value.
double hyperValue(const StateLayout &l, const std::string &name, const Tensor &t) {
  if (!t.defined() || t.numel() != 1 || !isFloating(t.dtype())) {
    bad(l, "'" + name + "' must be a one-element floating tensor (a state_dict()'s f64 scalar)");
  }
  return t.item();
}

// "state.I.NAME" -> (I, NAME), or false when `key` is not of that form.
bool parseStateKey(const std::string &key, size_t &index, std::string &name) {
  if (key.rfind("state.", 0) != 0) return false;
  const size_t dot = key.find('.', 6);
  if (dot == std::string::npos || dot == 6) return false;
  const std::string digits = key.substr(6, dot - 6);
  if (digits.find_first_not_of("0123456789") != std::string::npos || digits.size() > 9)
    return false;
  index = std::stoul(digits);
  name = key.substr(dot + 1);
  return true;
}

void checkHyper(const StateLayout &l, const std::map<std::string, Tensor> &byName,
                CheckedState &c) {
  for (const auto &[name, mine] : l.hyper) {
    auto it = byName.find(name);
    if (it == byName.end()) {
      bad(l, "the state has no '" + name + "' (not a state_dict() of this kind of optimizer?)");
    }
    const double v = hyperValue(l, name, it->second);
    if (name == "lr") {
      checkLr(v, l.who.c_str());
      c.lr = v;
    } else if (!(v == mine)) {
      bad(l, name + " is " + number(mine) + " here but " + number(v) +
                 " in the state: construct the optimizer with the saved options (they are "
                 "constants of its compiled steps)");
    }
  }
}

void checkTensor(const StateLayout &l, const std::string &key, const Tensor &t, size_t param) {
  const std::string name = key.substr(key.rfind('.') + 1);
  const auto [shape, dtype] = l.expect(param, name);
  if (!t.defined() || t.shape() != shape || t.dtype() != dtype) {
    bad(l, "'" + key + "' is " +
               (t.defined() ? std::string(dtypeName(t.dtype())) + shapeStr(t.shape())
                            : std::string("undefined")) +
               " but parameter " + std::to_string(param) + "'s " + name + " is " +
               std::string(dtypeName(dtype)) + shapeStr(shape) +
               " (a state of other parameters, or of another model?)");
  }
}

CheckedState checkLayout(const NamedTensors &state, const StateLayout &l) {
  const size_t params = l.states.size();
  if (Tracer::current()) {
    bad(l, "called inside a compiled function: restore the state before calling it (a compiled "
           "step reads the restored values)");
  }
  std::map<std::string, Tensor> byName;
  for (const auto &[key, t] : state) {
    if (!byName.emplace(key, t).second) bad(l, "the state names '" + key + "' twice");
  }
  CheckedState c;
  checkHyper(l, byName, c);
  c.perParam.resize(params);
  for (const auto &[key, t] : byName) {
    bool known = false;
    for (const auto &h : l.hyper) known = known || h.first == key;
    if (known) continue;
    size_t index = 0;
    std::string name;
    const bool stateKey = parseStateKey(key, index, name);
    bool ownName = false;
    for (const std::string &n : l.names) ownName = ownName || n == name;
    if (!stateKey || !ownName) bad(l, "the state has '" + key + "', which this optimizer has not");
    if (index >= params) {
      bad(l, "the state has '" + key + "' but this optimizer has " + std::to_string(params) +
                 " parameters");
    }
    checkTensor(l, key, t, index);
    c.perParam[index][name] = t;
  }
  for (size_t i = 0; i < params; ++i) {
    if (c.perParam[i].empty()) continue;
    for (const std::string &n : l.names) {
      if (!c.perParam[i].count(n)) {
        bad(l, "the state has parameter " + std::to_string(i) + "'s " +
                   c.perParam[i].begin()->first + " but not its " + n);
      }
    }
  }
  return c;
}

// `dst` holds `src`'s values, written in place, so a compiled step that holds it reads them.
void restore(Tensor &dst, const Tensor &src) {
  NoGradGuard noGrad;
  dst.copy_(src.to(dst.device()));
}

// A state that the loaded dict has none for starts afresh: zeros, as its first step makes.
void clearState(Tensor &t) {
  if (!t.defined()) return;
  NoGradGuard noGrad;
  t.copy_(Tensor::zeros(t.shape(), t.dtype(), t.device()));
}

DType momentsDtype(const Tensor &p) { return p.dtype() == DType::f64 ? DType::f64 : DType::f32; }

[[noreturn]] void noStateDict(const char *what) {
  throw Error(std::string("Optimizer::") + what +
              ": this optimizer does not define it (SGD and AdamW do); override state_dict() and "
              "load_state_dict() to save and restore its state");
}

} // namespace

std::vector<std::pair<std::string, double>> hyperparameters(const AdamWOptions &o, double lr) {
  return {{"lr", lr},
          {"beta1", o.beta1},
          {"beta2", o.beta2},
          {"eps", o.eps},
          {"weight_decay", o.weight_decay}};
}

std::vector<std::pair<std::string, double>> hyperparameters(const SGDOptions &o, double lr) {
  return {{"lr", lr}, {"momentum", o.momentum}, {"weight_decay", o.weight_decay}};
}

NamedTensors asTensors(const std::vector<std::pair<std::string, double>> &hyper) {
  NamedTensors out;
  for (const auto &[name, v] : hyper) out.emplace_back(name, Tensor::full({}, v, DType::f64));
  return out;
}

CheckedState checkState(const NamedTensors &state, const AdamWOptions &o,
                        const std::vector<std::pair<Shape, DType>> &moments,
                        const std::string &who) {
  return checkLayout(state,
                     {who, hyperparameters(o, o.lr), {"exp_avg", "exp_avg_sq", "step"}, moments});
}

CheckedState checkState(const NamedTensors &state, const SGDOptions &o,
                        const std::vector<std::pair<Shape, DType>> &buffers,
                        const std::string &who) {
  return checkLayout(state, {who, hyperparameters(o, o.lr), {"momentum_buffer"}, buffers});
}

NamedTensors Optimizer::state_dict() const { noStateDict("state_dict"); }

void Optimizer::load_state_dict(const NamedTensors &) { noStateDict("load_state_dict"); }

NamedTensors SGD::state_dict() const {
  NamedTensors out = asTensors(hyperparameters(options_, lr()));
  for (size_t i = 0; i < params_.size(); ++i) {
    if (momentum_[i].defined()) {
      out.emplace_back("state." + std::to_string(i) + ".momentum_buffer", momentum_[i]);
    }
  }
  return out;
}

void SGD::load_state_dict(const NamedTensors &state) {
  std::vector<std::pair<Shape, DType>> buffers;
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor &buf = momentum_[i];
    buffers.emplace_back(params_[i].shape(), buf.defined() ? buf.dtype() : params_[i].dtype());
  }
  const CheckedState c = checkState(state, options_, buffers, "SGD::load_state_dict");
  set_lr(c.lr);
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor &p = params_[i];
    if (c.perParam[i].empty()) {
      clearState(momentum_[i]);
      continue;
    }
    if (!momentum_[i].defined()) momentum_[i] = Tensor::zeros(p.shape(), p.dtype(), p.device());
    restore(momentum_[i], c.perParam[i].at("momentum_buffer"));
  }
}

NamedTensors AdamW::state_dict() const {
  NamedTensors out = asTensors(hyperparameters(options_, lr()));
  for (size_t i = 0; i < params_.size(); ++i) {
    const State &s = state_[i];
    if (!s.m.defined() || !s.steps.defined()) continue;
    const std::string at = "state." + std::to_string(i) + ".";
    out.emplace_back(at + "exp_avg", s.m);
    out.emplace_back(at + "exp_avg_sq", s.v);
    out.emplace_back(at + "step", s.steps);
  }
  return out;
}

void AdamW::load_state_dict(const NamedTensors &state) {
  std::vector<std::pair<Shape, DType>> moments;
  for (const Tensor &p : params_) moments.emplace_back(p.shape(), momentsDtype(p));
  const CheckedState c = checkState(state, options_, moments, "AdamW::load_state_dict");
  set_lr(c.lr);
  for (size_t i = 0; i < params_.size(); ++i) {
    State &s = state_[i];
    if (c.perParam[i].empty()) {
      clearState(s.m);
      clearState(s.v);
      clearState(s.steps);
      continue;
    }
    initState(s, params_[i]);
    restore(s.m, c.perParam[i].at("exp_avg"));
    restore(s.v, c.perParam[i].at("exp_avg_sq"));
    restore(s.steps, c.perParam[i].at("step"));
  }
}

} // namespace rcjit::optim
