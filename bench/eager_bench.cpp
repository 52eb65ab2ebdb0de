// Eager-target kernels next to what the machine does without rcjit: matmul against a
// direct dnnl_sgemm, elementwise add against a STREAM triad loop.
#include <cstdint>
#include <vector>

#include <benchmark/benchmark.h>
#include <oneapi/dnnl/dnnl.h>

#include <rcjit/rcjit.h>

namespace {

constexpr int64_t kDim = 1024;       // matmul M = N = K
constexpr int64_t kElems = 16 << 20; // 16M floats per elementwise operand
constexpr double kTriadBytes = 12.0; // two 4-byte reads and one 4-byte write per element

void setFlops(benchmark::State &state, double flopsPerIteration) {
  state.counters["FLOP/s"] =
      benchmark::Counter(flopsPerIteration, benchmark::Counter::kIsIterationInvariantRate,
                         benchmark::Counter::kIs1000);
}

void setBytes(benchmark::State &state, double bytesPerIteration) {
  state.counters["bytes/s"] =
      benchmark::Counter(bytesPerIteration, benchmark::Counter::kIsIterationInvariantRate,
                         benchmark::Counter::kIs1024);
}

void BM_EagerMatmul(benchmark::State &state) {
  rcjit::Tensor a = rcjit::Tensor::randn({kDim, kDim}, 1);
  rcjit::Tensor b = rcjit::Tensor::randn({kDim, kDim}, 2);
  for (auto _ : state) {
    rcjit::Tensor c = rcjit::matmul(a, b);
    benchmark::DoNotOptimize(c.data_ptr());
  }
  setFlops(state, 2.0 * kDim * kDim * kDim);
}

void BM_DnnlSgemm(benchmark::State &state) {
  std::vector<float> a = rcjit::Tensor::randn({kDim, kDim}, 1).to_vector<float>();
  std::vector<float> b = rcjit::Tensor::randn({kDim, kDim}, 2).to_vector<float>();
  std::vector<float> c(static_cast<size_t>(kDim * kDim));
  for (auto _ : state) {
    dnnl_sgemm('N', 'N', kDim, kDim, kDim, 1.0f, a.data(), kDim, b.data(), kDim, 0.0f, c.data(),
               kDim);
    benchmark::DoNotOptimize(c.data());
  }
  setFlops(state, 2.0 * kDim * kDim * kDim);
}

/// What eager matmul pays that the preallocated sgemm does not: a fresh 1024x1024 output,
/// every page touched once.
void BM_MatmulOutputAlloc(benchmark::State &state) {
  for (auto _ : state) {
    rcjit::Tensor c = rcjit::Tensor::empty({kDim, kDim});
    auto *p = static_cast<char *>(c.data_ptr());
    for (int64_t i = 0; i < kDim * kDim * 4; i += 4096) p[i] = 0;
    benchmark::DoNotOptimize(p);
  }
}

void BM_EagerAdd16M(benchmark::State &state) {
  rcjit::Tensor a = rcjit::Tensor::randn({kElems}, 1);
  rcjit::Tensor b = rcjit::Tensor::randn({kElems}, 2);
  for (auto _ : state) {
    rcjit::Tensor c = rcjit::add(a, b);
    benchmark::DoNotOptimize(c.data_ptr());
  }
  setBytes(state, kTriadBytes * kElems);
}

void BM_TriadLoop16M(benchmark::State &state) {
  std::vector<float> a(kElems), b(kElems), c(kElems);
  float *pa = a.data();
  const float *pb = b.data(), *pc = c.data();
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < kElems; ++i) { // first touch on the threads that use the pages
    a[i] = 0.0f;
    b[i] = 1.0f;
    c[i] = 2.0f;
  }
  const float s = 3.0f;
  for (auto _ : state) {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < kElems; ++i) pa[i] = pb[i] + s * pc[i];
    benchmark::DoNotOptimize(pa);
    benchmark::ClobberMemory();
  }
  setBytes(state, kTriadBytes * kElems);
}

BENCHMARK(BM_EagerMatmul)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_DnnlSgemm)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_MatmulOutputAlloc)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_EagerAdd16M)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_TriadLoop16M)->Unit(benchmark::kMillisecond)->UseRealTime();

} // namespace

BENCHMARK_MAIN();
