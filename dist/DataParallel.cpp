// Data-parallel training over rcjit::dist: the same starting weights on every rank, and
// gradients averaged over the ranks in buckets of non-blocking all_reduces.
#include <chrono>
#include <climits>
#include <string>
#include <vector>

#include <rcjit/Autograd.h>
#include <rcjit/Dist.h>
#include <rcjit/Error.h>
#include <rcjit/Ops.h>

#include "dist/Agreement.h"
#include "dist/Collectives.h"
#include "tracer/Tracer.h"

namespace rcjit::dist {

using detail::secondsSince;

namespace {

// A view of `count` elements of `flat` from element `offset`, shaped `shape`.
Tensor viewOf(const Tensor &flat, int64_t offset, const Shape &shape) {
  auto *base = static_cast<char *>(flat.data_ptr());
  return Tensor::from_blob(base + offset * static_cast<int64_t>(dtypeSize(flat.dtype())), shape,
                           flat.dtype());
}

// One bucket: gradients [first, last) of the list, `elems` elements, packed into `flat`.
struct Bucket {
  size_t first = 0, last = 0;
  int64_t elems = 0;
  Tensor flat;
  Work work;
};

// The buckets of `grads` in order: gradients of one dtype up to `bucketBytes` (at least one
// gradient, at most INT_MAX elements where more than one), as [first, last) ranges.
std::vector<Bucket> bucketsOf(const std::vector<Tensor> &grads, int64_t bucketBytes) {
  std::vector<Bucket> out;
  for (size_t i = 0; i < grads.size();) {
    const DType dt = grads[i].dtype();
    const auto elemSize = static_cast<int64_t>(dtypeSize(dt));
    int64_t elems = 0;
    size_t j = i;
    while (j < grads.size() && grads[j].dtype() == dt) {
      const int64_t next = elems + grads[j].numel();
      if (j > i && (next * elemSize > bucketBytes || next > INT_MAX)) break;
      elems = next;
      ++j;
    }
    out.push_back(Bucket{i, j, elems, Tensor(), Work()});
    i = j;
  }
  return out;
}

// all_reduce_gradients inside a trace (a compiled whole training step, `rcjit train --modes
// whole --dist ddp`): the same buckets as ops of the IR, each bucket's gradients flattened
// and concatenated, one all_reduce(mean) node, sliced back and written into each grad()
// (copy_, so the step's update reads the mean). The compiled step starts each bucket's
// all_reduce as soon as its gradients are computed and waits before their first reader;
// the ranks' shapes are checked by the compiled collectives as they run (no agreement
// round at trace time). Local problems are Errors here.
GradSyncStats tracedAllReduceGradients(const std::vector<Tensor> &grads, int64_t bucketBytes) {
  const std::string who = "dist::all_reduce_gradients inside a compiled function: ";
  if (bucketBytes <= 0)
    throw Error(who + "bucket_bytes must be positive, got " + std::to_string(bucketBytes));
  for (size_t k = 0; k < grads.size(); ++k) {
    const Tensor &g = grads[k];
    if (!g.device().is_cpu())
      throw Error(who + "gradient " + std::to_string(k) + " is not on the CPU");
    if (g.dtype() != DType::f32 && g.dtype() != DType::f64) {
      throw Error(who + "gradient " + std::to_string(k) + " is " +
                  std::string(dtypeName(g.dtype())) +
                  " (the mean takes f32 and f64 gradients; train in f32, or with Autocast, "
                  "which keeps parameters and their gradients in f32)");
    }
  }
  GradSyncStats stats;
  for (const Bucket &b : bucketsOf(grads, bucketBytes)) {
    std::vector<Tensor> flat;
    for (size_t k = b.first; k < b.last; ++k) flat.push_back(reshape(grads[k], {-1}));
    Tensor packed = flat.size() == 1 ? flat[0] : cat(flat, 0);
    all_reduce(packed, ReduceOp::mean); // a node: rebinds `packed` to the mean
    int64_t offset = 0;
    for (size_t k = b.first; k < b.last; ++k) {
      const Tensor &g = grads[k];
      Tensor part = b.last - b.first == 1 ? packed : slice(packed, 0, offset, offset + g.numel());
      Tensor(g).copy_(reshape(part, g.shape()));
      offset += g.numel();
    }
    stats.bytes += b.elems * static_cast<int64_t>(dtypeSize(grads[b.first].dtype()));
    ++stats.buckets;
  }
  return stats;
}

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
  if (Tracer::current()) return tracedAllReduceGradients(grads, bucket_bytes);
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
  std::vector<Bucket> buckets = bucketsOf(grads, bucket_bytes);
  for (size_t n = 0; n < buckets.size(); ++n) {
    Bucket &b = buckets[n];
    const DType dt = grads[b.first].dtype();
    b.flat = Tensor::empty({b.elems}, dt);
    int64_t offset = 0;
    for (size_t k = b.first; k < b.last; ++k) {
      viewOf(b.flat, offset, grads[k].shape()).copy_(grads[k]);
      offset += grads[k].numel();
    }
    {
      auto lock = detail::lockMpi();
      b.work = detail::startAllReduce(b.flat, ReduceOp::mean, ctx + " bucket " + std::to_string(n),
                                      detail::commLocked());
    }
    stats.bytes += b.elems * static_cast<int64_t>(dtypeSize(dt));
    // Open MPI moves data inside MPI calls: nudge the buckets in flight while packing
    for (size_t e = 0; e < n; ++e) buckets[e].work.test();
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
