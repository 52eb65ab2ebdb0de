// Does packing a linear's weight once pay? A oneDNN matmul primitive over the weight in
// its plain layout (what the compiled program's library steps use: W [N, K] read as B =
// W^T, oneDNN packs panels of it on every call) against one over the weight reordered once
// into the blocked layout oneDNN picks for format_tag::any (what packing per parameter
// version would buy), at the linears of gpt2 (768 wide) and llama-3.2-1b (2048 wide).
//
//   bench/gemm_bench --benchmark_filter=... (args: M, K, N, threads, packed)
#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include <benchmark/benchmark.h>
#include <oneapi/dnnl/dnnl.hpp>

#include "support/WorkPool.h"

namespace {

using dnnl::memory;
using tag = memory::format_tag;

void BM_Linear(benchmark::State &state) {
  const int64_t m = state.range(0), k = state.range(1), n = state.range(2);
  const int threads = static_cast<int>(state.range(3));
  const bool packed = state.range(4) != 0;
  const int before = omp_get_max_threads();
  omp_set_num_threads(threads); // the primitive is made for, and runs on, this many threads
  dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  dnnl::stream s(eng);
  memory::desc src({m, k}, memory::data_type::f32, tag::ab);
  memory::desc weiPlain({k, n}, memory::data_type::f32, tag::ba); // W [N, K] as B = W^T
  memory::desc weiAny({k, n}, memory::data_type::f32, tag::any);
  memory::desc bias({1, n}, memory::data_type::f32, tag::ab);
  memory::desc dst({m, n}, memory::data_type::f32, tag::ab);
  dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(src, packed ? weiAny : weiPlain, bias, dst),
                                  eng);
  std::vector<float> x(static_cast<size_t>(m * k), 0.5f), w(static_cast<size_t>(k * n), 0.25f),
      b(static_cast<size_t>(n), 1.f), y(static_cast<size_t>(m * n));
  memory xm(src, eng, x.data()), wm(weiPlain, eng, w.data()), bm(bias, eng, b.data()),
      ym(dst, eng, y.data());
  memory wUse = wm;
  if (packed) { // reordered once, outside the timed loop
    wUse = memory(pd.weights_desc(), eng);
    dnnl::reorder(wm, wUse).execute(s, wm, wUse);
    s.wait();
  }
  dnnl::matmul prim(pd);
  for (auto _ : state) {
    prim.execute(s, {{DNNL_ARG_SRC, xm},
                     {DNNL_ARG_WEIGHTS, wUse},
                     {DNNL_ARG_BIAS, bm},
                     {DNNL_ARG_DST, ym}});
    s.wait();
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["GFLOP/s"] = benchmark::Counter(
      2.0 * static_cast<double>(m * k * n), benchmark::Counter::kIsIterationInvariantRate,
      benchmark::Counter::kIs1000);
  state.SetLabel(pd.impl_info_str());
  omp_set_num_threads(before);
}

// The same linear cut into blocks of rows (dim 0) or weight columns (dim 1), each run by
// a primitive made for one thread, the blocks claimed through rcjit's work pool (what the
// compiled program does with RCJIT_GEMM_SPLIT=rows or cols), over plain or packed weights
// (args: M, K, N, dim, block, packed; packed 2: the weight copied once into row-major
// [K, N] order and each column block reading its slice of it, what the compiled program
// does by default for a parameter's weight).
void BM_LinearBlocks(benchmark::State &state) {
  const int64_t m = state.range(0), k = state.range(1), n = state.range(2);
  const int dim = static_cast<int>(state.range(3));
  const int64_t block = state.range(4);
  const bool rowMajor = state.range(5) == 2 && dim == 1;
  const bool packed = state.range(5) != 0 && !rowMajor;
  dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  dnnl::stream s0(eng);
  std::vector<float> x(static_cast<size_t>(m * k), 0.5f), w(static_cast<size_t>(k * n), 0.25f),
      b(static_cast<size_t>(n), 1.f), y(static_cast<size_t>(m * n)), wRows;
  if (rowMajor) { // W [N, K] copied into B = W^T in row-major order
    wRows.resize(w.size());
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < k; ++j)
        wRows[static_cast<size_t>(j * n + i)] = w[static_cast<size_t>(i * k + j)];
  }
  struct Blk {
    int64_t at, len;
    dnnl::matmul prim;
    memory::desc src, wei, bias, dst;
  };
  std::vector<Blk> blocks;
  const int before = omp_get_max_threads();
  omp_set_num_threads(1);
  memory packedW;
  for (int64_t at = 0; at < (dim == 0 ? m : n); at += block) {
    const int64_t len = std::min(block, (dim == 0 ? m : n) - at);
    const int64_t bm = dim == 0 ? len : m, bn = dim == 1 ? len : n;
    memory::desc src({bm, k}, memory::data_type::f32, {k, 1});
    memory::desc wei({k, bn}, memory::data_type::f32, rowMajor ? memory::dims{n, 1} : memory::dims{1, k});
    memory::desc bias({1, bn}, memory::data_type::f32, {bn, 1});
    memory::desc dst({bm, bn}, memory::data_type::f32, {n, 1});
    memory::desc weiAny({k, bn}, memory::data_type::f32, tag::any);
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(src, packed ? weiAny : wei, bias, dst), eng);
    if (packed && !packedW) {
      packedW = memory(pd.weights_desc(), eng);
      memory wm(wei, eng, w.data());
      dnnl::reorder(wm, packedW).execute(s0, wm, packedW);
      s0.wait();
    }
    blocks.push_back({at, len, dnnl::matmul(pd), src, packed ? pd.weights_desc() : wei, bias, dst});
  }
  omp_set_num_threads(before);
  for (auto _ : state) {
    rcjit::WorkPool::instance().run(static_cast<int64_t>(blocks.size()), [&](int64_t c) {
      const Blk &bl = blocks[static_cast<size_t>(c)];
      dnnl::stream st(eng);
      float *xs = x.data() + (dim == 0 ? bl.at * k : 0);
      float *ws = packed     ? static_cast<float *>(packedW.get_data_handle())
                  : rowMajor ? wRows.data() + bl.at
                             : w.data() + (dim == 1 ? bl.at * k : 0);
      float *ys = y.data() + (dim == 0 ? bl.at * n : bl.at);
      memory xm(bl.src, eng, xs), wm(bl.wei, eng, ws), bm(bl.bias, eng, b.data()),
          ym(bl.dst, eng, ys);
      bl.prim.execute(st, {{DNNL_ARG_SRC, xm}, {DNNL_ARG_WEIGHTS, wm}, {DNNL_ARG_BIAS, bm},
                           {DNNL_ARG_DST, ym}});
      st.wait();
    });
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["GFLOP/s"] = benchmark::Counter(
      2.0 * static_cast<double>(m * k * n), benchmark::Counter::kIsIterationInvariantRate,
      benchmark::Counter::kIs1000);
}

