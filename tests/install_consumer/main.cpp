// Uses the installed rcjit through its umbrella header only; exits 0 when results match.
#include <rcjit/rcjit.h>

#include <cstdio>

int main() {
  rcjit::nn::Linear fc(4, 3, true, 7);
  rcjit::Tensor x = rcjit::Tensor::ones({2, 4});
  rcjit::Tensor y = rcjit::relu(fc(x));
  rcjit::Tensor ref = rcjit::relu(rcjit::matmul(x, rcjit::transpose(fc.weight, 0, 1)) + fc.bias);
  if (!rcjit::allclose(y, ref)) {
    std::puts("consumer: mismatch");
    return 1;
  }
  std::printf("consumer: ok, y.shape = %s\n", rcjit::shapeStr(y.shape()).c_str());
  return 0;
}
