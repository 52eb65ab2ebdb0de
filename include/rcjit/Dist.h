// rcjit::dist: collectives on tensors over MPI (Open MPI), and data-parallel training helpers.
//
// Every rank of an MPI job runs the same program; a collective is called by every rank in the
// same order with tensors of the same dtype and shape. Before each exchange the ranks swap a
// small fixed-size record (collective, dtype, shape, root, dim) and compare: a mismatch, or a
// tensor one rank cannot send (a cuda tensor, an unsupported dtype), is an rcjit::Error on
// every rank naming the ranks that disagree and their shapes, never a hang. Every MPI error
// is an rcjit::Error naming the collective, the rank and the shapes.
//
// Tensors: CPU tensors go through MPI; cuda tensors through NCCL (libnccl.so.2, loaded at
// run time; the unique id is sent over the MPI communicator; every rank's tensor must be on
// cuda, one device per rank: mixed devices are an Error on every rank, as is a cuda tensor
// where NCCL or the GPU cannot be used, naming the reason). all_reduce_gradients and
// broadcast_parameters take CPU tensors only. Any layout (a non-contiguous tensor is
// copied to a contiguous buffer and, for in-place collectives, written back). Reductions
// (all_reduce, reduce_scatter) take f32, f64, i32 and i64; f16, bf16 and bool are an Error
// (convert to f32 first); `mean` takes f32 and f64 only. broadcast and all_gather move any
// dtype.
//
// Inside a traced or compiled function (rcjit::compile, full or regional mode) the blocking
// all_reduce, all_gather, reduce_scatter and broadcast are ops of the IR (Ops.def's
// Collective category): they record a node (the in-place all_reduce and broadcast rebind the
// caller's Tensor to the node's value instead of writing the tensor passed), differentiate by
// the gradient rules (all_reduce sum/mean/max, all_gather <-> reduce_scatter, broadcast: the
// summed gradient at the root), and compile to a non-blocking step that is waited for just
// before the first step reading its result, so compute placed between them overlaps the
// transfer. Such a graph is made for the job's world size (the node's `world` attribute, a
// guard of the compiled entry); the rank is not in it, so every rank shares one compiled
// function. The *_async forms, barrier, broadcast_parameters and all_reduce_gradients inside
// a trace are an Error. A compiled step checks shapes with every rank as the eager calls do.
// The cuda target has no collectives (an Error when compiling for it). Outside a trace the
// collectives record no autograd.
//
// Thread-safety: the functions may be called from any thread; calls are serialized inside
// (MPI is initialized with MPI_THREAD_SERIALIZED). As with MPI, the ranks must issue their
// collectives in the same order.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include <rcjit/Tensor.h>

namespace rcjit::dist {

enum class ReduceOp { sum, mean, max };

/// Joins the job that the MPI launcher (mpirun) started, reading its environment: rank and
/// world size. Without a launcher the process is a world of 1 (Open MPI's singleton init).
/// Idempotent, and called by every other function here on first use; MPI_Finalize runs at
/// process exit. When the program already initialized MPI itself, rcjit uses that (and
/// leaves finalizing to the program). Throws rcjit::Error when MPI cannot start.
void init();
/// This process's rank in [0, world_size()).
int rank();
/// Number of ranks in the job (1 without a launcher).
int world_size();

/// Reduces `t` over all ranks, in place: every rank ends with the sum, the mean (sum divided
/// by world_size()) or the element-wise max.
void all_reduce(Tensor &t, ReduceOp op = ReduceOp::sum);
/// Every rank's `t`, concatenated along `dim` in rank order (a new tensor; `dim` may be
/// negative). The tensors must have the same shape on every rank.
Tensor all_gather(const Tensor &t, int64_t dim = 0);
/// The sum over ranks of `t`, split along `dim` into world_size() equal slices: rank r gets
/// slice r (a new tensor). `t.size(dim)` must be divisible by world_size().
Tensor reduce_scatter(const Tensor &t, int64_t dim = 0);
/// Copies `root`'s `t` into every rank's `t`, in place.
void broadcast(Tensor &t, int root = 0);
/// Returns when every rank has called barrier().
void barrier();

/// A pending non-blocking collective (MPI-3 MPI_Iallreduce and friends). The exchange of
/// the shape records is done when the collective starts (a short blocking step, so a
/// mismatch throws from the *_async call itself); the data moves while the caller computes.
/// Open MPI progresses the transfer inside MPI calls, so wait() or test() drive it.
///
/// wait() blocks until the collective is done and returns its result: the reduced or
/// broadcast tensor itself (the same Tensor the caller passed, now holding the result) or
/// the new gathered / scattered tensor. A second wait() returns the same result. An MPI
/// failure is an rcjit::Error from wait(). The input tensor must stay alive and unmodified
/// until wait() (the Work keeps a reference to it). Destroying a pending Work waits for it
/// (an error is then lost: call wait()). Movable, not copyable; not thread-safe itself.
class Work {
public:
  Work();
  ~Work();
  Work(Work &&) noexcept;
  Work &operator=(Work &&) noexcept;
  Work(const Work &) = delete;
  Work &operator=(const Work &) = delete;

  Tensor wait();
  /// Whether the collective has finished (without blocking); wait() is still needed for
  /// the result.
  bool test();
  /// Seconds spent blocked inside wait() so far.
  double waitSeconds() const;

  struct State;
  explicit Work(std::unique_ptr<State> state);

private:
  std::unique_ptr<State> state_;
};

Work all_reduce_async(Tensor &t, ReduceOp op = ReduceOp::sum);
Work all_gather_async(const Tensor &t, int64_t dim = 0);
Work reduce_scatter_async(const Tensor &t, int64_t dim = 0);
Work broadcast_async(Tensor &t, int root = 0);

// ---- data-parallel training ----

/// Copies `root`'s parameter values into every rank's parameters (in place, without
/// recording autograd): every rank starts from the same weights. The parameter lists must
/// match in count, dtypes and shapes across ranks (an Error otherwise).
void broadcast_parameters(const std::vector<Tensor> &params, int root = 0);

/// What all_reduce_gradients did.
struct GradSyncStats {
  int buckets = 0;        // non-blocking all_reduces started
  int64_t bytes = 0;      // gradient bytes reduced per rank
  double waitSeconds = 0; // blocked on communication: the shape check and the waits
  double totalSeconds = 0;
};

/// Replaces every parameter's grad() by its mean over the ranks, as data parallel training
/// needs after backward(): with each rank's loss the mean over its equal slice of the global
/// batch, the result is the gradient of the global batch's mean loss. The gradients are
/// packed, in parameter order, into buckets of about `bucket_bytes` (one dtype per bucket;
/// a larger gradient is a bucket of its own); each bucket's non-blocking all_reduce starts
/// as soon as it is packed, the next bucket is packed while it is in flight, and the
/// buckets are waited for and unpacked at the end. Parameters without a gradient are
/// skipped; which parameters have one must agree across ranks (checked once per call, an
/// Error otherwise). Gradients of f16/bf16 are an Error. Inside rcjit::compile (a whole
/// training step: zero_grad, the forward, backward(), this, the optimizer's step) it traces
/// into the same buckets as graph nodes (cat, one all_reduce(mean), slices written back into
/// grad()), so the compiled step averages the gradients between its backward and its
/// update; the returned stats then count buckets and bytes only (the waits are inside the
/// compiled code), and the ranks' shapes are checked by the compiled collectives as they run.
GradSyncStats all_reduce_gradients(const std::vector<Tensor> &params,
                                   int64_t bucket_bytes = int64_t{25} << 20);

} // namespace rcjit::dist
