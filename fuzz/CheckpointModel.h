// The model and optimizer the safetensors harness loads checkpoints into, and its seeds are
// saved from (fuzz/make_seeds.cpp): a Linear(4, 3) named "a" under AdamW.
#pragma once
#include <memory>

#include <rcjit/rcjit.h>

namespace rcjit::fuzz {

struct CheckpointModel : nn::Module<CheckpointModel> {
  nn::Linear a{4, 3, true, 7};
  CheckpointModel() { register_module("a", a); }
  Tensor forward(const Tensor &x) { return a(x); }
};

/// One AdamW step of `m` on a fixed batch, so that the optimizer has state to save.
inline void stepOnce(CheckpointModel &m, optim::AdamW &opt) {
  opt.zero_grad();
  mse_loss(m(Tensor::ones({2, 4})), Tensor::zeros({2, 3})).backward();
  opt.step();
}

} // namespace rcjit::fuzz
