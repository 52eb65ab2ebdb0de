// Optimizers (SGD, AdamW) and gradient clipping, with PyTorch's update rules and defaults.
//
// An optimizer keeps handles to its parameters (leaves that require grad) and updates
// their storage in place without recording gradients; parameters whose grad() is
// undefined are skipped. Not thread-safe: one thread steps an optimizer at a time.
//
// step() inside a compiled function (rcjit::compile) is traced: the update of every
// parameter and of its state becomes generated code, written back after each call, and
// the learning rate and step count are tensors the compiled code reads (set_lr does not
// recompile). Inside a compiled function the rate is set from a tensor, set_lr(Tensor): a
// host number there would be read once, when the function is traced, so set_lr(double)
// inside one is an Error.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include <rcjit/Tensor.h>

namespace rcjit {
/// Tensors by name, in order: a module's named_parameters(), an optimizer's state_dict(),
/// what rcjit::save_tensors writes (rcjit/Checkpoint.h).
using NamedTensors = std::vector<std::pair<std::string, Tensor>>;
} // namespace rcjit

namespace rcjit::optim {

/// What every optimizer offers (SGD, AdamW), for code that holds one of either kind: the
/// caller owns the optimizer, which keeps handles to its parameters. Not thread-safe, like
/// the optimizers themselves.
class Optimizer {
public:
  virtual ~Optimizer() = default;
  /// Updates every parameter that has a grad() by the optimizer's rule.
  virtual void step() = 0;
  /// Clears every parameter's grad() (sets it undefined, like PyTorch's set_to_none).
  virtual void zero_grad() = 0;
  /// The learning rate of the next step; set_lr checks it (finite, >= 0) and sets it
  /// (a compiled step reads the new value without recompiling). set_lr(double) while
  /// rcjit::compile traces is an rcjit::Error: call it before the compiled function, or use
  /// set_lr(Tensor) inside it.
  virtual double lr() const = 0;
  virtual void set_lr(double lr) = 0;
  /// Sets the rate from a one-element floating tensor. Outside a compiled function it reads
  /// the value (a host read) and calls set_lr(double). Inside one the copy is traced: a rate
  /// computed in the graph (a schedule of a step-count tensor, or a tensor argument) is what
  /// each call's update uses, and what lr() returns after the call. A traced rate is not
  /// checked (a negative or NaN rate is the program's). This default throws rcjit::Error
  /// while tracing; SGD and AdamW override it.
  virtual void set_lr(const Tensor &lr);
  /// The parameters it updates, in the order given to its constructor.
  virtual const std::vector<Tensor> &parameters() const = 0;
  /// Its state as named tensors, PyTorch's names flattened: the hyperparameters as f64
  /// scalars ("lr" is the current rate; AdamW: "beta1", "beta2", "eps", "weight_decay"; SGD:
  /// "momentum", "weight_decay") and, for each parameter i (parameters() order) that has
  /// state, "state.i.NAME" (AdamW: "exp_avg", "exp_avg_sq" and the f32 count "step"; SGD
  /// with momentum: "momentum_buffer"). The tensors alias the live state, as PyTorch's do:
  /// save or clone them before the next step. This default throws rcjit::Error (an
  /// optimizer of the caller's own has none); SGD and AdamW override it.
  virtual NamedTensors state_dict() const;
  /// Restores a state_dict() of an optimizer of the same kind and options over parameters
  /// of the same shapes: the rate (set_lr), and each parameter's state copied in place, so
  /// a compiled step that holds the state reads the restored values; a parameter the state
  /// has nothing for starts afresh. Everything is checked before anything changes: an
  /// unknown or missing name, a hyperparameter other than lr that differs from this
  /// optimizer's (they are constants of its compiled steps: construct it with the saved
  /// options), a tensor of another shape or dtype than its parameter's state, a call inside
  /// a compiled function: each an rcjit::Error naming it. This default throws rcjit::Error.
  virtual void load_state_dict(const NamedTensors &state);

protected:
  Optimizer() = default;
  Optimizer(const Optimizer &) = default; // copied or moved only as the derived class
  Optimizer(Optimizer &&) = default;
  Optimizer &operator=(const Optimizer &) = default;
  Optimizer &operator=(Optimizer &&) = default;
};

struct SGDOptions {
  double lr = 1e-2, momentum = 0, weight_decay = 0;
};

/// p -= lr * b, where g = grad + weight_decay * p and b = g (first step) or
/// momentum * b + g (later steps; b = g when momentum is 0).
class SGD : public Optimizer {
public:
  explicit SGD(std::vector<Tensor> params, SGDOptions options = {});
  void step() override;
  /// Clears every parameter's grad() (sets it undefined, like PyTorch's set_to_none).
  void zero_grad() override;
  double lr() const override;
  void set_lr(double lr) override;
  void set_lr(const Tensor &lr) override;
  const std::vector<Tensor> &parameters() const override { return params_; }
  NamedTensors state_dict() const override;
  void load_state_dict(const NamedTensors &state) override;
  /// The options; options().lr is the rate last set on the host (lr() is the current one).
  const SGDOptions &options() const { return options_; }

private:
  void tracedStep();
  std::vector<Tensor> params_;
  std::vector<Tensor> momentum_; // per parameter; undefined until its first step
  SGDOptions options_;
  // f32 scalars holding options_.lr, read by compiled steps: one on the CPU, and one on each
  // device whose parameters a compiled step updated (its ops take operands of one device)
  std::vector<Tensor> lr_;
  bool lrInGraph_ = false; // a compiled set_lr(Tensor) writes lr_: read the rate from there
};

struct AdamWOptions {
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 1e-2;
};

/// PyTorch's AdamW: p *= 1 - lr * weight_decay; m = b1 m + (1 - b1) g;
/// v = b2 v + (1 - b2) g^2; p -= lr / (1 - b1^t) * m / (sqrt(v / (1 - b2^t)) + eps),
/// with t counted per parameter (a parameter without a grad does not advance).
class AdamW : public Optimizer {
public:
  explicit AdamW(std::vector<Tensor> params, AdamWOptions options = {});
  void step() override;
  /// Clears every parameter's grad() (sets it undefined, like PyTorch's set_to_none).
  void zero_grad() override;
  double lr() const override;
  void set_lr(double lr) override;
  void set_lr(const Tensor &lr) override;
  const std::vector<Tensor> &parameters() const override { return params_; }
  NamedTensors state_dict() const override;
  void load_state_dict(const NamedTensors &state) override;
  /// The options; options().lr is the rate last set on the host (lr() is the current one).
  const AdamWOptions &options() const { return options_; }

private:
  struct State {
    Tensor m, v;  // f32 (f64 for f64 parameters); undefined until the first step
    Tensor steps; // f32 scalar: the parameter's step count t (exact up to 2^24)
  };
  static void initState(State &s, const Tensor &p);
  void tracedStep();
  std::vector<Tensor> params_;
  std::vector<State> state_;
  AdamWOptions options_;
  // f32 scalars holding options_.lr, read by compiled steps: one on the CPU, and one on each
  // device whose parameters a compiled step updated (its ops take operands of one device)
  std::vector<Tensor> lr_;
  bool lrInGraph_ = false; // a compiled set_lr(Tensor) writes lr_: read the rate from there
};

} // namespace rcjit::optim

