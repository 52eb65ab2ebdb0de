// Training steps: eager autograd vs compiled training entries (forward + backward programs;
// full mode and regional mode), forward + backward + AdamW on a GPT-2 configuration, the
// three alternating inside each iteration so machine drift hits them alike. Counters:
// eager_ms, compiled_ms (full), regional_ms, eager/compiled, eager/regional, the first
// compiled step's extra time (the compile) in compile_ms and regional_compile_ms, and each
// mode's peak tensor memory over forward + backward (memory_stats, MiB; compiled arenas
// included). Args: layers, batch, seq.
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
  auto full = compile(loss);
  CompileOptions ro;
  ro.mode = Mode::regional;
  auto regional = compile(loss, ro);
  optim::AdamW opt(model->module().parameters(), {.lr = 1e-4});
  enum { kEager, kFull, kRegional };
  double peak[3] = {0, 0, 0}; // MiB
  auto step = [&](int mode) {
    opt.zero_grad();
    reset_peak_memory_stats();
    auto t0 = std::chrono::steady_clock::now();
    Tensor l = mode == kFull       ? full(in[0], targets)
               : mode == kRegional ? regional(in[0], targets)
                                   : loss(in[0], targets);
    l.backward();
    // forward + backward: the optimizer's update is the same in every mode
    peak[mode] = static_cast<double>(memory_stats().peak_bytes) / (1 << 20);
    opt.step();
    return msSince(t0);
  };
  step(kEager);
  double first = step(kFull), warm = step(kFull);
  double firstRegional = step(kRegional), warmRegional = step(kRegional);
  double eager = 0, comp = 0, reg = 0;
  for (auto _ : state) {
    eager += step(kEager);
    comp += step(kFull);
    reg += step(kRegional);
  }
  double n = static_cast<double>(state.iterations());
  state.counters["eager_ms"] = eager / n;
  state.counters["compiled_ms"] = comp / n;
  state.counters["regional_ms"] = reg / n;
  state.counters["eager/compiled"] = eager / comp;
  state.counters["eager/regional"] = eager / reg;
  state.counters["compile_ms"] = first - warm;
  state.counters["regional_compile_ms"] = firstRegional - warmRegional;
  state.counters["eager_peak_MiB"] = peak[kEager];
  state.counters["compiled_peak_MiB"] = peak[kFull];
  state.counters["regional_peak_MiB"] = peak[kRegional];
}
BENCHMARK(BM_Gpt2TrainStepEagerVsCompiled)
    ->Args({2, 4, 128})
    ->Args({12, 4, 128})
    ->Unit(benchmark::kMillisecond)
    ->Iterations(3)
    ->UseRealTime();

} // namespace

BENCHMARK_MAIN();
