// Validation of optimizer settings (SGD, AdamW), shared by the optimizers and by
// dist::ZeroOptimizer, which checks them once before it shards anything.
#pragma once
#include <rcjit/Optim.h>

namespace rcjit::optim {

/// Throws rcjit::Error naming `who`, the option and its value when a setting is out of
/// range: lr finite and >= 0; momentum and weight_decay finite and >= 0; betas in [0, 1);
/// eps finite and > 0 (NaN fails every check).
void checkOptions(const SGDOptions &o, const char *who);
void checkOptions(const AdamWOptions &o, const char *who);
void checkLr(double lr, const char *who);

} // namespace rcjit::optim
