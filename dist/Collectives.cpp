// rcjit::dist's collectives on tensors: the shape check, then MPI's non-blocking
// collective on a contiguous buffer (NCCL's for cuda tensors); the blocking forms wait at once.
#include "dist/Collectives.h"

#include <chrono>
#include <functional>

#include <rcjit/Autograd.h>
#include <rcjit/Error.h>
#include <rcjit/Ops.h>

#include "dist/Agreement.h"
#include "dist/DeviceCollectives.h"
#include "dist/IrCollectives.h"
#include "tracer/OpsInternal.h"
#include "tracer/TensorImpl.h"
#include "tracer/Tracer.h"

namespace rcjit::dist {

struct Work::State {
  std::string context; // starts every error message
  MPI_Request request = MPI_REQUEST_NULL;
  std::vector<Tensor> keep;         // what MPI reads or writes until the request is done
  std::function<Tensor()> finish;   // after the transfer: mean, write back, reshape
  std::function<void()> deviceWait; // cuda tensors: waits for NCCL on the device's stream
  Tensor result;
  bool finished = false;
  std::string error; // a failed wait, thrown again by later waits
  double waitSeconds = 0;
};

Work::Work() = default;
Work::Work(std::unique_ptr<State> state) : state_(std::move(state)) {}
Work::Work(Work &&) noexcept = default;
Work &Work::operator=(Work &&other) noexcept {
  if (this != &other) {
    if (state_ && !state_->finished) {
      try {
        wait();
      } catch (const Error &) { // lost, as documented: call wait() to see it
      }
    }
    state_ = std::move(other.state_);
  }
  return *this;
}

Work::~Work() {
  if (state_ && !state_->finished) {
    try {
      wait();
    } catch (const Error &) { // lost, as documented: call wait() to see it
    }
  }
}

Tensor Work::wait() {
  if (!state_) return Tensor();
  State &s = *state_;
  if (!s.error.empty()) throw Error(s.error);
  if (s.finished) return s.result;
  {
    auto lock = detail::lockMpi();
    auto t0 = std::chrono::steady_clock::now();
    int rc = MPI_SUCCESS;
    try {
      rc = detail::waitRequest(s.request, "the transfer", s.context);
    } catch (const Error &e) { // timed out: the request is abandoned with the job
      s.finished = true;
      s.error = e.what();
      // MPI may still write into the buffers: they are left allocated for the process's life
      new std::vector<Tensor>(std::move(s.keep)); // NOLINT: leaked on purpose
      throw;
    }
    s.waitSeconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (rc != MPI_SUCCESS) {
      s.finished = true;
      s.keep.clear();
      try {
        detail::checkMpi(rc, "MPI_Wait", s.context);
      } catch (const Error &e) {
        s.error = e.what();
        throw;
      }
    }
  }
  if (s.deviceWait) {
    try {
      s.deviceWait();
    } catch (const Error &e) {
      s.finished = true;
      s.error = e.what();
      throw;
    }
  }
  NoGradGuard noGrad;
  s.result = s.finish ? s.finish() : Tensor();
  s.finished = true;
  s.keep.clear();
  s.finish = nullptr;
  return s.result;
}

bool Work::test() {
  if (!state_ || state_->finished) return true;
  auto lock = detail::lockMpi();
  int flag = 0;
  detail::checkMpi(MPI_Test(&state_->request, &flag, MPI_STATUS_IGNORE), "MPI_Test",
                   state_->context);
  return flag != 0;
}

double Work::waitSeconds() const { return state_ ? state_->waitSeconds : 0; }

namespace {

using detail::checkMpi;
using detail::Comm;
using detail::Kind;
using detail::Record;

int count(const Tensor &t) { return static_cast<int>(t.numel()); } // checked in the record

// `buffer` /= n, elementwise (f32 or f64, contiguous).
void divideInPlace(const Tensor &buffer, int n) {
  const int64_t len = buffer.numel();
  if (buffer.dtype() == DType::f32) {
    float *p = buffer.data<float>();
    const float d = static_cast<float>(n);
    for (int64_t i = 0; i < len; ++i) p[i] /= d;
  } else {
    double *p = buffer.data<double>();
    for (int64_t i = 0; i < len; ++i) p[i] /= n;
  }
}

// `target` now holds what MPI wrote into `buffer`: written back when buffer is a copy,
// else its version bumped as copy_ does (a value saved for a pending backward goes stale).
void writeBack(Tensor &target, const Tensor &buffer) {
  if (buffer.impl() == target.impl()) {
    target.impl()->storage->version.fetch_add(1, std::memory_order_relaxed);
  } else {
    target.copy_(buffer);
  }
}

std::unique_ptr<Work::State> newState(const std::string &context) {
  auto s = std::make_unique<Work::State>();
  s->context = context;
  return s;
}

// Enqueues a cuda tensor's collective with NCCL (DeviceCollectives.h) on the device's
// stream; s's wait() then waits for the stream, bounded by the collective timeout.
void startOnDevice(Work::State &s, Kind kind, ReduceOp op, int root, const Tensor &in,
                   const Tensor &out, const Comm &c) {
  void *comm = detail::communicatorFor(in, c, s.context);
  const detail::DeviceCollectives *d = detail::deviceCollectives();
  d->start(comm, kind, op, root, in, out);
  s.deviceWait = [d, comm, device = in.device(), ctx = s.context] {
    d->wait(comm, device, detail::timeoutSeconds(), ctx);
  };
}

// Checks the call with every rank (an Error on all of them when any disagrees) and returns
// the context of its error messages. The caller holds lockMpi().
std::string agreeOn(const Record &r, const Comm &c) {
  detail::agree(r, c);
  return detail::context(r, c);
}

} // namespace

Work detail::startAllReduce(const Tensor &buffer, ReduceOp op, const std::string &context,
                            const Comm &c, std::function<Tensor()> then) {
  auto s = newState(context);
  s->keep = {buffer};
  checkMpi(MPI_Iallreduce(MPI_IN_PLACE, buffer.data_ptr(), count(buffer),
                          reduceType(buffer.dtype()), op == ReduceOp::max ? MPI_MAX : MPI_SUM,
                          c.comm, &s->request),
           "MPI_Iallreduce", context);
  const int size = c.size;
  s->finish = [buffer, op, size, then = std::move(then)] {
    if (op == ReduceOp::mean) divideInPlace(buffer, size);
    return then ? then() : buffer;
  };
  return Work(std::move(s));
}

Work all_reduce_async(Tensor &t, ReduceOp op) {
  auto lock = detail::lockMpi();
  const Comm &c = detail::commLocked();
  const Record r = detail::tensorRecord(Kind::all_reduce, t, op, 0, 0, c);
  const std::string ctx = agreeOn(r, c);
  NoGradGuard noGrad;
  Tensor buffer = t.is_contiguous() ? t : t.contiguous();
  Tensor target = t;
  if (r.device) { // NCCL reduces in place, the mean too (ncclAvg)
    auto s = newState(ctx);
    s->keep = {buffer};
    startOnDevice(*s, Kind::all_reduce, op, 0, buffer, buffer, c);
    s->finish = [target, buffer]() mutable {
      writeBack(target, buffer);
      return target;
    };
    return Work(std::move(s));
  }
  return detail::startAllReduce(buffer, op, ctx, c, [target, buffer]() mutable {
    writeBack(target, buffer); // the reduced buffer lands in t
    return target;
  });
}

Work all_gather_async(const Tensor &t, int64_t dim) {
  auto lock = detail::lockMpi();
  const Comm &c = detail::commLocked();
  const Record r = detail::tensorRecord(Kind::all_gather, t, ReduceOp::sum, dim, 0, c);
  auto s = newState(agreeOn(r, c));
  NoGradGuard noGrad;
  Tensor in = t.contiguous();
  Shape gathered = t.shape();
  gathered.insert(gathered.begin(), c.size); // [world, t's shape...]
  Tensor out = Tensor::empty(gathered, t.dtype(), t.device());
  s->keep = {in, out};
  const MPI_Datatype type = detail::moveType(t.dtype());
  if (r.device) {
    startOnDevice(*s, Kind::all_gather, ReduceOp::sum, 0, in, out, c);
  } else {
    checkMpi(MPI_Iallgather(in.data_ptr(), count(in), type, out.data_ptr(), count(in), type, c.comm,
                            &s->request),
             "MPI_Iallgather", s->context);
  }
  const int64_t d = r.dim;
  Dims result(t.shape().begin(), t.shape().end());
  result[static_cast<size_t>(d)] *= c.size;
  s->finish = [out, d, result] {
    if (d == 0) return out.reshape(result);
    // [world, s0, ..., sn] -> [s0, ..., world, s_d, ...]: rank r's block lands at r * s_d
    Dims order;
    for (int64_t i = 1; i <= d; ++i) order.push_back(i);
    order.push_back(0);
    for (int64_t i = d + 1; i < out.dim(); ++i) order.push_back(i);
    return permute(out, order).contiguous().reshape(result);
  };
  return Work(std::move(s));
}

Work reduce_scatter_async(const Tensor &t, int64_t dim) {
  auto lock = detail::lockMpi();
  const Comm &c = detail::commLocked();
  const Record r = detail::tensorRecord(Kind::reduce_scatter, t, ReduceOp::sum, dim, 0, c);
  auto s = newState(agreeOn(r, c));
  const int64_t d = r.dim, n = t.size(static_cast<int>(d));
  if (n % c.size != 0) { // the same on every rank: the shapes agree
    throw Error(s->context + ": dim " + std::to_string(d) + " has size " + std::to_string(n) +
                ", which " + std::to_string(c.size) + " ranks cannot split evenly");
  }
  NoGradGuard noGrad;
  // [..., n, ...] -> [world, ..., n / world, ...]: rank r's slice is block r
  Dims split(t.shape().begin(), t.shape().end());
  split[static_cast<size_t>(d)] = n / c.size;
  Dims blocked = split;
  blocked.insert(blocked.begin() + d, c.size);
  Tensor in = t.contiguous().reshape(blocked);
  if (d > 0) {
    Dims order = {d};
    for (int64_t i = 0; i < static_cast<int64_t>(blocked.size()); ++i) {
      if (i != d) order.push_back(i);
    }
    in = permute(in, order).contiguous();
  }
  Tensor out = Tensor::empty(Shape(split.begin(), split.end()), t.dtype(), t.device());
  s->keep = {in, out};
  if (r.device) {
    startOnDevice(*s, Kind::reduce_scatter, ReduceOp::sum, 0, in, out, c);
  } else {
    checkMpi(MPI_Ireduce_scatter_block(in.data_ptr(), out.data_ptr(), count(out),
                                       detail::reduceType(t.dtype()), MPI_SUM, c.comm, &s->request),
             "MPI_Ireduce_scatter_block", s->context);
  }
  s->finish = [out] { return out; };
  return Work(std::move(s));
}

Work broadcast_async(Tensor &t, int root) {
  auto lock = detail::lockMpi();
  const Comm &c = detail::commLocked();
  const Record r = detail::tensorRecord(Kind::broadcast, t, ReduceOp::sum, 0, root, c);
  auto s = newState(agreeOn(r, c));
  NoGradGuard noGrad;
  Tensor buffer = t.is_contiguous() ? t : t.contiguous();
  s->keep = {buffer};
  if (r.device) {
    startOnDevice(*s, Kind::broadcast, ReduceOp::sum, root, buffer, buffer, c);
  } else {
    checkMpi(MPI_Ibcast(buffer.data_ptr(), count(buffer), detail::moveType(t.dtype()), root, c.comm,
                        &s->request),
             "MPI_Ibcast", s->context);
  }
  Tensor target = t;
  const bool receives = c.rank != root;
  s->finish = [target, buffer, receives]() mutable {
    if (receives) writeBack(target, buffer);
    return target;
  };
  return Work(std::move(s));
}

namespace {
// Inside a trace a collective is a node of the graph (an op of the IR): recorded like any op,
// run at trace time by the eager target (not in a shape-only trace), compiled as its own step.
Tensor tracedCollective(OpKind op, const Tensor &t, int64_t dim, ReduceOp reduce, int root) {
  if (t.defined() && dim < 0) dim += t.dim(); // the IR's dims are normalized
  return rcjit::detail::applyOp(op, {t}, detail::collectiveAttrs(dim, reduce, root));
}
} // namespace

void all_reduce(Tensor &t, ReduceOp op) {
  if (Tracer::current()) {
    t = tracedCollective(OpKind::all_reduce, t, 0, op, 0);
    return;
  }
  all_reduce_async(t, op).wait();
}
Tensor all_gather(const Tensor &t, int64_t dim) {
  if (Tracer::current()) return tracedCollective(OpKind::all_gather, t, dim, ReduceOp::sum, 0);
  return all_gather_async(t, dim).wait();
}
Tensor reduce_scatter(const Tensor &t, int64_t dim) {
  if (Tracer::current()) return tracedCollective(OpKind::reduce_scatter, t, dim, ReduceOp::sum, 0);
  return reduce_scatter_async(t, dim).wait();
}
void broadcast(Tensor &t, int root) {
  if (Tracer::current()) {
    t = tracedCollective(OpKind::broadcast, t, 0, ReduceOp::sum, root);
    return;
  }
  broadcast_async(t, root).wait();
}

void barrier() {
  auto lock = detail::lockMpi();
  const Comm &c = detail::commLocked();
  Record r;
  r.kind = static_cast<int32_t>(Kind::barrier);
  // no op of the IR: a compiled function would run it only while tracing
  if (Tracer::current()) r.problem = static_cast<int32_t>(detail::Problem::traced);
  const std::string ctx = agreeOn(r, c);
  MPI_Request request = MPI_REQUEST_NULL;
  checkMpi(MPI_Ibarrier(c.comm, &request), "MPI_Ibarrier", ctx);
  checkMpi(detail::waitRequest(request, "MPI_Ibarrier", ctx), "MPI_Ibarrier", ctx);
}

} // namespace rcjit::dist
