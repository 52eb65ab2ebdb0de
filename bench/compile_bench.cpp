// Compiled vs eager: per-call overhead (guards + dispatch) and toy64 inference.
//
// Overhead is measured as a ratio-free difference in one run: a compiled call of toy64
// (guards on 1 arg + 258 captured parameters, then the program) against running the same
// compiled program directly, at batch 1 x seq 1 where kernels are tiny.
#include <benchmark/benchmark.h>

#include <rcjit/rcjit.h>

#include "jit/Pipeline.h"
#include "targets/Lower.h"
#include "targets/cpu/CpuProgram.h"
#include "tools/Models.h"
#include "tracer/Tracer.h"

using namespace rcjit;

namespace {

void BM_EagerOneOp(benchmark::State& state) {
  Tensor x = Tensor::ones({1});
  for (auto _ : state) benchmark::DoNotOptimize(x + 1.0);
}
BENCHMARK(BM_EagerOneOp);

void BM_CompiledOneOp(benchmark::State& state) {
  Tensor x = Tensor::ones({1});
  auto cf = compile([](const Tensor& t) { return t + 1.0; });
  cf(x);
  for (auto _ : state) benchmark::DoNotOptimize(cf(x));
}
BENCHMARK(BM_CompiledOneOp);

std::unique_ptr<tools::Model> toy(int64_t batch, int64_t seq, std::vector<Tensor>& in) {
  tools::ModelConfig c;
  c.batch = batch;
  c.seq = seq;
  auto m = tools::findModel("toy64").build(c);
  in = m->makeInputs(c);
  return m;
}

void BM_Toy64Eager(benchmark::State& state) {
  std::vector<Tensor> in;
  auto m = toy(state.range(0), state.range(1), in);
  for (auto _ : state) benchmark::DoNotOptimize(m->forward(in));
}
BENCHMARK(BM_Toy64Eager)->Args({1, 128})->Args({4, 128})->Args({1, 1})->Unit(benchmark::kMicrosecond);

void BM_Toy64Compiled(benchmark::State& state) {
  std::vector<Tensor> in;
  auto m = toy(state.range(0), state.range(1), in);
  auto cf = compile([&](const std::vector<Tensor>& v) { return m->forward(v); });
  cf(in);
  for (auto _ : state) benchmark::DoNotOptimize(cf(in));
}
BENCHMARK(BM_Toy64Compiled)->Args({1, 128})->Args({4, 128})->Args({1, 1})->Unit(benchmark::kMicrosecond);

// The same program toy64 compiles to, run without guards or dispatch.
void BM_Toy64ProgramOnly(benchmark::State& state) {
  std::vector<Tensor> in;
  auto m = toy(state.range(0), state.range(1), in);
  Trace t = traceFunction([&](const std::vector<Tensor>& v) { return std::vector<Tensor>{m->forward(v)}; }, in);
  std::vector<Tensor> inputs = t.args;
  inputs.insert(inputs.end(), t.captured.begin(), t.captured.end());
  std::vector<Shape> strides;
  std::vector<const Tensor*> ptrs;
  for (const Tensor& x : inputs) {
    strides.push_back(x.strides());
    ptrs.push_back(&x);
  }
  Program p = lower(runPipeline(t.graph, defaultPasses(PipelineOptions{})), strides);
  auto cp = cpu::CpuProgram::create(std::move(p), "bench_toy64");
  for (auto _ : state) benchmark::DoNotOptimize(cp->run(ptrs.data(), ptrs.size()));
}
BENCHMARK(BM_Toy64ProgramOnly)->Args({1, 1})->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
