// The probe behind the GEMM splits of AVX-512 hosts without AMX (targets/cpu/LibraryStep.cpp,
// plainOperandSplits; docs/performance.md, "Long inner dims and weight gradients in
// blocks"): one bare oneDNN product per shape, timed as one call on oneDNN's own threads
// and as one block per OpenMP thread, each block a primitive made for one thread.
//
//   gemm_splits inner f32|bf16 REPS M,K,N...   C = A @ B, A [M, K] and B [K, N] row-major:
//       one call / blocks of the inner dim, each writing an f32 slice, summed after
//   gemm_splits rows f32|bf16 REPS M,K,N...    a weight gradient, A [M, K] transposed (its
//       storage [K, M]), B [K, N] row-major: one call, one call over B reordered into
//       oneDNN's layout on each call / one block of rows per thread over the plain B
// Prints per shape the minimum over REPS calls (after a warm-up) of each, in ms, and the
// GFLOP/s of the best. Not a test: numbers only.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include <oneapi/dnnl/dnnl.hpp>

#include "GemmShapeArg.h"

namespace {

using dnnl::memory;
using dt = memory::data_type;

dnnl::engine &engine() {
  static dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}
dnnl::stream &stream() {
  static dnnl::stream s(engine());
  return s;
}

double minMs(int reps, const std::function<void()> &f) {
  f(); // warm-up: page faults, oneDNN's kernel generation
  double best = 1e30;
  for (int i = 0; i < reps; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    f();
    best = std::min(
        best,
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

// One product C [m, n] = A [m, k] @ B [k, n] at the given strides, made for the calling
// thread's OpenMP count; `b` may be format_tag::any (then weights() is its layout).
struct Product {
  dnnl::matmul prim;
  memory::desc wei;
  Product(const memory::desc &a, const memory::desc &b, const memory::desc &c) {
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b, c), engine());
    prim = dnnl::matmul(pd);
    wei = pd.weights_desc();
  }
  void run(const memory::desc &a, void *pa, void *pb, const memory::desc &c, void *pc) const {
    memory ma(a, engine(), pa), mb(wei, engine(), pb), mc(c, engine(), pc);
    prim.execute(stream(), {{DNNL_ARG_SRC, ma}, {DNNL_ARG_WEIGHTS, mb}, {DNNL_ARG_DST, mc}});
  }
};

memory::desc md(int64_t r, int64_t c, int64_t sr, int64_t sc, dt t) {
  return memory::desc({r, c}, t, {sr, sc});
}

// Runs f(block) for each of `n` blocks on OpenMP's threads (a oneDNN call inside runs on
// its own thread).
void onTeam(int n, const std::function<void(int)> &f) {
#pragma omp parallel for schedule(dynamic, 1) num_threads(std::min(n, omp_get_max_threads()))
  for (int b = 0; b < n; ++b) f(b);
}

// [0, size) cut into `parts` blocks (a multiple of `align` long, the last shorter): their
// starts and lengths, and a product per block made by `make(length)` for one thread.
std::vector<Product> perBlock(int64_t size, int64_t parts, int64_t align, std::vector<int64_t> &at,
                              std::vector<int64_t> &len,
                              const std::function<Product(int64_t)> &make) {
  const int64_t block = ((size + parts - 1) / parts + align - 1) / align * align;
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  std::vector<Product> prims;
  for (int64_t s = 0; s < size; s += block) {
    at.push_back(s);
    len.push_back(std::min(block, size - s));
    prims.push_back(make(len.back()));
  }
  omp_set_num_threads(threads);
  return prims;
}

void inner(dt t, int reps, int64_t m, int64_t k, int64_t n) {
  const int64_t e = t == dt::bf16 ? 2 : 4, parts = omp_get_max_threads();
  std::vector<char> a(static_cast<size_t>(m * k * e), 0), b(static_cast<size_t>(k * n * e), 0);
  std::vector<char> c(static_cast<size_t>(m * n * e));
  std::vector<float> slices(static_cast<size_t>(parts * m * n));
  const Product whole(md(m, k, k, 1, t), md(k, n, n, 1, t), md(m, n, n, 1, t));
  const double one = minMs(
      reps, [&] { whole.run(md(m, k, k, 1, t), a.data(), b.data(), md(m, n, n, 1, t), c.data()); });
  std::vector<int64_t> at, len;
  const std::vector<Product> prims = perBlock(k, parts, 16, at, len, [&](int64_t l) {
    return Product(md(m, l, k, 1, t), md(l, n, n, 1, t), md(m, n, n, 1, dt::f32));
  });
  const double blocks = minMs(reps, [&] {
    onTeam(static_cast<int>(prims.size()), [&](int p) {
      prims[static_cast<size_t>(p)].run(md(m, len[static_cast<size_t>(p)], k, 1, t),
                                        a.data() + at[static_cast<size_t>(p)] * e,
                                        b.data() + at[static_cast<size_t>(p)] * n * e,
                                        md(m, n, n, 1, dt::f32), slices.data() + p * m * n);
    });
#pragma omp parallel for
    for (int64_t i = 0; i < m * n; ++i) {
      float sum = slices[static_cast<size_t>(i)];
      for (size_t p = 1; p < prims.size(); ++p) sum += slices[p * m * n + static_cast<size_t>(i)];
      std::memcpy(c.data() + i * e, &sum, static_cast<size_t>(e)); // bf16: not rounded here
    }
  });
  const double gf = 2.0 * m * k * n / 1e6 / std::min(one, blocks);
  std::printf("inner %lld,%lld,%lld  one call %.2f  %zu inner blocks %.2f ms  (%.0f GFLOP/s)\n",
              static_cast<long long>(m), static_cast<long long>(k), static_cast<long long>(n), one,
              prims.size(), blocks, gf);
}

void rows(dt t, int reps, int64_t m, int64_t k, int64_t n) {
  const int64_t e = t == dt::bf16 ? 2 : 4, parts = omp_get_max_threads();
  std::vector<char> a(static_cast<size_t>(m * k * e), 0), b(static_cast<size_t>(k * n * e), 0);
  std::vector<char> c(static_cast<size_t>(m * n * e));
  const memory::desc ad = md(m, k, 1, m, t), bd = md(k, n, n, 1, t), cd = md(m, n, n, 1, t);
  const Product whole(ad, bd, cd);
  const double one = minMs(reps, [&] { whole.run(ad, a.data(), b.data(), cd, c.data()); });
  const Product packed(ad, memory::desc({k, n}, t, memory::format_tag::any), cd);
  memory plainB(bd, engine(), b.data()), packedB(packed.wei, engine());
  dnnl::reorder pack(plainB, packedB);
  const double reordered = minMs(reps, [&] {
    pack.execute(stream(), plainB, packedB);
    packed.run(ad, a.data(), packedB.get_data_handle(), cd, c.data());
  });
  std::vector<int64_t> at, len;
  const std::vector<Product> prims = perBlock(m, parts, 8, at, len, [&](int64_t l) {
    return Product(md(l, k, 1, m, t), bd, md(l, n, n, 1, t));
  });
  const double blocks = minMs(reps, [&] {
    onTeam(static_cast<int>(prims.size()), [&](int p) {
      const auto q = static_cast<size_t>(p);
      prims[q].run(md(len[q], k, 1, m, t), a.data() + at[q] * e, b.data(), md(len[q], n, n, 1, t),
                   c.data() + at[q] * n * e);
    });
  });
  const double gf = 2.0 * m * k * n / 1e6 / std::min({one, reordered, blocks});
  std::printf("rows %lld,%lld,%lld  one call %.2f  reordered B %.2f  %zu row blocks %.2f ms  "
              "(%.0f GFLOP/s)\n",
              static_cast<long long>(m), static_cast<long long>(k), static_cast<long long>(n), one,
              reordered, prims.size(), blocks, gf);
}

} // namespace

int main(int argc, char **argv) {
  if (argc < 5) {
    std::fprintf(stderr, "usage: gemm_splits inner|rows f32|bf16 REPS M,K,N...\n");
    return 2;
  }
  const std::string what = argv[1], type = argv[2];
  const int reps = std::max(1, std::atoi(argv[3]));
  if ((what != "inner" && what != "rows") || (type != "f32" && type != "bf16")) {
    std::fprintf(stderr, "gemm_splits: want inner|rows and f32|bf16\n");
    return 2;
  }
  for (int i = 4; i < argc; ++i) {
    long long m = 0, k = 0, n = 0;
    if (!parseGemmShape("gemm_splits", argv[i], m, k, n)) return 2;
    try {
      (what == "inner" ? inner : rows)(type == "bf16" ? dt::bf16 : dt::f32, reps, m, k, n);
    } catch (const dnnl::error &e) {
      std::fprintf(stderr, "gemm_splits: oneDNN declined %s (%s)\n", argv[i], e.what());
      return 2;
    }
  }
  return 0;
}
