// The CUDA driver, loaded at run time with dlopen so one binary runs with or without it.
#include "targets/cuda/CudaDriver.h"

#include <dlfcn.h>

#include <cstdlib>
#include <utility>

#include <rcjit/Cuda.h>
#include <rcjit/Error.h>

namespace rcjit::cuda {

namespace {

// Every entry point of DriverApi; `missing` lists those the library lacks.
void resolveDriver(void *lib, DriverApi &a, std::string &missing) {
  resolve(lib, "cuInit", a.init, missing);
  resolve(lib, "cuDriverGetVersion", a.driverGetVersion, missing);
  resolve(lib, "cuDeviceGetCount", a.deviceGetCount, missing);
  resolve(lib, "cuDeviceGet", a.deviceGet, missing);
  resolve(lib, "cuDeviceGetAttribute", a.deviceGetAttribute, missing);
  resolve(lib, "cuDeviceGetName", a.deviceGetName, missing);
  resolve(lib, "cuDevicePrimaryCtxRetain", a.devicePrimaryCtxRetain, missing);
  resolve(lib, "cuDevicePrimaryCtxRelease_v2", a.devicePrimaryCtxRelease, missing);
  resolve(lib, "cuCtxSetCurrent", a.ctxSetCurrent, missing);
  resolve(lib, "cuModuleLoadDataEx", a.moduleLoadDataEx, missing);
  resolve(lib, "cuModuleGetFunction", a.moduleGetFunction, missing);
  resolve(lib, "cuModuleUnload", a.moduleUnload, missing);
  resolve(lib, "cuLaunchKernel", a.launchKernel, missing);
  resolve(lib, "cuMemAlloc_v2", a.memAlloc, missing);
  resolve(lib, "cuMemFree_v2", a.memFree, missing);
  resolve(lib, "cuMemcpyHtoD_v2", a.memcpyHtoD, missing);
  resolve(lib, "cuMemcpyDtoH_v2", a.memcpyDtoH, missing);
  resolve(lib, "cuStreamCreate", a.streamCreate, missing);
  resolve(lib, "cuStreamSynchronize", a.streamSynchronize, missing);
  resolve(lib, "cuStreamDestroy_v2", a.streamDestroy, missing);
  resolve(lib, "cuMemcpyHtoDAsync_v2", a.memcpyHtoDAsync, missing);
  resolve(lib, "cuMemcpyDtoHAsync_v2", a.memcpyDtoHAsync, missing);
  resolve(lib, "cuMemcpyDtoDAsync_v2", a.memcpyDtoDAsync, missing);
  resolve(lib, "cuMemsetD8Async", a.memsetD8Async, missing);
  resolve(lib, "cuMemsetD16Async", a.memsetD16Async, missing);
  resolve(lib, "cuMemsetD32Async", a.memsetD32Async, missing);
  resolve(lib, "cuMemsetD2D32Async", a.memsetD2D32Async, missing);
  resolve(lib, "cuMemGetInfo_v2", a.memGetInfo, missing);
  resolve(lib, "cuStreamBeginCapture_v2", a.streamBeginCapture, missing);
  resolve(lib, "cuStreamEndCapture", a.streamEndCapture, missing);
  resolve(lib, "cuGraphInstantiateWithFlags", a.graphInstantiate, missing);
  resolve(lib, "cuGraphLaunch", a.graphLaunch, missing);
  resolve(lib, "cuGraphExecDestroy", a.graphExecDestroy, missing);
  resolve(lib, "cuGraphDestroy", a.graphDestroy, missing);
  resolve(lib, "cuGetErrorString", a.getErrorString, missing);
  resolve(lib, "cuGetErrorName", a.getErrorName, missing);
}

const DriverLoad &processDriver() {
  static const DriverLoad load = probeDriver(driverLibraryName());
  return load;
}

} // namespace

std::string describeResult(const DriverApi *api, CUresult r) {
  const char *name = nullptr;
  const char *text = nullptr;
  if (api && api->getErrorName && api->getErrorName(r, &name) != CUDA_SUCCESS) name = nullptr;
  if (api && api->getErrorString && api->getErrorString(r, &text) != CUDA_SUCCESS) text = nullptr;
  std::string s = name ? name : "CUresult " + std::to_string(static_cast<int>(r));
  if (text) s += std::string(" (") + text + ")";
  return s;
}

void *openLibrary(const std::string &library, std::string &reason) {
  dlerror(); // clear a stale message
  void *h = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char *why = dlerror();
    reason = library + " not found: " + (why ? why : "dlopen failed");
  }
  return h;
}

