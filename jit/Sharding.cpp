// shard_parameter's table: parameter identity -> where its shard is (see Passes.h).
#include "jit/Sharding.h"

#include <map>
#include <mutex>

#include <rcjit/Error.h>

#include "tracer/TensorImpl.h"

namespace rcjit {

namespace {
std::mutex &shardTableMutex() {
  static std::mutex mu;
  return mu;
}
// keyed by the parameter's TensorImpl (its identity: every handle of one parameter)
std::map<const detail::TensorImpl *, ShardedParameter> &shardTable() {
  static std::map<const detail::TensorImpl *, ShardedParameter> table;
  return table;
}
} // namespace

void shard_parameter(const Tensor &param, ShardedParameter info) {
  if (!param.defined()) throw Error("shard_parameter: the parameter is undefined");
  const std::string who =
      "shard_parameter(" + (info.name.empty() ? "a parameter" : info.name) + ")";
  if (!info.shard.defined() || info.shard.dim() != 1 || info.shard.dtype() != DType::f32) {
    throw Error(who + ": the shard must be a 1-D f32 tensor");
  }
  if (info.world_size < 1 || info.rank < 0 || info.rank >= info.world_size) {
    throw Error(who + ": rank " + std::to_string(info.rank) + " of " +
                std::to_string(info.world_size) + " ranks");
  }
  if (info.shape != param.shape()) {
    throw Error(who + ": full shape " + shapeStr(info.shape) + " but the parameter is " +
                shapeStr(param.shape()));
  }
  const int64_t shardLen = info.shard.numel();
  if (info.offset < 0 || info.offset + param.numel() > info.unit_numel ||
      info.unit_numel > shardLen * info.world_size) {
    throw Error(who + ": elements [" + std::to_string(info.offset) + ", " +
                std::to_string(info.offset + param.numel()) + ") of a unit of " +
                std::to_string(info.unit_numel) + " do not fit " + std::to_string(info.world_size) +
                " shards of " + std::to_string(shardLen));
  }
  std::lock_guard<std::mutex> lock(shardTableMutex());
  shardTable()[param.impl().get()] = std::move(info);
}

void unshard_parameter(const Tensor &param) {
  if (!param.defined()) return;
  std::lock_guard<std::mutex> lock(shardTableMutex());
  shardTable().erase(param.impl().get());
}

bool sharded_parameter(const Tensor &param, ShardedParameter &out) {
  if (!param.defined()) return false;
  std::lock_guard<std::mutex> lock(shardTableMutex());
  auto it = shardTable().find(param.impl().get());
  if (it == shardTable().end()) return false;
  out = it->second;
  return true;
}

ShardingState shardingOf(const std::vector<Tensor> &inputs) {
  ShardingState s;
  for (size_t i = 0; i < inputs.size(); ++i) {
    ShardedParameter p;
    if (!sharded_parameter(inputs[i], p)) continue;
    if (s.stage == 0) {
      s.world_size = p.world_size;
      s.rank = p.rank;
      s.stage = p.stage;
    } else if (s.world_size != p.world_size || s.rank != p.rank || s.stage != p.stage) {
      throw Error("compile: the sharded parameters " + s.inputs.front().param.name + " and " +
                  p.name + " disagree on the world size, rank or stage");
    }
    s.inputs.push_back({.input = static_cast<int>(i), .grad_output = -1, .param = std::move(p)});
  }
  return s;
}

void checkShardedInputs(const Graph &g, const ShardingState &s, const std::string &what) {
  if (s.empty() || s.stage < 3) return; // stages 1 and 2: the parameters are read whole
  const std::vector<int> ids = g.programInputs();
  for (const ShardedInput &in : s.inputs) {
    if (in.input < 0) continue;
    const Node &n = g.nodes[static_cast<size_t>(ids.at(static_cast<size_t>(in.input)))];
    if (n.dtype == DType::f32 && concreteShape(n.shape) == Shape{in.param.shard.numel()}) continue;
    throw Error(what + " reads the full value of " + in.param.name + ", a parameter sharded over " +
                std::to_string(in.param.world_size) + " ranks (ZeRO stage " +
                std::to_string(in.param.stage) +
                ": this rank holds only its shard): compile it with a pass schedule that runs "
                "the zero3 pass (CompileOptions::schedule = {{0, {\"zero3\"}}})");
  }
}

} // namespace rcjit
