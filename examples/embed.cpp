// Embedding rcjit in an app: define a module, compile it, call it like the original.
#include <rcjit/rcjit.h>

#include <cstdio>

struct Mlp : rcjit::nn::Module<Mlp> {
  rcjit::nn::Linear fc1{64, 256, true, 1}, fc2{256, 64, true, 2};
  Mlp() {
    register_module("fc1", fc1);
    register_module("fc2", fc2);
  }
  rcjit::Tensor forward(const rcjit::Tensor &x) { return fc2(rcjit::gelu(fc1(x))); }
};

int main() {
  rcjit::NoGradGuard noGrad; // inference: parameters require grad, record nothing
  Mlp mlp;
  auto fast = rcjit::compile(mlp); // nothing happens until the first call
  rcjit::Tensor x = rcjit::Tensor::randn({8, 64}, 0);
  rcjit::Tensor y = fast(x);               // traces, compiles, runs
  for (int i = 0; i < 3; ++i) y = fast(x); // guards pass: compiled code only
  bool same = rcjit::allclose(y, mlp(x), 1e-4, 1e-5);
  std::printf("compiles=%d same_as_eager=%s\n", fast.stats().compiles, same ? "yes" : "no");
  return same ? 0 : 1;
}
