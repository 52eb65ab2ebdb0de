// Before every collective the ranks swap one fixed-size record describing what each is
// about to do (collective, dtype, shape, op, root, dim) and compare them, so that a
// mismatch is the same rcjit::Error on every rank instead of a hang or garbage.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <rcjit/Dist.h>

#include "dist/Comm.h"

namespace rcjit::dist::detail {

enum class Kind : int32_t {
  all_reduce,
  all_gather,
  reduce_scatter,
  broadcast,
  barrier,
  gradients,  // all_reduce_gradients
  parameters, // broadcast_parameters
};
const char *kindName(Kind k);

/// What makes a rank's call impossible by itself; reported by every rank after the swap.
enum class Problem : int32_t {
  none,
  undefined,
  traced,
  notCpu,
  dtype,
  meanOfIntegers,
  tooManyDims,
  badDim,
  tooLarge,
  badRoot,
  badBucket,
  noDevice, // a cuda tensor where NCCL or the GPU cannot be used (dist/DeviceCollectives.h)
};

constexpr int kMaxDims = 8;

/// One rank's description of its call. Plain data, swapped as bytes (every rank runs the
/// same binary). For a list of tensors (`gradients`, `parameters`): dims[0] the number of
/// tensors, dims[1] their elements, dims[2] a hash of their dtypes and shapes.
struct Record {
  int32_t kind = 0, op = 0, dtype = -1, problem = 0, root = 0, ndim = 0;
  // the tensor's device kind (0 cpu, 1 cuda: NCCL), and whether this rank makes its NCCL
  // communicator in this call (every rank must)
  int32_t device = 0, fresh = 0;
  int64_t dim = 0;
  int64_t dims[kMaxDims] = {};
};

/// The record of a tensor collective on `t`; a Problem found from `t` alone is filled in,
/// and `dim` is normalized (a negative dim counts from the end).
Record tensorRecord(Kind kind, const Tensor &t, ReduceOp op, int64_t dim, int root, const Comm &c);
/// The record of a collective over a list of tensors (each a CPU tensor of at most 2^31-1
/// elements; of a reducible dtype when `reduces`).
Record listRecord(Kind kind, const std::vector<Tensor> &ts, bool reduces);
/// "f32 [4, 5]" (or the gradients' summary, or "no tensor").
std::string describe(const Record &r);
/// "dist::all_reduce (rank 1 of 2, f32 [4, 5])": how every error message of the call starts.
std::string context(const Record &r, const Comm &c);
/// Swaps the records of every rank (MPI_Allgather) and throws the same rcjit::Error on every
/// rank when any rank reported a Problem or the records disagree; the message names the
/// ranks and what each passed. The caller holds lockMpi().
void agree(const Record &mine, const Comm &c);

} // namespace rcjit::dist::detail