void blockShapes(benchmark::internal::Benchmark *b) {
  const int64_t shapes[][2] = {{768, 2304}, {768, 768}, {768, 3072}, {3072, 768}};
  for (int64_t m : {128, 512})
    for (const auto &kn : shapes) {
      for (int64_t rows : {16, 32, 64}) b->Args({m, kn[0], kn[1], 0, rows, 1});
      for (int64_t cols : {128, 192, 256, 384, 576, 768})
        if (cols < kn[1]) b->Args({m, kn[0], kn[1], 1, cols, 0});
    }
}

// The compiled program's default split of a parameter's GEMM at 128 rows (4 column blocks
// per thread over a row-major copy) at gpt2's and llama-3.2-1b's shapes, against
// BM_Linear's oneDNN call on its own threads (threads 2, packed 0).
void defaultSplitShapes(benchmark::internal::Benchmark *b) {
  const int64_t shapes[][2] = {{768, 2304}, {768, 3072}, {3072, 768}, {768, 50257},
                               {2048, 2048}, {2048, 8192}, {8192, 2048}};
  for (const auto &kn : shapes) {
    const int64_t block = std::max<int64_t>(128, (kn[1] / 8 + 15) / 16 * 16);
    b->Args({128, kn[0], kn[1], 1, block, 2});
  }
}

BENCHMARK(BM_LinearBlocks)->Apply(defaultSplitShapes)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_LinearBlocks)->Apply(blockShapes)->Unit(benchmark::kMicrosecond)->UseRealTime();

void linearShapes(benchmark::internal::Benchmark *b) {
  // gpt2: qkv, proj, fc, fc2; llama-3.2-1b: q/o, k/v, gate/up, down
  const int64_t shapes[][2] = {{768, 2304},  {768, 768},  {768, 3072},  {3072, 768},
                               {768, 50257}, {2048, 2048}, {2048, 512}, {2048, 8192},
                               {8192, 2048}};
  for (int64_t m : {1, 128, 512})
    for (const auto &kn : shapes)
      for (int64_t threads : {1, 2})
        for (int64_t packed : {0, 1}) b->Args({m, kn[0], kn[1], threads, packed});
}

BENCHMARK(BM_Linear)->Apply(linearShapes)->Unit(benchmark::kMicrosecond)->UseRealTime();

} // namespace

BENCHMARK_MAIN();