namespace rcjit {
/// Scales every defined grad() of `params` by max_norm / (total + 1e-6) when the total
/// L2 norm over all of them exceeds max_norm; returns the total norm before clipping. It
/// reads the norm on the host: inside a compiled whole step use the two below.
double clip_grad_norm_(const std::vector<Tensor> &params, double max_norm);

/// The L2 norm of all the defined tensors together, as an f64 scalar tensor, summed in f64
/// (PyTorch 2.6's get_total_norm with norm_type 2). No host read: it also runs inside a
/// compiled function. Pass the gradients: get_total_norm(grads_of(params)).
Tensor get_total_norm(const std::vector<Tensor> &tensors);
/// The defined grad() of each of `params` (undefined ones left out), in order.
std::vector<Tensor> grads_of(const std::vector<Tensor> &params);
/// Scales every defined grad() of `params` by min(1, max_norm / (total_norm + 1e-6))
/// (PyTorch 2.6's clip_grads_with_norm_): the clipping of clip_grad_norm_ without its host
/// branch, so a compiled whole step can clip (a scale of 1 leaves a gradient unchanged).
/// max_norm finite and > 0, total_norm a one-element floating tensor: else an Error.
void clip_grads_with_norm_(const std::vector<Tensor> &params, double max_norm,
                           const Tensor &total_norm);
} // namespace rcjit
