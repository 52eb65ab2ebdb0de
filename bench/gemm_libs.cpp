// One linear y[M,N] = x[M,K] @ W[N,K]^T through one library (the oneDNN it is built against,
// MKL when built with RCJIT_GEMM_LIBS_MKL, or rcjit itself), timed per shape: the candidates
// of issue 35 side by side with scripts/peer_bench.py --gemm, which runs this program between
// PyTorch's rounds. Built by bench/CMakeLists.txt against rcjit; built by hand (see
// docs/performance.md) with -DRCJIT_GEMM_LIBS_STANDALONE against another oneDNN or MKL.
//
//   gemm_libs LIB DTYPE REPS M,K,N [M,K,N ...]
//   LIB: dnnl (plain weight), dnnl-packed (format_tag::any, reordered once),
//        mkl (cblas_sgemm / cblas_gemm_bf16bf16f32), mkl-packed (the *_pack forms),
//        rcjit (eager rcjit::linear), rcjit-compiled (rcjit::compile of it, weight an input)
//   DTYPE: f32 or bf16 (bf16 in, f32 out for MKL; bf16 out for oneDNN, as PyTorch)
// Prints one line per shape: "M K N min_ms median_ms GFLOP/s(min) impl".
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <oneapi/dnnl/dnnl.hpp>

#include "GemmShapeArg.h"
#ifdef RCJIT_GEMM_LIBS_MKL
#include <mkl.h>
#endif
#ifndef RCJIT_GEMM_LIBS_STANDALONE
#include <rcjit/rcjit.h>
#endif

namespace {

using dnnl::memory;
using tag = memory::format_tag;
using Clock = std::chrono::steady_clock;

struct Timing {
  double minMs = 1e30, medMs = 0;
  std::string impl;
};

template <class F> Timing timeIt(int reps, F &&f) {
  f(); // warm-up: primitive caches, page faults
  std::vector<double> ms;
  for (int i = 0; i < reps; ++i) {
    auto t0 = Clock::now();
    f();
    ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  return {ms.front(), ms[ms.size() / 2], {}};
}

dnnl::matmul::primitive_desc matmulPd(const dnnl::engine &eng, const memory::desc &src,
                                      const memory::desc &wei, const memory::desc &dst) {
#if DNNL_VERSION_MAJOR >= 3
  return dnnl::matmul::primitive_desc(eng, src, wei, dst);
#else
  return dnnl::matmul::primitive_desc(dnnl::matmul::desc(src, wei, dst), eng);
#endif
}

Timing runDnnl(int64_t m, int64_t k, int64_t n, bool bf16, bool packed, int reps) {
  dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  dnnl::stream s(eng);
  const auto dt = bf16 ? memory::data_type::bf16 : memory::data_type::f32;
  memory::desc src({m, k}, dt, tag::ab), weiPlain({k, n}, dt, tag::ba),
      weiAny({k, n}, dt, tag::any), dst({m, n}, dt, tag::ab);
  auto pd = matmulPd(eng, src, packed ? weiAny : weiPlain, dst);
  memory xm(src, eng), wm(weiPlain, eng), ym(dst, eng);
  std::memset(xm.get_data_handle(), 0x3c, src.get_size()); // small finite values in f32/bf16
  std::memset(wm.get_data_handle(), 0x3c, weiPlain.get_size());
  memory wUse = wm;
  if (packed) {
    wUse = memory(pd.weights_desc(), eng);
    dnnl::reorder(wm, wUse).execute(s, wm, wUse);
    s.wait();
  }
  dnnl::matmul prim(pd);
  Timing t = timeIt(reps, [&] {
    prim.execute(s, {{DNNL_ARG_SRC, xm}, {DNNL_ARG_WEIGHTS, wUse}, {DNNL_ARG_DST, ym}});
    s.wait();
  });
  t.impl = pd.impl_info_str();
  return t;
}

#ifdef RCJIT_GEMM_LIBS_MKL
Timing runMkl(int64_t m, int64_t k, int64_t n, bool bf16, bool packed, int reps) {
  const MKL_INT M = m, N = n, K = k;
  std::vector<float> y(static_cast<size_t>(m * n));
  if (!bf16) {
    std::vector<float> x(static_cast<size_t>(m * k), 0.01f), w(static_cast<size_t>(n * k), 0.01f);
    if (!packed)
      return timeIt(reps, [&] {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, 1.f, x.data(), K,
                    w.data(), K, 0.f, y.data(), N);
      });
    auto *pw = static_cast<float *>(
        mkl_malloc(cblas_sgemm_pack_get_size(CblasBMatrix, M, N, K), 64));
    cblas_sgemm_pack(CblasRowMajor, CblasBMatrix, CblasTrans, M, N, K, 1.f, w.data(), K, pw);
    Timing t = timeIt(reps, [&] {
      cblas_sgemm_compute(CblasRowMajor, CblasNoTrans, CblasPacked, M, N, K, x.data(), K, pw, K,
                          0.f, y.data(), N);
    });
    mkl_free(pw);
    return t;
  }
  std::vector<MKL_BF16> x(static_cast<size_t>(m * k), 0x3c23), w(static_cast<size_t>(n * k), 0x3c23);
  if (!packed)
    return timeIt(reps, [&] {
      cblas_gemm_bf16bf16f32(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, 1.f, x.data(), K,
                             w.data(), K, 0.f, y.data(), N);
    });
  const size_t bytes = cblas_gemm_bf16bf16f32_pack_get_size(CblasBMatrix, M, N, K);
  auto *pw = static_cast<MKL_BF16 *>(mkl_malloc(bytes, 64));
  cblas_gemm_bf16bf16f32_pack(CblasRowMajor, CblasBMatrix, CblasTrans, M, N, K, w.data(), K, pw);
  Timing t = timeIt(reps, [&] {
    cblas_gemm_bf16bf16f32_compute(CblasRowMajor, CblasNoTrans, CblasPacked, M, N, K, 1.f,
                                   x.data(), K, pw, K, 0.f, y.data(), N);
  });
  mkl_free(pw);
  return t;
}
#endif

#ifndef RCJIT_GEMM_LIBS_STANDALONE
Timing runRcjit(int64_t m, int64_t k, int64_t n, bool bf16, bool compiled, int reps) {
  const rcjit::DType dt = bf16 ? rcjit::DType::bf16 : rcjit::DType::f32;
  rcjit::Tensor x = rcjit::Tensor::randn({m, k}, 1).to(dt), w = rcjit::Tensor::randn({n, k}, 2).to(dt);
  auto fn = [](const rcjit::Tensor &a, const rcjit::Tensor &b) {
    return rcjit::linear(a, b, rcjit::Tensor());
  };
  if (!compiled)
    return timeIt(reps, [&] { rcjit::Tensor y = fn(x, w); });
  auto cf = rcjit::compile(fn);
  return timeIt(reps, [&] { rcjit::Tensor y = cf(x, w); });
}
#endif

} // namespace

