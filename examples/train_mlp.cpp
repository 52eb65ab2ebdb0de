// Eager training: a 2-layer MLP fitted to fixed labels with AdamW (exit 0 when the loss falls).
#include <cstdio>
#include <vector>

#include <rcjit/rcjit.h>

using namespace rcjit;

struct Mlp : nn::Module<Mlp> {
  nn::Linear fc1{8, 32, true, 1}, fc2{32, 4, true, 2};
  Mlp() {
    register_module("fc1", fc1);
    register_module("fc2", fc2);
  }
  Tensor forward(const Tensor &x) { return fc2(relu(fc1(x))); }
};

int main() {
  Mlp net; // parameters are leaves that require grad
  Tensor x = Tensor::randn({16, 8}, 7);
  std::vector<int64_t> ids;
  for (int i = 0; i < 16; ++i) ids.push_back(i % 4);
  Tensor labels = Tensor::from_vector(ids, {16});
  optim::AdamW opt(net.parameters(), {.lr = 1e-2});
  double first = 0, last = 0;
  for (int step = 0; step < 50; ++step) {
    opt.zero_grad();
    Tensor loss = cross_entropy(net(x), labels); // logits [..., C], class ids [...]
    loss.backward();                             // accumulates every parameter's grad()
    clip_grad_norm_(net.parameters(), 1.0);
    opt.step(); // updates in place, recording nothing
    (step == 0 ? first : last) = loss.item();
  }
  NoGradGuard noGrad; // inference: records nothing
  Tensor predicted = argmax(net(x), -1);
  std::printf("loss %.4f -> %.4f, peak tensor memory %lld bytes\n", first, last,
              static_cast<long long>(memory_stats().peak_bytes));
  return last < 0.5 * first ? 0 : 1;
}
