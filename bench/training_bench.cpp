// Training steps: eager autograd vs a compiled training entry (forward + backward programs),
// forward + backward + AdamW on a GPT-2 configuration, alternating inside each iteration so
// machine drift hits both alike. Counters: eager_ms, compiled_ms, eager/compiled, the first
// compiled step's extra time (the compile) in compile_ms, and each mode's peak tensor memory
// over forward + backward (memory_stats, MiB; compiled arenas included). Args: layers, batch, seq.
#include <benchmark/benchmark.h>

#include <chrono>

#include <rcjit/rcjit.h>

#include "tools/ModelGpt2.h"
#include "tools/Models.h"

using namespace rcjit;

namespace {

double msSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

void BM_Gpt2TrainStepEagerVsCompiled(benchmark::State &state) {
  tools::ModelConfig c;
  c.layers = static_cast<int>(state.range(0));
  c.batch = state.range(1);
  c.seq = state.range(2);
  auto model = tools::findModel("gpt2").build(c);
  std::vector<Tensor> in = model->makeInputs(c);
  Tensor targets = in[0]; // predict the inputs back: the numbers, not the task, matter here
  auto loss = [&](const Tensor &ids, const Tensor &tg) {
    return cross_entropy(model->forward({ids}), tg);
  };
  auto compiled = compile(loss);
  optim::AdamW opt(model->module().parameters(), {.lr = 1e-4});
  double peak[2] = {0, 0}; // MiB: eager, compiled
  auto step = [&](bool useCompiled) {
    opt.zero_grad();
    reset_peak_memory_stats();
    auto t0 = std::chrono::steady_clock::now();
    Tensor l = useCompiled ? compiled(in[0], targets) : loss(in[0], targets);
    l.backward();
    // forward + backward: the optimizer's update is the same in both modes
    peak[useCompiled] = static_cast<double>(memory_stats().peak_bytes) / (1 << 20);
    opt.step();
    return msSince(t0);
  };
  step(false);
  double first = step(true), warm = step(true);
  double eager = 0, comp = 0;
  for (auto _ : state) {
    eager += step(false);
    comp += step(true);
  }
  double n = static_cast<double>(state.iterations());
  state.counters["eager_ms"] = eager / n;
  state.counters["compiled_ms"] = comp / n;
  state.counters["eager/compiled"] = eager / comp;
  state.counters["compile_ms"] = first - warm;
  state.counters["eager_peak_MiB"] = peak[0];
  state.counters["compiled_peak_MiB"] = peak[1];
}
BENCHMARK(BM_Gpt2TrainStepEagerVsCompiled)
    ->Args({2, 4, 128})
    ->Args({12, 4, 128})
    ->Unit(benchmark::kMillisecond)
    ->Iterations(3)
    ->UseRealTime();

} // namespace

BENCHMARK_MAIN();
