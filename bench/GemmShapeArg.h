// The M,K,N arguments of the GEMM probes (gemm_libs, gemm_splits). Header-only, included by
// its file name, so gemm_libs still compiles alone against another oneDNN (docs/performance.md).
#pragma once
#include <cstdio>

// Reads "M,K,N" (each at least 1) from `arg`; false, after a message naming `tool`, otherwise.
inline bool parseGemmShape(const char *tool, const char *arg, long long &m, long long &k,
                           long long &n) {
  if (std::sscanf(arg, "%lld,%lld,%lld", &m, &k, &n) == 3 && m >= 1 && k >= 1 && n >= 1)
    return true;
  std::fprintf(stderr, "%s: bad shape '%s' (want M,K,N)\n", tool, arg);
  return false;
}
