// dist::ZeroOptimizer's whole state and parameters in and out (each rank keeps its slices of
// them), and checkpoints in rcjit::save_checkpoint's format, so a run resumes on any number of
// ranks or in one process.
#include <rcjit/Zero.h>

#include <algorithm>
#include <map>

#include <rcjit/Autograd.h>
#include <rcjit/Dist.h>
#include <rcjit/nn.h>

#include "autograd/CheckpointFile.h"
#include "autograd/OptimOptions.h"
#include "dist/ZeroImpl.h"
#include "tracer/Safetensors.h"
#include "tracer/Tracer.h"

namespace rcjit::dist {

namespace {

// The names of a parameter's state held as a flat slice of its unit: AdamW's moments or
// SGD's momentum buffer (AdamW's "step" is one count per unit).
std::vector<std::string> flatStateNames(bool adamw) {
  if (adamw) return {"exp_avg", "exp_avg_sq"};
  return {"momentum_buffer"};
}

// The hyperparameters as state_dict() names them, with the rate `lr`.
NamedTensors hyperparameters(const ZeroOptimizer::Impl &z, double lr) {
  return optim::asTensors(z.adamw ? optim::hyperparameters(*z.adamw, lr)
                                  : optim::hyperparameters(*z.sgd, lr));
}

void refuseInTrace(const ZeroOptimizer::Impl &z, const char *what) {
  if (Tracer::current()) throw Error(z.where() + ": " + what + " inside rcjit::compile");
}

} // namespace

std::vector<Shape> ZeroOptimizer::Impl::parameterShapes() const {
  std::vector<Shape> shapes;
  for (const ZeroUnit &u : units) {
    for (const ZeroMember &m : u.members) {
      for (size_t index : m.indices) {
        if (shapes.size() <= index) shapes.resize(index + 1);
        shapes[index] = m.shape;
      }
    }
  }
  return shapes;
}

ZeroOptimizer::Impl::SlicedState ZeroOptimizer::Impl::sliceState(const NamedTensors &state) const {
  const std::string who = where() + ": load_state_dict";
  std::vector<std::pair<Shape, DType>> moments;
  for (const Shape &shape : parameterShapes()) moments.emplace_back(shape, DType::f32);
  const optim::CheckedState c = adamw ? optim::checkState(state, *adamw, moments, who)
                                      : optim::checkState(state, *sgd, moments, who);
  SlicedState out;
  out.lr = c.lr;
  for (const ZeroUnit &u : units) {
    out.units.push_back(hyperparameters(*this, c.lr));
    const ZeroMember *with = nullptr, *without = nullptr;
    double step = -1;
    for (const ZeroMember &m : u.members) {
      const std::map<std::string, Tensor> &s = c.perParam[m.indices.front()];
      (s.empty() ? without : with) = &m;
      if (s.empty() || !adamw) continue;
      const double t = s.at("step").item();
      if (step >= 0 && t != step) {
        throw Error(who + ": the parameters of unit '" + u.name + "' have step counts " +
                    std::to_string(step) + " and " + std::to_string(t) + " (" + m.name +
                    "); a ZeRO unit keeps one count for all of them");
      }
      step = t;
    }
    if (with && without) {
      throw Error(who + ": unit '" + u.name + "' has state for " + with->name + " but not for " +
                  without->name + "; a ZeRO unit keeps state for all its parameters or none");
    }
    if (!with) continue;
    for (const std::string &name : flatStateNames(adamw.has_value())) {
      std::vector<Tensor> values;
      for (const ZeroMember &m : u.members) {
        values.push_back(c.perParam[m.indices.front()].at(name).contiguous());
      }
      Tensor slice = Tensor::zeros({u.sliceLen});
      detail::packRange(u, values, rank * u.sliceLen, (rank + 1) * u.sliceLen, slice.data<float>());
      out.units.back().emplace_back("state.0." + name, slice);
    }
    if (adamw) out.units.back().emplace_back("state.0.step", Tensor::full({}, step));
  }
  return out;
}

void ZeroOptimizer::Impl::applyState(const SlicedState &s) {
  (adamw ? adamw->lr : sgd->lr) = s.lr;
  for (size_t i = 0; i < units.size(); ++i) {
    ZeroUnit &u = units[i];
    u.optimizer->load_state_dict(s.units[i]); // checked above: restores in place
    u.stepped = std::any_of(s.units[i].begin(), s.units[i].end(),
                            [](const auto &e) { return e.first.rfind("state.", 0) == 0; });
  }
}

void ZeroOptimizer::Impl::checkFull(const std::vector<Tensor> &values) const {
  if (values.size() != parameterShapes().size()) {
    throw Error(where() + ": set_full_parameters: " + std::to_string(values.size()) +
                " values for the model's " + std::to_string(parameterShapes().size()) +
                " parameters");
  }
  for (const ZeroUnit &u : units) {
    for (const ZeroMember &m : u.members) {
      for (size_t index : m.indices) {
        const Tensor &v = values[index];
        if (!v.defined() || v.shape() != m.shape || v.dtype() != DType::f32) {
          throw Error(where() + ": set_full_parameters: value " + std::to_string(index) + " (" +
                      m.name + ") is " +
                      (v.defined() ? std::string(dtypeName(v.dtype())) + shapeStr(v.shape())
                                   : std::string("undefined")) +
                      ", not f32" + shapeStr(m.shape));
        }
      }
    }
  }
}

void ZeroOptimizer::Impl::applyFull(const std::vector<Tensor> &values) {
  NoGradGuard noGrad;
  for (ZeroUnit &u : units) {
    std::vector<Tensor> own;
    for (const ZeroMember &m : u.members) {
      own.push_back(values[m.indices.front()].to(Device::cpu()).contiguous());
    }
    Tensor slice = Tensor::zeros({u.sliceLen});
    detail::packRange(u, own, rank * u.sliceLen, (rank + 1) * u.sliceLen, slice.data<float>());
    u.slice.copy_(slice); // copy_: a new version, so no compiled program keeps a stale packing
    if (stage == 3 && u.present) {
      for (size_t k = 0; k < own.size(); ++k) u.params[k].copy_(own[k]);
    }
  }
  for (size_t i = 0; i < params.size(); ++i) params[i].copy_(values[i]); // stages 1 and 2
}

void ZeroOptimizer::set_full_parameters(const std::vector<Tensor> &values) {
  refuseInTrace(*impl_, "set_full_parameters");
  impl_->checkFull(values);
  impl_->applyFull(values);
}

NamedTensors ZeroOptimizer::state_dict() {
  Impl &z = *impl_;
  refuseInTrace(z, "state_dict");
  NoGradGuard noGrad;
  std::vector<NamedTensors> perParameter(z.parameterShapes().size());
  for (ZeroUnit &u : z.units) {
    const NamedTensors own = u.optimizer->state_dict();
    const std::map<std::string, Tensor> byName(own.begin(), own.end());
    // whether a unit has state agrees across ranks: each steps the units every rank has a
    // gradient for
    for (const std::string &name : flatStateNames(z.adamw.has_value())) {
      auto it = byName.find("state.0." + name);
      if (it == byName.end()) continue;
      Tensor flat = all_gather(it->second.contiguous());
      std::vector<Tensor> values;
      for (const ZeroMember &m : u.members) values.push_back(Tensor::empty(m.shape));
      detail::unpackRange(u, values, 0, u.numel, flat.data<float>());
      for (size_t k = 0; k < values.size(); ++k) {
        for (size_t index : u.members[k].indices) {
          perParameter[index].emplace_back("state." + std::to_string(index) + "." + name,
                                           values[k]);
        }
      }
    }
    auto step = byName.find("state.0.step");
    if (step == byName.end()) continue;
    for (const ZeroMember &m : u.members) {
      for (size_t index : m.indices) {
        perParameter[index].emplace_back("state." + std::to_string(index) + ".step",
                                         step->second.clone());
      }
    }
  }
  NamedTensors out = hyperparameters(z, lr());
  for (NamedTensors &p : perParameter) out.insert(out.end(), p.begin(), p.end());
  return out;
}

void ZeroOptimizer::load_state_dict(const NamedTensors &state) {
  refuseInTrace(*impl_, "load_state_dict");
  impl_->applyState(impl_->sliceState(state));
}

void save_checkpoint(const std::string &path, nn::ModuleBase &model, ZeroOptimizer &optimizer,
                     const std::map<std::string, std::string> &metadata) {
  const NamedTensors state = optimizer.state_dict();              // a collective
  const std::vector<Tensor> values = optimizer.full_parameters(); // a collective at stage 3
  NamedTensors params;
  const std::vector<std::pair<std::string, Tensor>> named = model.named_parameters();
  for (size_t i = 0; i < named.size() && i < values.size(); ++i) {
    params.emplace_back(named[i].first, values[i]);
  }
  std::string error;
  if (rank() == 0) {
    try {
      rcjit::detail::writeCheckpoint(path, params, &state, metadata);
    } catch (const Error &e) {
      error = e.what();
    }
  }
  Tensor written = Tensor::full({}, error.empty() ? 1.0 : 0.0);
  broadcast(written, 0);
  if (!error.empty()) throw Error(error);
  if (written.item() == 0) {
    throw Error("dist::save_checkpoint: rank 0 could not write '" + path +
                "' (its error says why)");
  }
}

std::map<std::string, std::string> load_checkpoint(const std::string &path, nn::ModuleBase &model,
                                                   ZeroOptimizer &optimizer) {
  ZeroOptimizer::Impl &z = *optimizer.impl_;
  refuseInTrace(z, "load_checkpoint");
  std::string error;
  rcjit::detail::CheckpointRead read;
  ZeroOptimizer::Impl::SlicedState sliced;
  try {
    // the names the model gives, the shapes its units hold (stage 3 keeps no full parameters)
    std::vector<rcjit::detail::ExpectedParameter> expected;
    const std::vector<Shape> shapes = z.parameterShapes();
    const auto named = model.named_parameters();
    for (size_t i = 0; i < named.size(); ++i) {
      expected.push_back({named[i].first, i < shapes.size() ? shapes[i] : Shape{}, DType::f32});
    }
    read = rcjit::detail::readCheckpoint(path, expected, true);
    try {
      sliced = z.sliceState(read.state);
      z.checkFull(read.params);
    } catch (const Error &e) {
      failSafetensors(path, e.what());
    }
  } catch (const Error &e) {
    error = e.what();
  }
  Tensor failed = Tensor::full({}, error.empty() ? 0.0 : 1.0);
  all_reduce(failed); // every rank learns whether any cannot load it
  if (!error.empty()) throw Error(error);
  if (failed.item() > 0) {
    throw Error("dist::load_checkpoint '" + path +
                "': " + std::to_string(static_cast<int>(failed.item())) +
                " other rank(s) could not read or use it (their errors say why); nothing was "
                "changed");
  }
  z.applyState(sliced);
  z.applyFull(read.params);
  return read.metadata;
}

} // namespace rcjit::dist
