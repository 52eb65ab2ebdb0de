// Eager-target kernels next to what the machine does without rcjit: matmul against a
// direct dnnl_sgemm, elementwise add against a STREAM triad loop, a conv2d's two gradients
// against its forward (the same multiply-adds each).
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

/// conv2d's forward (arg 0), input gradient (1) or weight gradient (2) on the shape `arg 1`
/// picks: 0 a ViT patch embedding (8 x 3 x 224 x 224, 768 16x16 filters, stride 16), 1 a
/// ResNet block (8 x 64 x 56 x 56, 64 3x3 filters, padding 1). Each pass is the same
/// number of multiply-adds.
void BM_EagerConv2d(benchmark::State &state) {
  const bool patch = state.range(1) == 0;
  const rcjit::Shape xs = patch ? rcjit::Shape{8, 3, 224, 224} : rcjit::Shape{8, 64, 56, 56};
  const rcjit::Shape ws = patch ? rcjit::Shape{768, 3, 16, 16} : rcjit::Shape{64, 64, 3, 3};
  const int64_t stride = patch ? 16 : 1, pad = patch ? 0 : 1;
  rcjit::Tensor x = rcjit::Tensor::randn(xs, 1), w = rcjit::Tensor::randn(ws, 2);
  rcjit::Tensor y = rcjit::conv2d(x, w, rcjit::Tensor(), stride, pad);
  rcjit::Tensor g = rcjit::Tensor::randn(y.shape(), 3);
  for (auto _ : state) {
    rcjit::Tensor r = state.range(0) == 0   ? rcjit::conv2d(x, w, rcjit::Tensor(), stride, pad)
                      : state.range(0) == 1 ? rcjit::conv2d_backward_input(g, w, xs, stride, pad)
                                            : rcjit::conv2d_backward_weight(g, x, ws, stride, pad);
    benchmark::DoNotOptimize(r.data_ptr());
  }
  setFlops(state, 2.0 * static_cast<double>(y.numel()) * static_cast<double>(w.numel() / ws[0]));
}

BENCHMARK(BM_EagerMatmul)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_DnnlSgemm)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_MatmulOutputAlloc)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_EagerAdd16M)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_TriadLoop16M)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_EagerConv2d)
    ->ArgNames({"pass", "shape"})
    ->ArgsProduct({{0, 1, 2}, {0, 1}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

} // namespace

BENCHMARK_MAIN();
