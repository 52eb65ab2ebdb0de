// ZeRO as graph passes (DeepSpeed DeepCompile's design): the built-in scheduled passes
// zero3, prefetch and selective_unshard, and the analysis they share.
//
// zero3: each sharded parameter (PassContext::sharding) is read through its unit's shard:
// the input node becomes the shard (f32 [S]), an all_gather of the unit is inserted just
// before the first node that reads any of the unit's parameters, and each parameter is a
// slice + reshape of the gathered value; the buffer planner frees the gathered buffer after
// its last reader. In a backward graph the saved parameter is the shard too, so the
// backward gathers the unit again instead of holding it from the forward, and each unit's
// gradient (its parameters' gradients flattened into the unit's layout, scaled by 1 / world)
// is reduce-scattered as soon as the last of them is computed: this rank's shard of the mean
// gradient is the output of the unit's first parameter (the others' are ignored).
// prefetch: each gather is started earlier — where the previous unit's gather is first read
// (one unit ahead), or, with a memory budget, as early as the graph's estimated live bytes
// plus the gathered bytes stay within it — so communication overlaps compute (the compiled
// program starts a collective at its position and waits just before its first reader).
// selective_unshard: the units whose gathers cost most per byte (the smallest) keep their
// gathered parameters from the forward to the backward, while the budget allows: the
// forward saves the gathered values instead of the shard, and the backward reads them
// instead of gathering again.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <rcjit/Passes.h>

#include "tracer/Graph.h"

namespace rcjit {

/// One sharded unit as a graph reads it.
struct ShardedUnitUses {
  int unit = 0;
  std::vector<int> inputs; // input nodes of its parameters read here, in node order
  std::vector<int> params; // per input node: its index in PassContext::sharding.inputs
  int firstUse = -1;       // the first node reading one of them (outputs not counted), or -1
  int lastUse = -1;        // the last such node
  int64_t shardNumel = 0;  // S
};

/// The units of `s` whose parameters are input nodes of `g`, in order of first use (units
/// never read come last).
std::vector<ShardedUnitUses> shardedUnitUses(const Graph &g, const ShardingState &s);

/// Per node: the bytes of the values alive just after it runs (inputs and views excluded),
/// from the graph's shapes: the static estimate prefetch uses without a profile.
std::vector<int64_t> estimatedLiveBytes(const Graph &g);

/// Which units selective_unshard keeps gathered from the forward to the backward under
/// `budget` bytes (0: none set, then the units whose gathered size is at most the
/// smallest unit's double): the units by gathered size, smallest first, while their sum
/// fits. The forward and the backward compute the same set from the same sharding.
std::vector<int> residentUnits(const ShardingState &s, int64_t budget);

Graph zero3Pass(const Graph &g, const PassContext &ctx);
/// zero1 / zero2: in the backward of a full-mode training entry whose parameters a stage-1
/// or stage-2 ZeroOptimizer declared sharded (whole parameters, sharded optimizer state),
/// each unit's gradients are flattened, scaled by 1 / world and reduce-scattered right after
/// the last of them is computed (as zero3's backward does): the output is this rank's slice
/// of the mean gradient, handed to the unit's shard, so opt.step() only updates slices and
/// all-gathers them. Every other graph is returned unchanged.
Graph zeroGradientPass(const Graph &g, const PassContext &ctx);
Graph prefetchPass(const Graph &g, const PassContext &ctx);
Graph selectiveUnshardPass(const Graph &g, const PassContext &ctx);

/// The built-in scheduled passes: zero1, zero2, zero3, prefetch, selective_unshard.
const std::map<std::string, ScheduledPassFn> &builtinScheduledPasses();

} // namespace rcjit
