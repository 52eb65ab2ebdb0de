// Validation of optimizer settings (SGD, AdamW) and of a state_dict() to restore, shared by
// the optimizers and by dist::ZeroOptimizer, which checks them once for all its slices.
#pragma once
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <rcjit/Optim.h>

namespace rcjit::optim {

/// Throws rcjit::Error naming `who`, the option and its value when a setting is out of
/// range: lr finite and >= 0; momentum and weight_decay finite and >= 0; betas in [0, 1);
/// eps finite and > 0 (NaN fails every check).
void checkOptions(const SGDOptions &o, const char *who);
void checkOptions(const AdamWOptions &o, const char *who);
void checkLr(double lr, const char *who);

/// The hyperparameters a state_dict() holds, in its order, with the rate `lr`: AdamW's lr,
/// beta1, beta2, eps, weight_decay; SGD's lr, momentum, weight_decay.
std::vector<std::pair<std::string, double>> hyperparameters(const AdamWOptions &o, double lr);
std::vector<std::pair<std::string, double>> hyperparameters(const SGDOptions &o, double lr);
/// Those as state_dict() holds them: f64 scalars.
NamedTensors asTensors(const std::vector<std::pair<std::string, double>> &hyper);

/// A state_dict() checked against an optimizer: the rate and, per parameter, its state
/// tensors by name (all of the optimizer's names for a parameter, or none).
struct CheckedState {
  double lr = 0;
  std::vector<std::map<std::string, Tensor>> perParam;
};
/// Checks `state` (as load_state_dict takes it) against AdamW with options `o` over
/// parameters whose moments have these shapes and dtypes, or SGD's over these momentum
/// buffers; changes nothing. Every problem is an rcjit::Error starting with `who`.
CheckedState checkState(const NamedTensors &state, const AdamWOptions &o,
                        const std::vector<std::pair<Shape, DType>> &moments,
                        const std::string &who);
CheckedState checkState(const NamedTensors &state, const SGDOptions &o,
                        const std::vector<std::pair<Shape, DType>> &buffers,
                        const std::string &who);

} // namespace rcjit::optim
