// The regional-compilation recipe: 64 identical layers, full vs regional compile time.
#include <rcjit/rcjit.h>

#include <chrono>
#include <cstdio>

using namespace rcjit;

struct Layer : nn::Module<Layer> {
  nn::Linear linear1, linear2;
  explicit Layer(uint64_t seed) : linear1(10, 10, true, seed), linear2(10, 10, true, seed + 1) {
    register_module("linear1", linear1);
    register_module("linear2", linear2);
  }
  Tensor forward(const Tensor &x) { return relu(linear2(sigmoid(relu(linear1(x))))); }
};

struct Model : nn::Module<Model> {
  nn::Linear linear{10, 10, true, 0};
  nn::ModuleList<Layer> layers;
  Model() {
    for (int i = 0; i < 64; ++i) layers.emplace_back(2 * i + 1);
    register_module("linear", linear);
    register_module("layers", layers);
  }
  Tensor forward(Tensor x) {
    x = linear(x);
    for (Layer &l : layers) x = l(x);
    return x;
  }
};

double firstCallMs(Mode mode, int64_t rows) {
  Model model; // fresh parameters: nothing shared with the other mode's model
  CompileOptions opts;
  opts.mode = mode;
  auto compiled = compile(model, opts);
  Tensor x = Tensor::randn({rows, 10}, 42);
  auto t0 = std::chrono::steady_clock::now();
  Tensor y = compiled(x);
  double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  CompileStats s = compiled.stats();
  std::printf("%-8s first call %8.2f ms  compiles %3d  cache hits %3d  matches eager: %s\n",
              mode == Mode::full ? "full" : "regional", ms, s.compiles, s.cache_hits,
              allclose(y, model(x), 1e-4, 1e-5) ? "yes" : "no");
  return ms;
}

int main() {
  rcjit::NoGradGuard noGrad; // inference: parameters require grad, record nothing
  // distinct row counts so the regional run cannot reuse the full run's compiled code
  double full = firstCallMs(Mode::full, 10);
  double regional = firstCallMs(Mode::regional, 11);
  std::printf("regional / full first-call time: %.2f\n", regional / full);
  return 0;
}
