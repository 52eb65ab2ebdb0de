// The process-wide table of sharded parameters (shard_parameter) and what a compile makes
// of it: the ShardingState of a graph's program inputs.
#pragma once
#include <string>
#include <vector>

#include <rcjit/Passes.h>
#include <rcjit/Tensor.h>

#include "tracer/Graph.h"

namespace rcjit {

/// The sharded parameters among `inputs` (a compile's program inputs: args, then captured),
/// with ShardedInput::input their index; empty when none is. Throws rcjit::Error when the
/// sharded ones disagree on the world size or the stage.
ShardingState shardingOf(const std::vector<Tensor> &inputs);

/// Throws rcjit::Error naming the parameter when a sharded input of `g` (a graph after its
/// passes, `what` names it) does not take its shard (f32 [S]): no zero3 pass rewrote it.
/// Stages 1 and 2 (whole parameters) pass.
void checkShardedInputs(const Graph &g, const ShardingState &s, const std::string &what);

} // namespace rcjit
