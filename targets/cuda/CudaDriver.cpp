// The CUDA driver, loaded at run time with dlopen so one binary runs with or without it.
#include <dlfcn.h>

#include <rcjit/Cuda.h>

namespace rcjit {

namespace {

using CuInit = int (*)(unsigned);
using CuDeviceGetCount = int (*)(int *);

bool probe() {
  void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) return false;
  auto init = reinterpret_cast<CuInit>(dlsym(lib, "cuInit"));
  auto count = reinterpret_cast<CuDeviceGetCount>(dlsym(lib, "cuDeviceGetCount"));
  if (!init || !count || init(0) != 0) return false; // CUDA_SUCCESS is 0
  int n = 0;
  return count(&n) == 0 && n > 0;
}

} // namespace

bool cuda_available() {
  static const bool available = probe();
  return available;
}

} // namespace rcjit