int main(int argc, char **argv) {
  if (argc < 5) {
    std::fprintf(stderr, "usage: gemm_libs dnnl|dnnl-packed|mkl|mkl-packed f32|bf16 REPS M,K,N...\n");
    return 2;
  }
  const std::string lib = argv[1], dtype = argv[2];
  const int reps = std::atoi(argv[3]);
  if ((dtype != "f32" && dtype != "bf16") || reps < 1) {
    std::fprintf(stderr, "gemm_libs: dtype must be f32 or bf16 and REPS >= 1\n");
    return 2;
  }
  for (int i = 4; i < argc; ++i) {
    long long m = 0, k = 0, n = 0;
    if (!parseGemmShape("gemm_libs", argv[i], m, k, n)) return 2;
    const bool bf16 = dtype == "bf16";
    Timing t;
    if (lib == "dnnl" || lib == "dnnl-packed") {
      try {
        t = runDnnl(m, k, n, bf16, lib == "dnnl-packed", reps);
      } catch (const dnnl::error &e) { // e.g. oneDNN 2.6 has no bf16 matmul below AVX-512
        std::fprintf(stderr, "gemm_libs: oneDNN cannot run a %s %lldx%lldx%lld matmul here: %s\n",
                     dtype.c_str(), m, k, n, e.what());
        return 2;
      }
#ifdef RCJIT_GEMM_LIBS_MKL
    } else if (lib == "mkl" || lib == "mkl-packed") {
      t = runMkl(m, k, n, bf16, lib == "mkl-packed", reps);
      t.impl = "mkl";
#endif
#ifndef RCJIT_GEMM_LIBS_STANDALONE
    } else if (lib == "rcjit" || lib == "rcjit-compiled") {
      t = runRcjit(m, k, n, bf16, lib == "rcjit-compiled", reps);
      t.impl = lib;
#endif
    } else {
      std::fprintf(stderr, "gemm_libs: library '%s' is not built in\n", lib.c_str());
      return 2;
    }
    std::printf("%lld %lld %lld %.4f %.4f %.1f %s\n", m, k, n, t.minMs, t.medMs,
                2.0 * m * k * n / (t.minMs * 1e6), t.impl.c_str());
  }
  return 0;
}
