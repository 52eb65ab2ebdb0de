// nn modules: parameter and child registration, names, and the built-in layers.
#include <cxxabi.h>

#include <cmath>
#include <cstdlib>
#include <memory>

#include <rcjit/Autograd.h>
#include <rcjit/nn.h>

#include "tracer/AutogradHook.h"
#include "tracer/OpsInternal.h"

namespace rcjit::nn {

namespace {
void checkName(const std::string &name, const char *what) {
  if (name.empty() || name.find('.') != std::string::npos) {
    throw Error(std::string(what) + ": name '" + name + "' must be non-empty and contain no '.'");
  }
}
} // namespace

void ModuleBase::register_parameter(std::string name, Tensor &t, bool requires_grad) {
  checkName(name, "register_parameter");
  if (!t.defined()) throw Error("register_parameter: '" + name + "' is an undefined Tensor");
  for (const auto &p : params_) {
    if (p.first == name) throw Error("register_parameter: '" + name + "' is already registered");
  }
  if (requires_grad && isFloating(t.dtype())) {
    if (!t.is_leaf()) t = t.detach(); // a parameter is a leaf, whatever computed it
    t.requires_grad_();
  }
  params_.emplace_back(std::move(name), &t);
}

void ModuleBase::register_module(std::string name, ModuleBase &m) {
  checkName(name, "register_module");
  if (&m == this) throw Error("register_module: a module cannot be its own child");
  for (const auto &c : children_) {
    if (c.first == name) throw Error("register_module: '" + name + "' is already registered");
  }
  if (m.parent_ && m.parent_ != this) {
    throw Error("register_module: '" + name + "' is already a child of another module");
  }
  m.parent_ = this;
  m.nameInParent_ = name;
  children_.emplace_back(std::move(name), &m);
}

namespace {
// `converted` in place of the parameter `t`, as a leaf that requires grad when t did.
void replaceParameter(Tensor &t, const Tensor &converted) {
  if (converted.impl() == t.impl()) return;
  const bool wanted = t.requires_grad();
  t = converted.detach();
  if (wanted) t.requires_grad_();
}
} // namespace

void ModuleBase::to(Device device) {
  NoGradGuard noGrad;
  for (auto &[name, t] : params_) {
    if (t->defined()) replaceParameter(*t, t->to(device));
  }
  for (auto &[name, child] : children_) child->to(device);
}

void ModuleBase::to(DType dtype) {
  NoGradGuard noGrad;
  for (auto &[name, t] : params_) {
    if (t->defined() && isFloating(t->dtype())) replaceParameter(*t, t->to(dtype));
  }
  for (auto &[name, child] : children_) child->to(dtype);
}

std::vector<Tensor> ModuleBase::parameters() const {
  std::vector<Tensor> out;
  for (auto &[name, t] : named_parameters()) out.push_back(t);
  return out;
}

void ModuleBase::zero_grad() {
  for (auto &[name, t] : params_) {
    if (t->defined()) autograd::setGrad(*t, Tensor());
  }
  for (auto &[name, child] : children_) child->zero_grad();
}

std::vector<std::pair<std::string, Tensor>> ModuleBase::named_parameters() const {
  std::vector<std::pair<std::string, Tensor>> out;
  for (const auto &[name, t] : params_) out.emplace_back(name, *t);
  for (const auto &[cname, child] : children_) {
    for (auto &[pname, t] : child->named_parameters()) out.emplace_back(cname + "." + pname, t);
  }
  return out;
}

std::string ModuleBase::path() const {
  std::string p;
  for (const ModuleBase *m = this; m && m->parent_; m = m->parent_) {
    p = p.empty() ? m->nameInParent_ : m->nameInParent_ + "." + p;
  }
  return p;
}

namespace detail {
void rethrowInModule(const ModuleBase &m) {
  try {
    throw;
  } catch (const Error &e) {
    const std::string what = e.what();
    if (typeid(e) != typeid(Error) || what.find(" (in module ") != std::string::npos) throw;
    const std::string path = m.path();
    throw Error(what + " (in module " + (path.empty() ? "" : path + ", ") + m.typeName() + ")");
  }
}
} // namespace detail

std::string ModuleBase::typeName() const {
  const char *mangled = typeid(*this).name();
  int status = 0;
  std::unique_ptr<char, void (*)(void *)> demangled(
      abi::__cxa_demangle(mangled, nullptr, nullptr, &status), std::free);
  return status == 0 && demangled ? std::string(demangled.get()) : std::string(mangled);
}

Linear::Linear(int64_t in, int64_t out, bool bias, uint64_t seed) {
  if (in <= 0 || out <= 0) {
    throw Error("Linear: in and out must be positive, got " + std::to_string(in) + ", " +
                std::to_string(out));
  }
  double k = 1.0 / std::sqrt(static_cast<double>(in));
  weight = rcjit::detail::randUniform({out, in}, seed * 2, -k, k, DType::f32);
  register_parameter("weight", weight);
  if (bias) {
    this->bias = rcjit::detail::randUniform({out}, seed * 2 + 1, -k, k, DType::f32);
    register_parameter("bias", this->bias);
  }
}

Embedding::Embedding(int64_t num, int64_t dim, uint64_t seed)
    : weight(Tensor::randn({num, dim}, seed)) {
  register_parameter("weight", weight);
}

LayerNorm::LayerNorm(int64_t dim, double eps)
    : weight(Tensor::ones({dim})), bias(Tensor::zeros({dim})), eps(eps) {
  register_parameter("weight", weight);
  register_parameter("bias", bias);
}

RMSNorm::RMSNorm(int64_t dim, double eps) : weight(Tensor::ones({dim})), eps(eps) {
  register_parameter("weight", weight);
}

} // namespace rcjit::nn
