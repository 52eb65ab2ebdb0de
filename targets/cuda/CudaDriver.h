// The CUDA Driver API, loaded at run time with dlopen: one rcjit binary runs with or without it.
//
// rcjit never links libcuda. The first use loads libcuda.so.1 (or the library named by
// $RCJIT_CUDA_DRIVER, for tests and unusual installs), resolves every entry point rcjit uses,
// calls cuInit and counts the devices; the outcome, success or the reason for failure, is
// kept for the life of the process. Every CUresult goes through check(). Thread-safe.
#pragma once
#include <string>

#include <cuda.h>

namespace rcjit::cuda {

/// The driver entry points rcjit uses (the `_v2` ABI where cuda.h maps a name to it).
struct DriverApi {
  decltype(&::cuInit) init = nullptr;
  decltype(&::cuDriverGetVersion) driverGetVersion = nullptr;
  decltype(&::cuDeviceGetCount) deviceGetCount = nullptr;
  decltype(&::cuDeviceGet) deviceGet = nullptr;
  decltype(&::cuDeviceGetAttribute) deviceGetAttribute = nullptr;
  decltype(&::cuDeviceGetName) deviceGetName = nullptr;
  decltype(&::cuDevicePrimaryCtxRetain) devicePrimaryCtxRetain = nullptr;
  decltype(&::cuDevicePrimaryCtxRelease_v2) devicePrimaryCtxRelease = nullptr;
  decltype(&::cuCtxSetCurrent) ctxSetCurrent = nullptr;
  decltype(&::cuModuleLoadDataEx) moduleLoadDataEx = nullptr;
  decltype(&::cuModuleGetFunction) moduleGetFunction = nullptr;
  decltype(&::cuModuleUnload) moduleUnload = nullptr;
  decltype(&::cuLaunchKernel) launchKernel = nullptr;
  decltype(&::cuMemAlloc_v2) memAlloc = nullptr;
  decltype(&::cuMemFree_v2) memFree = nullptr;
  decltype(&::cuMemcpyHtoD_v2) memcpyHtoD = nullptr;
  decltype(&::cuMemcpyDtoH_v2) memcpyDtoH = nullptr;
  decltype(&::cuStreamCreate) streamCreate = nullptr;
  decltype(&::cuStreamSynchronize) streamSynchronize = nullptr;
  decltype(&::cuStreamDestroy_v2) streamDestroy = nullptr;
  decltype(&::cuMemcpyHtoDAsync_v2) memcpyHtoDAsync = nullptr;
  decltype(&::cuMemcpyDtoHAsync_v2) memcpyDtoHAsync = nullptr;
  decltype(&::cuMemcpyDtoDAsync_v2) memcpyDtoDAsync = nullptr;
  decltype(&::cuMemsetD8Async) memsetD8Async = nullptr;
  decltype(&::cuMemsetD16Async) memsetD16Async = nullptr;
  decltype(&::cuMemsetD32Async) memsetD32Async = nullptr;
  decltype(&::cuMemsetD2D32Async) memsetD2D32Async = nullptr;
  decltype(&::cuMemGetInfo_v2) memGetInfo = nullptr;
  decltype(&::cuStreamBeginCapture_v2) streamBeginCapture = nullptr;
  decltype(&::cuStreamEndCapture) streamEndCapture = nullptr;
  decltype(&::cuGraphInstantiateWithFlags) graphInstantiate = nullptr;
  decltype(&::cuGraphLaunch) graphLaunch = nullptr;
  decltype(&::cuGraphExecDestroy) graphExecDestroy = nullptr;
  decltype(&::cuGraphDestroy) graphDestroy = nullptr;
  decltype(&::cuGetErrorString) getErrorString = nullptr;
  decltype(&::cuGetErrorName) getErrorName = nullptr;
};

/// dlopen(library, RTLD_NOW | RTLD_LOCAL) for the libraries rcjit loads at run time (the driver,
/// cuBLAS); nullptr with `reason` set to "<library> not found: <dlerror>" when it fails.
void *openLibrary(const std::string &library, std::string &reason);

/// Resolves `name` in `lib` into `slot`; appends the name to `missing` (comma separated) when
/// the library lacks it.
void resolveSymbol(void *lib, const char *name, void *&slot, std::string &missing);

/// What the probes of cuBLAS and NCCL share: opens `library` into `out` (a struct with
/// library, handle, api and reason members) and resolves its entry points with
/// resolve(handle, api, missing). False with out.reason set and out.api empty where the library
/// is missing or lacks an entry point; `what` names the library in that message.
template <class Load, class Resolve>
bool openAndResolve(Load &out, const std::string &library, Resolve resolve, const char *what) {
  out.library = library;
  out.handle = openLibrary(library, out.reason);
  if (!out.handle) return false;
  std::string missing;
  resolve(out.handle, out.api, missing);
  if (missing.empty()) return true;
  out.reason = library + ": missing entry point" +
               (missing.find(',') == std::string::npos ? " " : "s ") + missing + " (not " + what +
               ", or one older than rcjit supports)";
  out.api = decltype(out.api){};
  return false;
}
template <class Fn> void resolve(void *lib, const char *name, Fn &slot, std::string &missing) {
  void *p = nullptr;
  resolveSymbol(lib, name, p, missing);
  slot = reinterpret_cast<Fn>(p);
}

/// The outcome of loading a driver library: the entry points when usable, else why not.
struct DriverLoad {
  DriverApi api;          // every entry set when `reason` is empty
  std::string reason;     // empty: loaded, cuInit succeeded and a device exists
  int deviceCount = 0;    // devices cuDeviceGetCount reported
  int driverVersion = 0;  // cuDriverGetVersion, e.g. 12040 for CUDA 12.4
  void *handle = nullptr; // the dlopen handle (never closed)
};

/// Loads `library` (a soname or a path) and probes it: dlopen, every entry point, cuInit(0),
/// cuDeviceGetCount > 0. Never throws; a failure is a DriverLoad with `reason` set, e.g.
/// "libcuda.so.1 not found: <dlerror>" or "cuInit failed: CUDA_ERROR_NO_DEVICE (...)".
/// The process-wide driver is probeDriver(driverLibraryName()), done once; tests may probe
/// other libraries (each call dlopens again).
DriverLoad probeDriver(const std::string &library);

/// "libcuda.so.1", or $RCJIT_CUDA_DRIVER when set (read once, at the first use of CUDA).
std::string driverLibraryName();

/// The process-wide driver, or nullptr when CUDA cannot be used (see unavailableReason()).
const DriverApi *driver();

/// Why CUDA cannot be used in this process; empty when it can. Computed once.
const std::string &unavailableReason();

/// Throws rcjit::Error(unavailableReason()) when CUDA cannot be used; else returns the driver.
const DriverApi &requireCuda();

/// Throws rcjit::Error "<what>: CUDA_ERROR_NAME (description)" unless r is CUDA_SUCCESS.
/// Uses cuGetErrorName/cuGetErrorString of the process-wide driver when it is loaded.
void check(CUresult r, const char *what);

/// "CUDA_ERROR_NAME (description)" for a result, through `api` (which may be null: then
/// only the number is known).
std::string describeResult(const DriverApi *api, CUresult r);

/// What rcjit needs to know about one device.
struct DeviceInfo {
  int ordinal = 0;
  std::string name; // e.g. "NVIDIA H100 80GB HBM3"
  int major = 0;    // compute capability
  int minor = 0;
  std::string arch; // "sm_90": archName(major, minor)
  int multiprocessors = 0;
  int driverVersion = 0;    // e.g. 12040
  int driverPtxVersion = 0; // the newest PTX ISA the driver JIT-compiles (driverPtxIsa)
};

/// Queries device `ordinal` of the process-wide driver. Throws rcjit::Error (requireCuda's
/// message, or the failing call) when it cannot.
DeviceInfo deviceInfo(int ordinal = 0);

/// "sm_<major><minor>", e.g. archName(9, 0) == "sm_90".
std::string archName(int major, int minor);

/// The newest PTX ISA version (10 * major + minor, e.g. 85 for PTX 8.5) that a driver of
/// version `driverVersion` (cuDriverGetVersion's 1000 * major + 10 * minor) can JIT-compile.
/// 0 for drivers older than CUDA 9.0.
int driverPtxIsa(int driverVersion);

} // namespace rcjit::cuda
