// The regional-compilation recipe: 64 identical layers, full vs regional compile time.
#include <rcjit/rcjit.h>

#include "toy64.h"

#include <chrono>
#include <cstdio>

using namespace rcjit;

double firstCallMs(Mode mode, int64_t rows) {
  Toy64 model; // fresh parameters: nothing shared with the other mode's model
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
