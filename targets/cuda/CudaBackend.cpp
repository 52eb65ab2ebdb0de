// The CUDA device backend: device memory from the caching allocator, driver copies, and
// eager ops as one-op compiled programs; registered with the tensor runtime at load time.
#include "targets/cuda/CudaEager.h"
#include "targets/cuda/CudaRuntime.h"
#include "tracer/DeviceBackend.h"

namespace rcjit::cuda {

namespace {

CUdeviceptr dptr(const void *p) { return reinterpret_cast<CUdeviceptr>(p); }

class CudaBackend final : public detail::DeviceBackend {
public:
  std::shared_ptr<detail::Storage> allocate(size_t nbytes, Device d) override {
    DeviceContext &ctx = DeviceContext::get(d.index);
    auto s = std::make_shared<detail::Storage>();
    s->data = reinterpret_cast<void *>(ctx.allocate(nbytes));
    s->nbytes = nbytes;
    s->device = d;
    s->release = [&ctx, nbytes](void *q) { ctx.release(dptr(q), nbytes); };
    return s;
  }
  void copyToHost(void *dst, const void *src, size_t bytes, Device d) override {
    DeviceContext::get(d.index).copyToHost(dst, dptr(src), bytes);
  }
  void copyToDevice(void *dst, const void *src, size_t bytes, Device d) override {
    DeviceContext::get(d.index).copyToDevice(dptr(dst), src, bytes);
  }
  void copyOnDevice(void *dst, const void *src, size_t bytes, Device d) override {
    DeviceContext::get(d.index).copyOnDevice(dptr(dst), dptr(src), bytes);
  }
  Tensor runOp(OpKind op, const std::vector<Tensor> &in, const Attrs &a,
               const TensorMeta &out) override {
    return runEagerOp(op, in, a, out);
  }
  Tensor runSource(OpKind op, const Shape &shape, DType dtype, const Attrs &a, Device d) override {
    return cuda::runSource(op, shape, dtype, a, d);
  }
};

const bool registered = [] {
  static CudaBackend backend; // lives for the process, like the device contexts
  detail::registerDeviceBackend(Device::Kind::cuda, &backend);
  return true;
}();

} // namespace

} // namespace rcjit::cuda
