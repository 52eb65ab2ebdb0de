// Dynamic shapes: what a mark_dynamic sequence dim costs against static compiles.
//
// (i)  The caption decoder (examples/caption_decoder.h) at seq 64/128/256: compiled with
//      Dynamic::never, one compiled function per length, warmed at that length; against one
//      compiled function whose ids carry mark_dynamic on the sequence dim, shared by every
//      length and warmed once per length before timing (a no-op when one symbolic entry serves
//      every length), so neither timing includes compiling. Counters: static_ms, dynamic_ms
//      (per call), dyn/static, and dyn_entries (the dynamic function's compiles so far).
// (ii) Per-call overhead of a one-op function (x + 1 on [4, 8]): eager, compiled with static
//      guards, compiled with a mark_dynamic dim; and the same with two sizes alternating
//      (static guards: two entries, the second found after the first's guards fail).
// (iii) A shape storm: x [s, 8] @ w [8, 8] with a new s on every call (up to 16384 sizes),
//      eager (a oneDNN primitive per new shape) vs compiled with s symbolic.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>

#include <rcjit/rcjit.h>

#include "examples/caption_decoder.h"

using namespace rcjit;

namespace {

Tensor tokens(int64_t seq, bool dynamic) {
  std::vector<int64_t> ids(static_cast<size_t>(seq));
  for (int64_t i = 0; i < seq; ++i) ids[static_cast<size_t>(i)] = (i * 7919 + 13) % caption::kVocab;
  Tensor t = Tensor::from_vector(ids, {1, seq});
  if (dynamic) mark_dynamic(t, 1, 2, caption::kContext);
  return t;
}

caption::Decoder &decoder() {
  static caption::Decoder model;
  return model;
}

void BM_DecoderEager(benchmark::State &state) {
  rcjit::NoGradGuard noGrad; // inference: parameters require grad, record nothing
  Tensor ids = tokens(state.range(0), false);
  decoder()(ids);
  for (auto _ : state) benchmark::DoNotOptimize(decoder()(ids));
}
BENCHMARK(BM_DecoderEager)
    ->Arg(64)
    ->Arg(128)
    ->Arg(256)
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

// Each iteration calls the static and the dynamic function once, timing each, so machine
// drift hits both alike; the benchmark's own time is their sum.
void BM_DecoderStaticVsDynamic(benchmark::State &state) {
  static auto dynamicFn = compile(decoder()); // one function for every length
  CompileOptions opts;
  opts.dynamic = Dynamic::never;
  auto staticFn = compile(decoder(), opts); // one function per length
  Tensor fixed = tokens(state.range(0), false), marked = tokens(state.range(0), true);
  staticFn(fixed);   // compiles this length's entry
  dynamicFn(marked); // a no-op if the symbolic entry serves it; else a new static entry
  using Clock = std::chrono::steady_clock;
  Clock::duration st{}, dy{};
  for (auto _ : state) {
    auto t0 = Clock::now();
    benchmark::DoNotOptimize(staticFn(fixed));
    auto t1 = Clock::now();
    benchmark::DoNotOptimize(dynamicFn(marked));
    dy += Clock::now() - t1;
    st += t1 - t0;
  }
  double n = static_cast<double>(std::max<benchmark::IterationCount>(state.iterations(), 1));
  double staticMs = std::chrono::duration<double, std::milli>(st).count() / n;
  double dynamicMs = std::chrono::duration<double, std::milli>(dy).count() / n;
  state.counters["static_ms"] = staticMs;
  state.counters["dynamic_ms"] = dynamicMs;
  state.counters["dyn/static"] = dynamicMs / staticMs;
  state.counters["dyn_entries"] = dynamicFn.stats().compiles;
}
BENCHMARK(BM_DecoderStaticVsDynamic)
    ->Arg(64)
    ->Arg(128)
    ->Arg(256)
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

constexpr int64_t kRows = 4, kCols = 8;

Tensor small(int64_t cols, bool dynamic) {
  Tensor t = Tensor::randn({kRows, cols}, 1);
  if (dynamic) mark_dynamic(t, 1, 2, 1024);
  return t;
}

Tensor addOne(const Tensor &t) { return t + 1.0; }

void BM_OneOpEager(benchmark::State &state) {
  Tensor x = small(kCols, false);
  for (auto _ : state) benchmark::DoNotOptimize(addOne(x));
}
BENCHMARK(BM_OneOpEager);

void BM_OneOpStatic(benchmark::State &state) {
  CompileOptions opts;
  opts.dynamic = Dynamic::never;
  auto fast = compile(addOne, opts);
  Tensor x = small(kCols, false);
  fast(x);
  for (auto _ : state) benchmark::DoNotOptimize(fast(x));
  state.counters["entries"] = fast.stats().compiles;
}
BENCHMARK(BM_OneOpStatic);

void BM_OneOpDynamic(benchmark::State &state) {
  auto fast = compile(addOne);
  Tensor x = small(kCols, true);
  fast(x);
  for (auto _ : state) benchmark::DoNotOptimize(fast(x));
  state.counters["entries"] = fast.stats().compiles;
}
BENCHMARK(BM_OneOpDynamic);

// Two sizes alternating, each call's time averaged over both.
void BM_OneOpStaticTwoSizes(benchmark::State &state) {
  CompileOptions opts;
  opts.dynamic = Dynamic::never;
  auto fast = compile(addOne, opts);
  Tensor x[2] = {small(kCols, false), small(kCols + 1, false)};
  fast(x[0]);
  fast(x[1]);
  size_t i = 0;
  for (auto _ : state) benchmark::DoNotOptimize(fast(x[i++ & 1]));
  state.counters["entries"] = fast.stats().compiles;
}
BENCHMARK(BM_OneOpStaticTwoSizes);

void BM_OneOpDynamicTwoSizes(benchmark::State &state) {
  auto fast = compile(addOne);
  Tensor x[2] = {small(kCols, true), small(kCols + 1, true)};
  fast(x[0]);
  fast(x[1]);
  size_t i = 0;
  for (auto _ : state) benchmark::DoNotOptimize(fast(x[i++ & 1]));
  state.counters["entries"] = fast.stats().compiles;
}
BENCHMARK(BM_OneOpDynamicTwoSizes);

// x [s, 8] for s = 2, 3, ...: every call a size not seen before (views of one tensor).
struct Storm {
  static constexpr int64_t kSizes = 16384;
  Tensor big = Tensor::randn({kSizes + 2, 8}, 1);
  Tensor w = Tensor::randn({8, 8}, 2);
  int64_t next = 2;
  Tensor take() {
    if (next >= kSizes + 2) next = 2;
    Tensor x = slice(big, 0, 0, next++);
    mark_dynamic(x, 0, 2, kSizes + 2);
    return x;
  }
};

void BM_StormMatmulEager(benchmark::State &state) {
  Storm s;
  for (auto _ : state) benchmark::DoNotOptimize(matmul(s.take(), s.w));
}
BENCHMARK(BM_StormMatmulEager)->Iterations(4000);

void BM_StormMatmulCompiled(benchmark::State &state) {
  Storm s;
  auto f = compile([&s](const Tensor &x) { return matmul(x, s.w); });
  f(s.take()); // compiles the symbolic entry
  for (auto _ : state) benchmark::DoNotOptimize(f(s.take()));
  state.counters["entries"] = f.stats().compiles;
}
BENCHMARK(BM_StormMatmulCompiled)->Iterations(4000);

} // namespace

BENCHMARK_MAIN();
