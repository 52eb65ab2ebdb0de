// The Collective ops of the IR run through rcjit::dist: the eager target's kernel (blocking)
// and the compiled CPU program's start step (non-blocking, waited for before the first read).
#include "dist/IrCollectives.h"

#include <string>

#include <rcjit/Autograd.h>
#include <rcjit/Error.h>

#include "dist/Comm.h"
#include "tracer/OpCases.h"
#include "tracer/Tracer.h"

namespace rcjit::dist::detail {

namespace {

ReduceOp irReduceOp(OpKind op, const Attrs &a) {
  if (a.reduce < 0 || a.reduce > 2) {
    throw Error(std::string(opName(op)) + ": reduce " + std::to_string(a.reduce) +
                " is not sum (0), mean (1) or max (2)");
  }
  return static_cast<ReduceOp>(a.reduce);
}

void checkIrWorld(OpKind op, const Attrs &a) {
  const int world = world_size();
  if (a.world != world) {
    throw Error(std::string(opName(op)) + ": the graph was made for a world of " +
                std::to_string(a.world) + " ranks, but this job has " + std::to_string(world) +
                " (a graph with collectives is specific to its world size: trace and compile "
                "it in the job that runs it)");
  }
}

} // namespace

Attrs collectiveAttrs(int64_t dim, ReduceOp reduce, int root) {
  Attrs a;
  a.world = world_size();
  a.dim = dim;
  a.reduce = static_cast<int64_t>(reduce);
  a.root = root;
  return a;
}

Work startCollectiveOp(OpKind op, const Tensor &x, const Attrs &a) {
  checkIrWorld(op, a);
  TracerPause untraced; // the copies and reshapes below are no ops of a trace
  NoGradGuard noGrad;
  switch (op) {
  case OpKind::all_reduce: {
    Tensor buffer = x.clone(); // reduced in place: the node's own value, x is left alone
    return all_reduce_async(buffer, irReduceOp(op, a));
  }
  case OpKind::all_gather:
    return all_gather_async(x, a.dim);
  case OpKind::reduce_scatter:
    return reduce_scatter_async(x, a.dim);
  case OpKind::broadcast: {
    Tensor buffer = x.clone();
    return broadcast_async(buffer, static_cast<int>(a.root));
  }
    RCJIT_OP_CASES(Source, Unary, Binary, Compare, Where, Reduce, Normalize, Matmul, Nn, View, Copy)
    break;
  }
  throw Error(std::string(opName(op)) + " is not a collective (internal error)");
}

Tensor runCollectiveOp(OpKind op, const Tensor &x, const Attrs &a, const TensorMeta &out) {
  Tensor r;
  {
    Work w = startCollectiveOp(op, x, a);
    TracerPause untraced;
    r = w.wait();
  }
  if (r.dtype() != out.dtype || r.shape() != out.shape) {
    throw Error(std::string(opName(op)) + ": the collective gave " +
                std::string(dtypeName(r.dtype())) + shapeStr(r.shape()) + ", the graph expects " +
                std::string(dtypeName(out.dtype)) + shapeStr(out.shape) + " (internal error)");
  }
  return r;
}

} // namespace rcjit::dist::detail
