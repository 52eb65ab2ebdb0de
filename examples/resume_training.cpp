// Checkpoints: a compiled whole training step (forward, backward, AdamW, a warm-up schedule
// computed in the graph) saves a checkpoint every 10 steps; a "restarted" process (a new
// model and optimizer) loads the latest and goes on. Its last 10 steps equal those of a run
// that never stopped (exit 0 when they do).
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include <rcjit/rcjit.h>

using namespace rcjit;

struct Mlp : nn::Module<Mlp> {
  nn::Linear fc1, fc2;
  explicit Mlp(uint64_t seed) : fc1(8, 32, true, seed), fc2(32, 4, true, seed + 1) {
    register_module("fc1", fc1);
    register_module("fc2", fc2);
  }
  Tensor forward(const Tensor &x) { return fc2(relu(fc1(x))); }
};

Tensor batch(int step) { return Tensor::randn({16, 8}, 100 + static_cast<uint64_t>(step)); }
Tensor labels(int step) { return sum(relu(batch(step)).reshape({16, 2, 4}), {1}); }

// Trains steps [first, last) of the stream; every 10th step count saves `path` (when given).
std::vector<double> train(Mlp &net, optim::AdamW &opt, int first, int last,
                          const std::string &path) {
  auto step = compile([&](const Tensor &x, const Tensor &y, const Tensor &i) {
    opt.set_lr(minimum((i + 1.0) / 5.0, 1.0) * 1e-2); // warm-up over 5 steps, in the graph
    opt.zero_grad();
    Tensor loss = mse_loss(net(x), y);
    loss.backward();
    opt.step();
    return loss.detach();
  });
  std::vector<double> losses;
  for (int i = first; i < last; ++i) {
    losses.push_back(step(batch(i), labels(i), Tensor::full({}, i)).item());
    if (!path.empty() && (i + 1) % 10 == 0) { // between calls, never inside one
      save_checkpoint(path, net, opt, {{"step", std::to_string(i + 1)}});
    }
  }
  return losses;
}

int main() {
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("rcjit_resume_" + std::to_string(::getpid()) + ".safetensors"))
                               .string();
  Mlp straight(1);
  optim::AdamW straightOpt(straight.parameters());
  const std::vector<double> want = train(straight, straightOpt, 0, 30, "");

  {
    Mlp net(1);
    optim::AdamW opt(net.parameters());
    train(net, opt, 0, 25, path); // "dies" after step 25: the checkpoint holds step 20
  }
  Mlp net(42); // a new process: other weights, an optimizer with no state yet
  optim::AdamW opt(net.parameters());
  const int from = std::stoi(load_checkpoint(path, net, opt).at("step"));
  const std::vector<double> got = train(net, opt, from, 30, "");
  std::filesystem::remove(path);
  double worst = 0;
  for (int i = 0; i < 30 - from; ++i) {
    worst = std::max(worst, std::abs(got[i] - want[from + i]) / std::abs(want[from + i]));
  }
  std::printf("resumed at step %d: loss %.5f -> %.5f, largest difference from the run that "
              "never stopped %.2g (relative)\n",
              from, got.front(), got.back(), worst);
  return from == 20 && worst < 1e-5 ? 0 : 1;
}
