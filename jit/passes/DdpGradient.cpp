// ddp_gradient_pass: compiled data parallelism as a graph pass over a training entry's
// backward graph (bucketed all_reduce(mean) nodes placed as soon as a bucket is complete).
#include <rcjit/DistPasses.h>

#include <algorithm>
#include <string>
#include <vector>

#include <rcjit/Dist.h>
#include <rcjit/Error.h>

#include "jit/passes/GraphBuilder.h"

namespace rcjit::dist {

namespace {

struct DdpGradient {
  size_t output; // index in Graph::outputs
  int node;      // the node computing it
  int64_t numel;
  int64_t bytes;
};

// The gradients of `g` (its outputs) cut into buckets in node order.
std::vector<std::vector<DdpGradient>> ddpBuckets(const Graph &g, int64_t bucketBytes) {
  std::vector<DdpGradient> grads;
  for (size_t k = 0; k < g.outputs.size(); ++k) {
    const Node &n = g.nodes[static_cast<size_t>(g.outputs[k])];
    if (n.dtype != DType::f32 && n.dtype != DType::f64) {
      throw Error("ddp_gradient_pass: gradient " + std::to_string(k) + " is " +
                  std::string(dtypeName(n.dtype)) +
                  " (all_reduce takes f32 and f64 gradients; train in f32, or with Autocast, "
                  "which keeps parameters and their gradients in f32)");
    }
    int64_t numel = 1;
    for (const Dim &d : n.shape) {
      if (d.isSymbolic()) {
        throw Error("ddp_gradient_pass: gradient " + std::to_string(k) +
                    " has a symbolic size (parameters have static shapes)");
      }
      numel *= d.value;
    }
    grads.push_back({k, g.outputs[k], numel, numel * static_cast<int64_t>(dtypeSize(n.dtype))});
  }
  std::sort(grads.begin(), grads.end(), [](const DdpGradient &a, const DdpGradient &b) {
    return a.node != b.node ? a.node < b.node : a.output < b.output;
  });
  std::vector<std::vector<DdpGradient>> buckets;
  int64_t filled = 0;
  for (const DdpGradient &d : grads) {
    if (buckets.empty() || filled >= bucketBytes ||
        g.nodes[static_cast<size_t>(buckets.back().front().node)].dtype !=
            g.nodes[static_cast<size_t>(d.node)].dtype) {
      buckets.emplace_back();
      filled = 0;
    }
    buckets.back().push_back(d);
    filled += d.bytes;
  }
  return buckets;
}

Graph ddpRewrite(const Graph &g, int64_t bucketBytes, int64_t world) {
  const std::vector<std::vector<DdpGradient>> buckets = ddpBuckets(g, bucketBytes);
  std::vector<std::vector<size_t>> completes(g.nodes.size()); // node -> buckets it completes
  for (size_t b = 0; b < buckets.size(); ++b)
    completes[static_cast<size_t>(buckets[b].back().node)].push_back(b);
  GraphBuilder b(g);
  std::vector<int> averaged(g.outputs.size(), -1);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    b.begin(static_cast<int>(i));
    b.copy(static_cast<int>(i));
    for (size_t bucket : completes[i]) {
      std::vector<int> flat;
      for (const DdpGradient &d : buckets[bucket]) {
        const int id = b.at(d.node);
        Attrs r;
        r.dims = {d.numel};
        flat.push_back(b.node(id).shape.size() == 1 ? id : b.emit(OpKind::reshape, {id}, r));
      }
      Attrs c;
      c.dim = 0;
      const int packed = flat.size() == 1 ? flat[0] : b.emit(OpKind::cat, flat, c);
      Attrs ar;
      ar.reduce = static_cast<int64_t>(ReduceOp::mean);
      ar.world = world;
      const int mean = b.emit(OpKind::all_reduce, {packed}, ar);
      int64_t offset = 0;
      for (const DdpGradient &d : buckets[bucket]) {
        int v = mean;
        if (buckets[bucket].size() > 1) {
          Attrs s;
          s.dim = 0;
          s.start = offset;
          s.end = offset + d.numel;
          v = b.emit(OpKind::slice, {v}, s);
        }
        const Node &n = g.nodes[static_cast<size_t>(d.node)];
        if (n.shape.size() != 1) {
          Attrs r;
          for (const Dim &dim : n.shape) r.dims.push_back(dim.value);
          v = b.emit(OpKind::reshape, {v}, r);
        }
        averaged[d.output] = v;
        offset += d.numel;
      }
    }
  }
  Graph out = b.finish();
  for (size_t k = 0; k < out.outputs.size(); ++k) {
    if (averaged[k] >= 0) out.outputs[k] = averaged[k];
  }
  return out;
}

} // namespace

ScheduledPassFn ddp_gradient_pass(int64_t bucket_bytes) {
  if (bucket_bytes <= 0) {
    throw Error("ddp_gradient_pass: bucket_bytes must be positive, got " +
                std::to_string(bucket_bytes));
  }
  return [bucket_bytes](const Graph &g, const PassContext &ctx) {
    // only a full-mode training entry's backward: a regional stage's or a segment's
    // backward also returns the gradients of activations, which are no parameters'
    const bool entryBackward = ctx.backward && ctx.graph.starts_with(ctx.function + " entry ") &&
                               ctx.graph.find(" stage ") == std::string::npos;
    if (!entryBackward || g.outputs.empty()) return g;
    return ddpRewrite(g, bucket_bytes, world_size());
  };
}

} // namespace rcjit::dist
