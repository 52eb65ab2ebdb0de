// PyTorch's regional-compilation recipe as an rcjit module (the built-in model toy64):
// Linear(10, 10), then 64 identical layers of Linear, relu, sigmoid, Linear, relu.
#pragma once
#include <rcjit/rcjit.h>

struct ToyLayer : rcjit::nn::Module<ToyLayer> {
  rcjit::nn::Linear linear1, linear2;
  explicit ToyLayer(uint64_t seed)
      : linear1(10, 10, true, seed), linear2(10, 10, true, seed + 1) {
    register_module("linear1", linear1);
    register_module("linear2", linear2);
  }
  rcjit::Tensor forward(const rcjit::Tensor &x) {
    return rcjit::relu(linear2(rcjit::sigmoid(rcjit::relu(linear1(x)))));
  }
};

struct Toy64 : rcjit::nn::Module<Toy64> {
  rcjit::nn::Linear linear{10, 10, true, 0};
  rcjit::nn::ModuleList<ToyLayer> layers;
  Toy64() {
    for (int i = 0; i < 64; ++i) layers.emplace_back(2 * i + 1);
    register_module("linear", linear);
    register_module("layers", layers);
  }
  rcjit::Tensor forward(rcjit::Tensor x) {
    x = linear(x);
    for (ToyLayer &l : layers) x = l(x);
    return x;
  }
};
