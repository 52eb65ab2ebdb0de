// Data-parallel training over rcjit::dist: the same starting weights on every rank, and
// gradients averaged over the ranks in buckets of non-blocking all_reduces.
#include <chrono>
#include <climits>

#include <rcjit/Autograd.h>
#include <rcjit/Dist.h>
#include <rcjit/Error.h>

#include "dist/Agreement.h"
#include "dist/Collectives.h"

namespace rcjit::dist {

using detail::secondsSince;

namespace {

// A view of `count` elements of `flat` from element `offset`, shaped `shape`.
Tensor viewOf(const Tensor &flat, int64_t offset, const Shape &shape) {
  auto *base = static_cast<char *>(flat.data_ptr());
  return Tensor::from_blob(base + offset * static_cast<int64_t>(dtypeSize(flat.dtype())), shape,
                           flat.dtype());
}

// One bucket: gradients [first, last) of the list, packed into `flat`.
struct Bucket {
  size_t first = 0, last = 0;
  Tensor flat;
  Work work;
};

} // namespace

void broadcast_parameters(const std::vector<Tensor> &params, int root) {
  {
    auto lock = detail::lockMpi();
    const detail::Comm &c = detail::commLocked();
    detail::agree(detail::listRecord(detail::Kind::parameters, params, false), c);
  }
  std::vector<Work> works;
  works.reserve(params.size());
  for (const Tensor &p : params) {
    Tensor handle = p; // the same tensor: broadcast writes into p's storage
    works.push_back(broadcast_async(handle, root));
  }
  for (Work &w : works) w.wait();
}

GradSyncStats all_reduce_gradients(const std::vector<Tensor> &params, int64_t bucket_bytes) {
  const auto start = std::chrono::steady_clock::now();
  GradSyncStats stats;
  std::vector<Tensor> grads;
  for (const Tensor &p : params) {
    Tensor g = p.defined() ? p.grad() : Tensor();
    if (g.defined()) grads.push_back(g);
  }
  std::string ctx;
  {
    auto lock = detail::lockMpi();
    const detail::Comm &c = detail::commLocked();
    detail::Record r = detail::listRecord(detail::Kind::gradients, grads, true);
    if (bucket_bytes <= 0 && r.problem == 0) {
      r.problem = static_cast<int32_t>(detail::Problem::badBucket);
    }
    const auto t0 = std::chrono::steady_clock::now();
    detail::agree(r, c);
    stats.waitSeconds += secondsSince(t0);
    ctx = detail::context(r, c);
  }
  NoGradGuard noGrad;
  std::vector<Bucket> buckets;
  for (size_t i = 0; i < grads.size();) {
    // the next bucket: gradients of one dtype up to bucket_bytes (at least one gradient)
    const DType dt = grads[i].dtype();
    const auto elemSize = static_cast<int64_t>(dtypeSize(dt));
    Bucket b;
    b.first = i;
    int64_t elems = 0;
    size_t j = i;
    while (j < grads.size() && grads[j].dtype() == dt) {
      const int64_t next = elems + grads[j].numel();
      if (j > i && (next * elemSize > bucket_bytes || next > INT_MAX)) break;
      elems = next;
      ++j;
    }
    b.last = j;
    b.flat = Tensor::empty({elems}, dt);
    int64_t offset = 0;
    for (size_t k = i; k < j; ++k) {
      viewOf(b.flat, offset, grads[k].shape()).copy_(grads[k]);
      offset += grads[k].numel();
    }
    {
      auto lock = detail::lockMpi();
      b.work = detail::startAllReduce(b.flat, ReduceOp::mean,
                                      ctx + " bucket " + std::to_string(buckets.size()),
                                      detail::commLocked());
    }
    stats.bytes += elems * elemSize;
    // Open MPI moves data inside MPI calls: nudge the buckets in flight while packing
    for (Bucket &earlier : buckets) earlier.work.test();
    buckets.push_back(std::move(b));
    i = j;
  }
  for (Bucket &b : buckets) {
    b.work.wait();
    stats.waitSeconds += b.work.waitSeconds();
    int64_t offset = 0;
    for (size_t k = b.first; k < b.last; ++k) {
      grads[k].copy_(viewOf(b.flat, offset, grads[k].shape()));
      offset += grads[k].numel();
    }
  }
  stats.buckets = static_cast<int>(buckets.size());
  stats.totalSeconds = secondsSince(start);
  return stats;
}

} // namespace rcjit::dist
