// The CUDA target against the device's own limits, measured in one run:
//   - a fused 8-op elementwise chain over 64M floats (compiled, Target::cuda) vs the device's
//     copy bandwidth (cuMemcpyDtoD of the same buffer): GB/s counters, bytes moved / time;
//   - linear through rcjit (compiled, cuBLAS inside) vs a direct cuBLAS call of the same GEMM.
// Without a GPU it says so and exits 0. Run: build/bench/cuda_bench
// --benchmark_counters_tabular=true
#include <benchmark/benchmark.h>

#include <iostream>

#include <rcjit/rcjit.h>

#include "targets/cuda/Cublas.h"
#include "targets/cuda/CudaRuntime.h"

namespace {

using namespace rcjit;

constexpr int64_t kN = int64_t{64} << 20; // elements
constexpr int64_t kM = 4096, kK = 4096, kNOut = 4096;

cuda::DeviceContext &ctx() { return cuda::DeviceContext::get(0); }
CUdeviceptr ptr(const Tensor &t) { return reinterpret_cast<CUdeviceptr>(t.data_ptr()); }

void setBandwidth(benchmark::State &state, double bytesPerIter) {
  state.counters["GB/s"] = benchmark::Counter(
      bytesPerIter * static_cast<double>(state.iterations()) / 1e9, benchmark::Counter::kIsRate);
}

void BM_DeviceCopy(benchmark::State &state) {
  Tensor a = Tensor::full({kN}, 0.5, DType::f32, Device::cuda());
  Tensor b = Tensor::empty({kN}, DType::f32, Device::cuda());
  for (auto _ : state) {
    ctx().copyOnDevice(ptr(b), ptr(a), kN * sizeof(float));
    ctx().synchronize();
  }
  setBandwidth(state, 2.0 * kN * sizeof(float)); // read + write
}
BENCHMARK(BM_DeviceCopy)->Unit(benchmark::kMillisecond)->UseRealTime();

// y = sqrt(|exp(tanh(a*b + 0.5) * a) - b|): two loads and one store per element.
void BM_FusedChain(benchmark::State &state) {
  Tensor a = Tensor::full({kN}, 0.5, DType::f32, Device::cuda());
  Tensor b = Tensor::full({kN}, 1.25, DType::f32, Device::cuda());
  CompileOptions o;
  o.target = Target::cuda;
  auto fn = compile(
      [](const Tensor &x, const Tensor &y) { return sqrt(abs(exp(tanh(x * y + 0.5) * x) - y)); },
      o);
  fn(a, b);
  ctx().synchronize();
  for (auto _ : state) {
    Tensor r = fn(a, b);
    ctx().synchronize();
  }
  setBandwidth(state, 3.0 * kN * sizeof(float));
}
BENCHMARK(BM_FusedChain)->Unit(benchmark::kMillisecond)->UseRealTime();

void setFlops(benchmark::State &state) {
  state.counters["TFLOP/s"] =
      benchmark::Counter(2.0 * kM * kK * kNOut * static_cast<double>(state.iterations()) / 1e12,
                         benchmark::Counter::kIsRate);
}

void BM_LinearRcjit(benchmark::State &state) {
  Tensor x = Tensor::randn({kM, kK}, 1).to(Device::cuda());
  Tensor w = Tensor::randn({kNOut, kK}, 2).to(Device::cuda());
  CompileOptions o;
  o.target = Target::cuda;
  auto fn = compile([&w](const Tensor &in) { return linear(in, w); }, o);
  fn(x);
  ctx().synchronize();
  for (auto _ : state) {
    Tensor r = fn(x);
    ctx().synchronize();
  }
  setFlops(state);
}
BENCHMARK(BM_LinearRcjit)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_LinearCublasDirect(benchmark::State &state) {
  Tensor x = Tensor::randn({kM, kK}, 1).to(Device::cuda());
  Tensor w = Tensor::randn({kNOut, kK}, 2).to(Device::cuda());
  Tensor y = Tensor::empty({kM, kNOut}, DType::f32, Device::cuda());
  cuda::CublasHandle h(ctx().stream());
  cuda::GemmDesc d; // y = x w^T, row-major
  d.m = kM;
  d.n = kNOut;
  d.k = kK;
  d.a = {kK, 1, 0};
  d.b = {1, kK, 0};
  d.c = {kNOut, 1, 0};
  for (auto _ : state) {
    cuda::runGemm(h.get(), d, x.data_ptr(), w.data_ptr(), y.data_ptr(), ctx().stream());
    ctx().synchronize();
  }
  setFlops(state);
}
BENCHMARK(BM_LinearCublasDirect)->Unit(benchmark::kMillisecond)->UseRealTime();

} // namespace

int main(int argc, char **argv) {
  if (!cuda_available()) {
    std::cout << "cuda_bench: skipped, no CUDA GPU (" << cuda::unavailableReason() << ")\n";
    return 0;
  }
  std::cout << "device: " << ctx().info().name << " (" << ctx().info().arch << ")\n";
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
