// Loop-kernel code generation speed vs memory bandwidth: a fused 8-op f32 chain vs STREAM triad.
//
// Both move 12 bytes per element (two loads, one store) over 16M floats, split over the same
// number of OpenMP threads, so chain/triad bandwidth is the fraction of peak the generated
// code reaches. Run: build/bench/codegen_bench --benchmark_counters_tabular=true
#include <benchmark/benchmark.h>
#include <omp.h>

#include <vector>

#include "targets/LoopKernel.h"
#include "targets/cpu/CpuKernels.h"

namespace {

using rcjit::DType;
using rcjit::KernelStmt;
using rcjit::OpKind;
using rcjit::SizeExpr;
using K = KernelStmt::Kind;

constexpr int64_t kN = 16 << 20;

// y = sqrt(|exp(tanh(a*b + 0.5) * a) - b|): mul add tanh mul exp sub abs sqrt.
rcjit::LoopKernel chainKernel() {
  rcjit::LoopKernel k;
  k.name = "chain8";
  k.domain = {SizeExpr::constant(kN)};
  k.numOuter = 1;
  for (int t = 0; t < 3; ++t) k.tensors.push_back({DType::f32, {SizeExpr::constant(1)}, t == 2});
  auto add = [&](KernelStmt s) {
    k.stmts.push_back(s);
    return static_cast<int>(k.stmts.size()) - 1;
  };
  auto op = [&](OpKind o, std::vector<int> args) {
    return add({K::compute, o, std::move(args), -1, DType::f32, 0});
  };
  int a = add({K::load, OpKind::add, {}, 0, DType::f32, 0});
  int b = add({K::load, OpKind::add, {}, 1, DType::f32, 0});
  int half = add({K::constant, OpKind::add, {}, -1, DType::f32, 0.5});
  int t = op(OpKind::tanh, {op(OpKind::add, {op(OpKind::mul, {a, b}), half})});
  t = op(OpKind::exp, {op(OpKind::mul, {t, a})});
  t = op(OpKind::sqrt, {op(OpKind::abs, {op(OpKind::sub, {t, b})})});
  add({K::store, OpKind::add, {t}, 2, DType::f32, 0});
  return k;
}

struct Buffers {
  std::vector<float> a, b, c;
  Buffers() : a(kN, 0.5f), b(kN, 1.25f), c(kN, 0.f) {
#pragma omp parallel for // first touch spread like the runs
    for (int64_t i = 0; i < kN; ++i) a[i] = 0.001f * static_cast<float>(i % 1000);
  }
};

Buffers &buffers() {
  static Buffers b;
  return b;
}

void finish(benchmark::State &state) {
  state.SetBytesProcessed(state.iterations() * kN * 3 * static_cast<int64_t>(sizeof(float)));
}

void BM_StreamTriad(benchmark::State &state) {
  int threads = static_cast<int>(state.range(0));
  Buffers &buf = buffers();
  float *a = buf.a.data();
  float *b = buf.b.data();
  float *c = buf.c.data();
  for (auto _ : state) {
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t i = 0; i < kN; ++i) c[i] = a[i] + 3.f * b[i];
    benchmark::ClobberMemory();
  }
  finish(state);
}

void BM_FusedChain8(benchmark::State &state) {
  int threads = static_cast<int>(state.range(0));
  static const rcjit::cpu::CpuCompiledKernels compiled =
      rcjit::cpu::compileKernels({chainKernel()}, "bench.chain8"); // keeps the code
  const rcjit::KernelFn fn = compiled.functions.at(0);
  Buffers &buf = buffers();
  char *ptrs[3] = {reinterpret_cast<char *>(buf.a.data()), reinterpret_cast<char *>(buf.b.data()),
                   reinterpret_cast<char *>(buf.c.data())};
  int64_t syms[1] = {0};
  for (auto _ : state) {
#pragma omp parallel num_threads(threads)
    {
      int64_t n = omp_get_num_threads(), t = omp_get_thread_num();
      fn(ptrs, syms, kN * t / n, kN * (t + 1) / n);
    }
    benchmark::ClobberMemory();
  }
  finish(state);
}

void BM_CompileChain8(benchmark::State &state) {
  int i = 0;
  for (auto _ : state) {
    rcjit::LoopKernel k = chainKernel();
    benchmark::DoNotOptimize(
        rcjit::cpu::compileKernels({k}, "bench.compile." + std::to_string(i++)));
  }
}

} // namespace

BENCHMARK(BM_StreamTriad)->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_FusedChain8)->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_CompileChain8)->Unit(benchmark::kMillisecond);

BENCHMARK_MAIN();
