// libxsmm's small-GEMM JIT against oneDNN's matmul primitive for the small products rcjit
// generates kernels for (docs/first-call.md: "libxsmm"): per shape, the time to get a
// callable kernel (libxsmm's JIT dispatch, oneDNN's primitive creation) and the median and
// minimum of 2000 calls, interleaved rounds. Not part of the build (libxsmm is not a
// dependency); run by hand:
//
//   apt-get install -y libxsmm-dev
//   g++ -O2 -std=c++20 scripts/xsmm_probe.cpp -o /tmp/xsmm_probe -ldnnl -lxsmm -lxsmmnoblas \
//       -lpthread -ldl -lm && OMP_NUM_THREADS=1 /tmp/xsmm_probe
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include <dnnl.hpp>
#include <libxsmm.h>

using Clock = std::chrono::steady_clock;
static double us(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::micro>(b - a).count();
}

int main() {
  libxsmm_init();
  dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  dnnl::stream strm(eng);
  const int shapes[][3] = {{128, 10, 10}, {128, 64, 64}, {128, 128, 128}, {128, 256, 256}};
  std::printf("M x N x K (row-major C[M,N] = A[M,K] B[K,N]) | get kernel us: xsmm / onednn | "
              "call us median (min): xsmm / onednn\n");
  for (auto &s : shapes) {
    const int m = s[0], n = s[1], k = s[2];
    std::vector<float> a(size_t(m) * k, 0.5f), b(size_t(k) * n, 0.25f), c(size_t(m) * n);
    // libxsmm is column-major: C^T[N,M] = B^T[N,K] A^T[K,M], the same memory
    auto t0 = Clock::now();
    libxsmm_smmfunction f =
        libxsmm_smmdispatch(n, m, k, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr);
    const double xsmmGet = us(t0, Clock::now());
    using tag = dnnl::memory::format_tag;
    dnnl::memory::desc ad({m, k}, dnnl::memory::data_type::f32, tag::ab),
        bd({k, n}, dnnl::memory::data_type::f32, tag::ab),
        cd({m, n}, dnnl::memory::data_type::f32, tag::ab);
    t0 = Clock::now();
#if DNNL_VERSION_MAJOR >= 3
    dnnl::matmul mm(dnnl::matmul::primitive_desc(eng, ad, bd, cd));
#else
    dnnl::matmul mm(dnnl::matmul::primitive_desc(dnnl::matmul::desc(ad, bd, cd), eng));
#endif
    const double dnnlGet = us(t0, Clock::now());
    dnnl::memory am(ad, eng, a.data()), bm(bd, eng, b.data()), cm(cd, eng, c.data());
    std::vector<double> tx, td;
    for (int r = 0; r < 2000; ++r) {
      t0 = Clock::now();
      f(b.data(), a.data(), c.data());
      tx.push_back(us(t0, Clock::now()));
      t0 = Clock::now();
      mm.execute(strm, {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}});
      strm.wait();
      td.push_back(us(t0, Clock::now()));
    }
    std::sort(tx.begin(), tx.end());
    std::sort(td.begin(), td.end());
    std::printf("%d x %d x %d | %.1f / %.1f | %.2f (%.2f) / %.2f (%.2f)\n", m, n, k, xsmmGet,
                dnnlGet, tx[tx.size() / 2], tx[0], td[td.size() / 2], td[0]);
  }
  return 0;
}
