// The pieces of dist::ZeroOptimizer: a unit of parameters flattened and cut into one slice
// per rank, and the moves between a unit's parameters and a flat buffer. Internal to dist/.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <rcjit/Dist.h>
#include <rcjit/Optim.h>
#include <rcjit/Zero.h>
#include <rcjit/nn.h>

namespace rcjit::dist::detail {

/// One parameter of a unit: its place in the unit's flat layout and, for stage 3, the module
/// members that hold it (a tied parameter registered twice has two).
struct ZeroMember {
  Shape shape;
  int64_t offset = 0, numel = 0;
  std::vector<Tensor *> slots;
  std::vector<size_t> indices; // of each slot in model.parameters()
  std::string name;            // its dotted path in the model
  // stage 3 under rcjit::compile: a full-shape leaf with no memory that the module holds
  // while traced, declared sharded (shard_parameter) so compiled code reads the unit's slice
  Tensor placeholder;
};

/// A group of parameters flattened in order to `numel` elements, padded to world * sliceLen.
/// Rank r owns elements [r * sliceLen, (r + 1) * sliceLen). A reduce-scattered gradient
/// carries one more element per rank (kept at the end of the slice): how many ranks had a
/// gradient for the unit, so that a unit no rank has a gradient for is skipped everywhere.
struct ZeroUnit {
  std::string name;                 // "h.0", "the rest", "bucket 3"
  nn::ModuleBase *module = nullptr; // stage 3: whose call gathers it
  std::vector<ZeroMember> members;
  std::vector<Tensor> params; // the full parameters (stage 3: of the latest gather)
  int64_t numel = 0, sliceLen = 0;
  Tensor slice;                      // f32 [sliceLen]: this rank's values; the optimizer's leaf
  std::unique_ptr<optim::Optimizer> optimizer; // AdamW or SGD over {slice}: the sharded state
  bool stepped = false;      // the optimizer state exists
  std::vector<Work> pending; // reduce-scatters of this unit's gradient in flight
  bool present = false;      // stage 3: params hold data
  bool entered = false;      // stage 3: gathered in the current forward pass
};

/// Calls fn(member index, element offset inside the member, offset inside [lo, hi), count)
/// for each run of the flat range [lo, hi) that lies in a member.
template <class Fn> void forEachOverlap(const ZeroUnit &u, int64_t lo, int64_t hi, Fn fn) {
  for (size_t k = 0; k < u.members.size(); ++k) {
    const ZeroMember &m = u.members[k];
    const int64_t a = std::max(lo, m.offset), b = std::min(hi, m.offset + m.numel);
    if (a < b) fn(k, a - m.offset, a - lo, b - a);
  }
}

/// Copies the values of `tensors` (one per member, f32, contiguous; undefined ones are zeros)
/// in the flat range [lo, hi) to dst[0, hi - lo).
void packRange(const ZeroUnit &u, const std::vector<Tensor> &tensors, int64_t lo, int64_t hi,
               float *dst);
/// Copies src[0, hi - lo) into the flat range [lo, hi) of `tensors` (defined, f32, contiguous).
void unpackRange(const ZeroUnit &u, const std::vector<Tensor> &tensors, int64_t lo, int64_t hi,
                 const float *src);

/// Frees `t`'s memory in place (every handle on its storage, a value saved for backward
/// included, then sees no data) and gives it fresh memory back (same size, contents
/// undefined). Neither bumps the storage version: the values written after refill are the
/// ones that were there.
void releaseStorage(const Tensor &t);
void refillStorage(const Tensor &t);

/// The modules whose calls gather a stage-3 unit: every element of every ModuleList.
void collectBlocks(nn::ModuleBase &m, std::vector<nn::ModuleBase *> &out);
/// Whether `m` is `root` or inside it.
bool within(const nn::ModuleBase *m, const nn::ModuleBase *root);

/// ZeroOptions::max_grad_norm: the L2 norm of the whole averaged gradient, from this rank's
/// slices' gradients (padding is zero) and one all_reduce of a scalar (a collective), and
/// every slice's gradient scaled by max_norm / (norm + 1e-6) when that is below 1, as
/// clip_grad_norm_ does on one process. Returns the norm before clipping.
double clipSliceGradients(std::vector<ZeroUnit> &units, double maxNorm);

} // namespace rcjit::dist::detail
