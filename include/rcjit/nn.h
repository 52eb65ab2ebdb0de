// rcjit::nn: modules that own parameters; calls through operator() are trace regions.
#pragma once
#include <memory>
#include <string>
#include <typeinfo>
#include <utility>
#include <vector>

#include <rcjit/Ops.h>
#include <rcjit/Tensor.h>

namespace rcjit::nn {

/// Owns named parameters and named child modules. Not copyable or movable: a module's
/// address is its identity (the tracer and regional compilation key on it). Registration
/// stores pointers to the caller's members, so assigning a new Tensor to a registered
/// member is seen by everything that reads the parameter later. Not thread-safe to
/// register from several threads; reading is.
class ModuleBase {
public:
  ModuleBase() = default;
  virtual ~ModuleBase() = default;
  ModuleBase(const ModuleBase &) = delete;
  ModuleBase &operator=(const ModuleBase &) = delete;
  ModuleBase(ModuleBase &&) = delete;
  ModuleBase &operator=(ModuleBase &&) = delete;

  /// Registers `t` (a member of this module) under `name`; an Error if the name is taken.
  /// A floating parameter becomes a leaf that requires grad (libtorch's convention); pass
  /// requires_grad = false for a frozen one.
  void register_parameter(std::string name, Tensor &t, bool requires_grad = true);
  /// Registers a child module under `name`; it must outlive this module's use.
  void register_module(std::string name, ModuleBase &m);

  /// Moves every parameter of this module and its descendants to `device` (each registered
  /// member is assigned its copy, a leaf that requires grad when the original did; a
  /// parameter already there is left as is).
  void to(Device device);
  /// Converts every floating parameter to `dtype` the same way (leaves stay leaves).
  void to(DType dtype);
  /// named_parameters() without the names: what an optimizer takes.
  std::vector<Tensor> parameters() const;
  /// Clears the grad() of every parameter (sets it undefined, like PyTorch's set_to_none).
  void zero_grad();
  /// Every parameter of this module and its descendants, named by dotted path
  /// ("blocks.0.fc.weight"), in registration order, depth first.
  std::vector<std::pair<std::string, Tensor>> named_parameters() const;
  const std::vector<std::pair<std::string, Tensor *>> &own_parameters() const { return params_; }
  const std::vector<std::pair<std::string, ModuleBase *>> &children() const { return children_; }
  /// Dotted path from the outermost registering module ("" for a root).
  std::string path() const;
  const ModuleBase *parent() const { return parent_; }
  /// The C++ type name, demangled ("Block").
  std::string typeName() const;
  virtual bool isModuleList() const { return false; }

private:
  std::vector<std::pair<std::string, Tensor *>> params_;
  std::vector<std::pair<std::string, ModuleBase *>> children_;
  ModuleBase *parent_ = nullptr;
  std::string nameInParent_;
};

namespace detail {
/// Marks a module call as a region of the active trace (if any) for its lifetime.
class ModuleCallScope {
public:
  explicit ModuleCallScope(ModuleBase &m);
  ~ModuleCallScope();
  ModuleCallScope(const ModuleCallScope &) = delete;
  ModuleCallScope &operator=(const ModuleCallScope &) = delete;

private:
  bool active_;
};

/// Called in a catch block around a module's forward: rethrows an rcjit::Error (the exact
/// type) with the module named, "... (in module blocks.3.fc, rcjit::nn::Linear)", unless an
/// inner module already named itself; any other exception unchanged.
[[noreturn]] void rethrowInModule(const ModuleBase &m);
} // namespace detail

/// CRTP base: `module(args...)` calls `Derived::forward(args...)` inside a trace region; an
/// rcjit::Error from inside names the innermost module it came from.
template <class Derived> class Module : public ModuleBase {
public:
  template <class... Args> decltype(auto) operator()(Args &&...args) {
    detail::ModuleCallScope scope(*this);
    try {
      return static_cast<Derived &>(*this).forward(std::forward<Args>(args)...);
    } catch (...) {
      detail::rethrowInModule(*this);
    }
  }
};

/// y = x w^T + b, w [out, in] and b [out] drawn from U(-1/sqrt(in), 1/sqrt(in)).
class Linear : public Module<Linear> {
public:
  Linear(int64_t in, int64_t out, bool bias = true, uint64_t seed = 0);
  Tensor forward(const Tensor &x) const { return linear(x, weight, bias); }
  Tensor weight;
  Tensor bias; // undefined when bias = false
};

/// Rows of weight [num, dim] (standard normal init) picked by integer ids.
class Embedding : public Module<Embedding> {
public:
  Embedding(int64_t num, int64_t dim, uint64_t seed = 0);
  Tensor forward(const Tensor &ids) const { return embedding(weight, ids); }
  Tensor weight;
};

/// Layer normalization over the last dim, weight ones and bias zeros.
class LayerNorm : public Module<LayerNorm> {
public:
  explicit LayerNorm(int64_t dim, double eps = 1e-5);
  Tensor forward(const Tensor &x) const { return layer_norm(x, weight, bias, eps); }
  Tensor weight;
  Tensor bias;
  double eps;
};

/// Root-mean-square normalization over the last dim, weight ones.
class RMSNorm : public Module<RMSNorm> {
public:
  explicit RMSNorm(int64_t dim, double eps = 1e-6);
  Tensor forward(const Tensor &x) const { return rms_norm(x, weight, eps); }
  Tensor weight;
  double eps;
};

/// A list of modules of one type, constructed in place; element i is child "i".
template <class M> class ModuleList : public ModuleBase {
public:
  template <class... Args> M &emplace_back(Args &&...args) {
    items_.push_back(std::make_unique<M>(std::forward<Args>(args)...));
    register_module(std::to_string(items_.size() - 1), *items_.back());
    return *items_.back();
  }
  size_t size() const { return items_.size(); }
  bool empty() const { return items_.empty(); }
  M &operator[](size_t i) { return *items_.at(i); }
  const M &operator[](size_t i) const { return *items_.at(i); }
  bool isModuleList() const override { return true; }

  class iterator {
  public:
    using Inner = typename std::vector<std::unique_ptr<M>>::const_iterator;
    explicit iterator(Inner it) : it_(it) {}
    M &operator*() const { return **it_; }
    M *operator->() const { return it_->get(); }
    iterator &operator++() {
      ++it_;
      return *this;
    }
    bool operator==(const iterator &o) const { return it_ == o.it_; }
    bool operator!=(const iterator &o) const { return it_ != o.it_; }

  private:
    Inner it_;
  };
  iterator begin() const { return iterator(items_.begin()); }
  iterator end() const { return iterator(items_.end()); }

private:
  std::vector<std::unique_ptr<M>> items_;
};

} // namespace rcjit::nn
