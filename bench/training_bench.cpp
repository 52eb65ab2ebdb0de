// Training steps: eager autograd vs compiled training entries (forward + backward programs;
// full mode and regional mode), forward + backward + AdamW on a GPT-2 configuration, the
// three alternating inside each iteration so machine drift hits them alike. Counters:
// eager_ms, compiled_ms (full), regional_ms, eager/compiled, eager/regional, the first
// compiled step's extra time (the compile) in compile_ms and regional_compile_ms, and each
// mode's peak tensor memory over forward + backward (memory_stats, MiB; compiled arenas
// included). Args: layers, batch, seq.
#include <benchmark/benchmark.h>

#include <chrono>
#include <cmath>

#include <rcjit/rcjit.h>

#include "autograd/Autograd.h"
#include "models/ModelGpt2.h"
#include "models/Models.h"

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

// AdamW over 10 x Linear(1024, 1024) (20 tensors, 10.5 M parameters), PyTorch's compiled
// optimizer recipe: the eager step (one fused pass per parameter, like torch's fused=True),
// the same update one op at a time (what torch's eager foreach step does: a temporary per
// op), and the step traced inside rcjit::compile (every update generated code, written back
// after each call), alternating inside each iteration. Counters: each mode's ms, the
// ratios, and the bandwidth the fused and compiled steps reach (7 floats moved per
// parameter) next to a STREAM triad measured in the same run.
void BM_AdamW10Linear1024(benchmark::State &state) {
  std::vector<Tensor> fused, ops, compiled;
  for (int i = 0; i < 10; ++i) {
    for (Shape shape : {Shape{1024, 1024}, Shape{1024}}) {
      for (auto *list : {&fused, &ops, &compiled}) {
        list->push_back(Tensor::randn(shape, 2 * i + shape.size()));
        list->back().requires_grad_();
      }
    }
  }
  for (auto *list : {&fused, &ops, &compiled}) {
    for (Tensor &p : *list) autograd::setGrad(p, Tensor::randn(p.shape(), 7) * 1e-2);
  }
  optim::AdamW fusedOpt(fused), compiledOpt(compiled);
  auto compiledStep = compile([&]() {
    compiledOpt.step();
    return std::vector<Tensor>{};
  });
  // op by op: the formula of optim::AdamW with a temporary per op
  const optim::AdamWOptions o;
  std::vector<Tensor> m, v;
  for (const Tensor &p : ops) {
    m.push_back(Tensor::zeros(p.shape()));
    v.push_back(Tensor::zeros(p.shape()));
  }
  int t = 0;
  auto opsStep = [&] {
    NoGradGuard noGrad;
    ++t;
    const double bc1 = 1 - std::pow(o.beta1, t), bc2 = 1 - std::pow(o.beta2, t);
    for (size_t i = 0; i < ops.size(); ++i) {
      Tensor g = ops[i].grad();
      m[i] = o.beta1 * m[i] + (1 - o.beta1) * g;
      v[i] = o.beta2 * v[i] + (1 - o.beta2) * (g * g);
      Tensor denom = sqrt(v[i]) / std::sqrt(bc2) + o.eps;
      ops[i].copy_(ops[i] * (1 - o.lr * o.weight_decay) - (o.lr / bc1) * m[i] / denom);
    }
  };
  auto timed = [](auto &&f) {
    auto t0 = std::chrono::steady_clock::now();
    f();
    return msSince(t0);
  };
  const int64_t n = 10 * (1024 * 1024 + 1024);
  // STREAM triad over preallocated arrays, all threads (a compiled `x + 3 * y` would
  // allocate and first-touch its output every call and understate the machine's limit)
  std::vector<float> a(n, 1.f), b(n, 2.f), c(n, 0.f);
  auto triad = [&] {
    float *pc = c.data();
    const float *pa = a.data(), *pb = b.data();
#pragma omp parallel for
    for (int64_t i = 0; i < n; ++i) pc[i] = pa[i] + 3.f * pb[i];
    benchmark::ClobberMemory();
  };
  double firstCompiled = timed([&] { compiledStep(); });
  fusedOpt.step();
  opsStep();
  triad();
  double f = 0, op = 0, comp = 0, tr = 0;
  for (auto _ : state) {
    f += timed([&] { fusedOpt.step(); });
    op += timed(opsStep);
    comp += timed([&] { compiledStep(); });
    tr += timed(triad);
  }
  const double iters = static_cast<double>(state.iterations());
  state.counters["eager_fused_ms"] = f / iters;
  state.counters["eager_op_by_op_ms"] = op / iters;
  state.counters["compiled_ms"] = comp / iters;
  state.counters["op_by_op/compiled"] = op / comp;
  state.counters["fused/compiled"] = f / comp;
  state.counters["compile_ms"] = firstCompiled - comp / iters;
  state.counters["fused_GBps"] = 7.0 * 4 * static_cast<double>(n) / (f / iters * 1e6);
  state.counters["compiled_GBps"] = 7.0 * 4 * static_cast<double>(n) / (comp / iters * 1e6);
  state.counters["triad_GBps"] = 3.0 * 4 * static_cast<double>(n) / (tr / iters * 1e6);
  if (!allclose(fused[0], compiled[0], 1e-4, 1e-6) || !allclose(fused[0], ops[0], 1e-4, 1e-6))
    state.SkipWithError("the three AdamW steps disagree");
}
BENCHMARK(BM_AdamW10Linear1024)->Unit(benchmark::kMillisecond)->Iterations(20)->UseRealTime();

} // namespace

BENCHMARK_MAIN();