void resolveSymbol(void *lib, const char *name, void *&slot, std::string &missing) {
  slot = dlsym(lib, name);
  if (!slot) missing += std::string(missing.empty() ? "" : ", ") + name;
}

DriverLoad probeDriver(const std::string &library) {
  DriverLoad out;
  out.handle = openLibrary(library, out.reason);
  if (!out.handle) return out;
  std::string missing;
  resolveDriver(out.handle, out.api, missing);
  if (!missing.empty()) {
    out.reason = library + " lacks " + missing + " (a driver older than rcjit supports)";
    return out;
  }
  if (CUresult r = out.api.init(0); r != CUDA_SUCCESS) {
    out.reason = "cuInit failed: " + describeResult(&out.api, r);
    return out;
  }
  if (CUresult r = out.api.driverGetVersion(&out.driverVersion); r != CUDA_SUCCESS) {
    out.reason = "cuDriverGetVersion failed: " + describeResult(&out.api, r);
    return out;
  }
  if (CUresult r = out.api.deviceGetCount(&out.deviceCount); r != CUDA_SUCCESS) {
    out.reason = "cuDeviceGetCount failed: " + describeResult(&out.api, r);
    return out;
  }
  if (out.deviceCount <= 0) out.reason = "the CUDA driver reports no device";
  return out;
}

std::string driverLibraryName() {
  const char *env = std::getenv("RCJIT_CUDA_DRIVER");
  return env && *env ? env : "libcuda.so.1";
}

const DriverApi *driver() {
  const DriverLoad &d = processDriver();
  return d.reason.empty() ? &d.api : nullptr;
}

const std::string &unavailableReason() { return processDriver().reason; }

const DriverApi &requireCuda() {
  const DriverApi *api = driver();
  if (!api) throw Error("CUDA is not available: " + unavailableReason());
  return *api;
}

void check(CUresult r, const char *what) {
  if (r == CUDA_SUCCESS) return;
  const DriverLoad &d = processDriver();
  throw Error(std::string(what) + ": " + describeResult(d.handle ? &d.api : nullptr, r));
}

std::string archName(int major, int minor) {
  return "sm_" + std::to_string(major) + std::to_string(minor);
}

int driverPtxIsa(int driverVersion) {
  // (first CUDA driver version, the PTX ISA it introduced), newest first: PTX ISA release notes
  static const std::pair<int, int> kIsa[] = {
      {13000, 90}, {12090, 88}, {12080, 87}, {12050, 85}, {12040, 84}, {12030, 83},
      {12020, 82}, {12010, 81}, {12000, 80}, {11080, 78}, {11070, 77}, {11060, 76},
      {11050, 75}, {11040, 74}, {11030, 73}, {11020, 72}, {11010, 71}, {11000, 70},
      {10020, 65}, {10010, 64}, {10000, 63}, {9020, 62},  {9010, 61},  {9000, 60}};
  for (const auto &[version, isa] : kIsa) {
    if (driverVersion >= version) return isa;
  }
  return 0;
}

DeviceInfo deviceInfo(int ordinal) {
  const DriverApi &api = requireCuda();
  DeviceInfo info;
  info.ordinal = ordinal;
  CUdevice dev = 0;
  check(api.deviceGet(&dev, ordinal), "cuDeviceGet");
  char name[256] = {};
  check(api.deviceGetName(name, sizeof name - 1, dev), "cuDeviceGetName");
  info.name = name;
  check(api.deviceGetAttribute(&info.major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev),
        "cuDeviceGetAttribute(compute capability major)");
  check(api.deviceGetAttribute(&info.minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev),
        "cuDeviceGetAttribute(compute capability minor)");
  check(
      api.deviceGetAttribute(&info.multiprocessors, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev),
      "cuDeviceGetAttribute(multiprocessor count)");
  info.arch = archName(info.major, info.minor);
  info.driverVersion = processDriver().driverVersion;
  info.driverPtxVersion = driverPtxIsa(info.driverVersion);
  return info;
}

} // namespace rcjit::cuda

namespace rcjit {

bool cuda_available() { return cuda::unavailableReason().empty(); }

} // namespace rcjit
