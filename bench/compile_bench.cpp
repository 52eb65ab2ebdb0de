// Compiled vs eager: per-call overhead (guards + dispatch) and toy64 inference.
//
// Overhead is measured as a ratio-free difference in one run: a compiled call of toy64
// (guards on 1 arg + 258 captured parameters, then the program) against running the same
// compiled program directly, at batch 1 x seq 1 where kernels are tiny.
#include <benchmark/benchmark.h>
#include <omp.h>

#include <oneapi/dnnl/dnnl.hpp>

#include <rcjit/rcjit.h>

#include "guards/GuardSet.h"
#include "jit/CompileGraph.h"
#include "models/Models.h"
#include "tracer/Tracer.h"

using namespace rcjit;

namespace {

void BM_EagerOneOp(benchmark::State &state) {
  Tensor x = Tensor::ones({1});
  for (auto _ : state) benchmark::DoNotOptimize(x + 1.0);
}
BENCHMARK(BM_EagerOneOp);

void BM_CompiledOneOp(benchmark::State &state) {
  Tensor x = Tensor::ones({1});
  auto cf = compile([](const Tensor &t) { return t + 1.0; });
  cf(x);
  for (auto _ : state) benchmark::DoNotOptimize(cf(x));
}
BENCHMARK(BM_CompiledOneOp);

std::unique_ptr<tools::Model> toy(int64_t batch, int64_t seq, std::vector<Tensor> &in) {
  tools::ModelConfig c;
  c.batch = batch;
  c.seq = seq;
  auto m = tools::findModel("toy64").build(c);
  in = m->makeInputs(c);
  return m;
}

void BM_Toy64Eager(benchmark::State &state) {
  rcjit::NoGradGuard noGrad; // inference: parameters require grad, record nothing
  std::vector<Tensor> in;
  auto m = toy(state.range(0), state.range(1), in);
  for (auto _ : state) benchmark::DoNotOptimize(m->forward(in));
}
BENCHMARK(BM_Toy64Eager)
    ->Args({1, 128})
    ->Args({4, 128})
    ->Args({1, 1})
    ->Unit(benchmark::kMicrosecond);

void BM_Toy64Compiled(benchmark::State &state) {
  rcjit::NoGradGuard noGrad; // inference: parameters require grad, record nothing
  std::vector<Tensor> in;
  auto m = toy(state.range(0), state.range(1), in);
  auto cf = compile([&](const std::vector<Tensor> &v) { return m->forward(v); });
  cf(in);
  for (auto _ : state) benchmark::DoNotOptimize(cf(in));
}
BENCHMARK(BM_Toy64Compiled)
    ->Args({1, 128})
    ->Args({4, 128})
    ->Args({1, 1})
    ->Unit(benchmark::kMicrosecond);

// The same program toy64 compiles to, run without guards or dispatch.
void BM_Toy64ProgramOnly(benchmark::State &state) {
  std::vector<Tensor> in;
  auto m = toy(state.range(0), state.range(1), in);
  Trace t = traceFunction(
      [&](const std::vector<Tensor> &v) { return std::vector<Tensor>{m->forward(v)}; }, in);
  std::vector<Tensor> inputs = t.args;
  inputs.insert(inputs.end(), t.captured.begin(), t.captured.end());
  std::vector<Shape> strides;
  std::vector<const Tensor *> ptrs;
  for (const Tensor &x : inputs) {
    strides.push_back(x.strides());
    ptrs.push_back(&x);
  }
  CompileRequest r;
  r.moduleId = "bench_toy64";
  r.samples.push_back({t.graph, strides});
  std::shared_ptr<Executable> cp = compileGraph(std::move(r)).executable;
  for (auto _ : state) benchmark::DoNotOptimize(cp->run(ptrs.data(), ptrs.size()));
}
BENCHMARK(BM_Toy64ProgramOnly)->Args({1, 1})->Unit(benchmark::kMicrosecond);

// Guard checking alone for toy64's 259 inputs (1 argument, 258 captured parameters).
void BM_Toy64GuardCheck(benchmark::State &state) {
  std::vector<Tensor> in;
  auto m = toy(1, 1, in);
  Trace t = traceFunction(
      [&](const std::vector<Tensor> &v) { return std::vector<Tensor>{m->forward(v)}; }, in);
  std::vector<Tensor> inputs = t.args;
  inputs.insert(inputs.end(), t.captured.begin(), t.captured.end());
  GuardSet g = GuardSet::fromInputs(inputs, {}, t.args.size());
  Tensor fresh = Tensor::randn(in[0].shape(), 9); // a new argument: checked field by field
  std::vector<const Tensor *> ptrs;
  ptrs.push_back(&fresh);
  for (size_t i = 1; i < inputs.size(); ++i) ptrs.push_back(&inputs[i]);
  for (auto _ : state) benchmark::DoNotOptimize(g.check(ptrs.data(), ptrs.size()));
}
BENCHMARK(BM_Toy64GuardCheck)->Unit(benchmark::kNanosecond);

constexpr int64_t kChainN = 16 << 20;

// 8 fused elementwise ops (mul add mul sub relu mul add minimum): reads x and y once,
// writes once (12 bytes per element), so it is memory-bound like the triad.
void BM_FusedChain8Compiled(benchmark::State &state) {
  Tensor x = Tensor::randn({kChainN}, 1), y = Tensor::randn({kChainN}, 2);
  auto cf = compile([](const Tensor &a, const Tensor &b) {
    return minimum(relu((a * 2.0 + 1.0) * b - 0.25) * 0.5 + a, 4.0);
  });
  cf(x, y);
  for (auto _ : state) benchmark::DoNotOptimize(cf(x, y));
  state.SetBytesProcessed(state.iterations() * kChainN * 12);
}
// The same traffic with transcendentals (sigmoid, tanh): compute-bound on 2 cores.
void BM_FusedChainTranscendental(benchmark::State &state) {
  Tensor x = Tensor::randn({kChainN}, 1), y = Tensor::randn({kChainN}, 2);
  auto cf = compile([](const Tensor &a, const Tensor &b) {
    return relu(sigmoid(a * 2.0 + 1.0) * b - 0.25) + tanh(a) * 0.5;
  });
  cf(x, y);
  for (auto _ : state) benchmark::DoNotOptimize(cf(x, y));
  state.SetBytesProcessed(state.iterations() * kChainN * 12);
}
BENCHMARK(BM_FusedChainTranscendental)->Unit(benchmark::kMillisecond)->UseRealTime();

// The 8-op chain run eagerly: 8 passes over memory and 8 allocations.
void BM_Chain8Eager(benchmark::State &state) {
  Tensor a = Tensor::randn({kChainN}, 1), b = Tensor::randn({kChainN}, 2);
  for (auto _ : state) {
    benchmark::DoNotOptimize(minimum(relu((a * 2.0 + 1.0) * b - 0.25) * 0.5 + a, 4.0));
  }
  state.SetBytesProcessed(state.iterations() * kChainN * 12);
}
BENCHMARK(BM_Chain8Eager)->Unit(benchmark::kMillisecond)->UseRealTime();

BENCHMARK(BM_FusedChain8Compiled)->Unit(benchmark::kMillisecond)->UseRealTime();

// STREAM triad over preallocated arrays, all threads: the bandwidth reference.
void BM_TriadLoop(benchmark::State &state) {
  std::vector<float> a(kChainN), b(kChainN, 1.f), c(kChainN, 2.f);
  float *pa = a.data();
  const float *pb = b.data(), *pc = c.data();
  for (auto _ : state) {
#pragma omp parallel for
    for (int64_t i = 0; i < kChainN; ++i) pa[i] = pb[i] + 3.f * pc[i];
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * kChainN * 12);
}
BENCHMARK(BM_TriadLoop)->Unit(benchmark::kMillisecond)->UseRealTime();

constexpr int64_t kLinM = 1024, kLinK = 4096, kLinN = 4096;

void BM_LinearCompiled4096(benchmark::State &state) {
  Tensor x = Tensor::randn({kLinM, kLinK}, 1), w = Tensor::randn({kLinN, kLinK}, 2);
  Tensor b = Tensor::randn({kLinN}, 3);
  auto cf = compile([&](const Tensor &t) { return linear(t, w, b); });
  cf(x);
  for (auto _ : state) benchmark::DoNotOptimize(cf(x));
  state.counters["GFLOP/s"] = benchmark::Counter(
      2.0 * kLinM * kLinK * kLinN * state.iterations() / 1e9, benchmark::Counter::kIsRate);
}
BENCHMARK(BM_LinearCompiled4096)->Unit(benchmark::kMillisecond)->UseRealTime();

// The same linear as one oneDNN matmul primitive with bias, created once, output preallocated.
void BM_DnnlLinearDirect4096(benchmark::State &state) {
  using dnnl::memory;
  dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  dnnl::stream strm(eng);
  memory::desc src({kLinM, kLinK}, memory::data_type::f32, memory::format_tag::ab);
  memory::desc wei({kLinK, kLinN}, memory::data_type::f32, memory::format_tag::ba);
  memory::desc bias({1, kLinN}, memory::data_type::f32, memory::format_tag::ab);
  memory::desc dst({kLinM, kLinN}, memory::data_type::f32, memory::format_tag::ab);
  dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(src, wei, bias, dst), eng);
  dnnl::matmul prim(pd);
  Tensor x = Tensor::randn({kLinM, kLinK}, 1), w = Tensor::randn({kLinN, kLinK}, 2);
  Tensor b = Tensor::randn({kLinN}, 3), y = Tensor::empty({kLinM, kLinN});
  memory ms(src, eng, x.data_ptr()), mw(wei, eng, w.data_ptr()), mb(bias, eng, b.data_ptr()),
      md(dst, eng, y.data_ptr());
  for (auto _ : state) {
    prim.execute(
        strm,
        {{DNNL_ARG_SRC, ms}, {DNNL_ARG_WEIGHTS, mw}, {DNNL_ARG_BIAS, mb}, {DNNL_ARG_DST, md}});
    strm.wait();
  }
  state.counters["GFLOP/s"] = benchmark::Counter(
      2.0 * kLinM * kLinK * kLinN * state.iterations() / 1e9, benchmark::Counter::kIsRate);
}
BENCHMARK(BM_DnnlLinearDirect4096)->Unit(benchmark::kMillisecond)->UseRealTime();

} // namespace

BENCHMARK_MAIN();
