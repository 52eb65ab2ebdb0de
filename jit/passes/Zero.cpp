// The ZeRO passes: zero3 (shard inputs, gathers before first use, reduce-scattered
// gradients), prefetch (gathers started earlier within a memory budget) and
// selective_unshard (small units kept gathered from forward to backward). See Zero.h.
#include "jit/passes/Zero.h"

#include <algorithm>
#include <set>

#include <rcjit/Error.h>

#include "jit/passes/GraphBuilder.h"
#include "tracer/GraphIO.h"

namespace rcjit {

namespace {

int64_t zeroNumel(const Shape &s) {
  int64_t e = 1;
  for (int64_t d : s) e *= d;
  return e;
}

// Index of the sharded input whose program input is node `id`, per node (-1: none).
std::vector<int> zeroShardedIndexOfNode(const Graph &g, const ShardingState &s) {
  std::vector<int> of(g.nodes.size(), -1);
  const std::vector<int> ids = g.programInputs();
  for (size_t k = 0; k < s.inputs.size(); ++k) {
    const int in = s.inputs[k].input;
    if (in < 0) continue;
    if (in >= static_cast<int>(ids.size())) {
      throw Error("sharded input " + std::to_string(in) + " (" + s.inputs[k].param.name +
                  ") is past the graph's " + std::to_string(ids.size()) + " program inputs");
    }
    of[static_cast<size_t>(ids[static_cast<size_t>(in)])] = static_cast<int>(k);
  }
  return of;
}

Attrs zeroCollectiveAttrs(int world) {
  Attrs a;
  a.dim = 0;
  a.world = world;
  return a;
}

Attrs zeroSliceAttrs(int64_t start, int64_t end) {
  Attrs a;
  a.dim = 0;
  a.start = start;
  a.end = end;
  return a;
}

Attrs zeroReshapeAttrs(const Shape &s) {
  Attrs a;
  a.dims = s;
  return a;
}

// The all_gather nodes of g that gather an input node (the zero3 pass's), in node order.
std::vector<int> zeroGathersOfInputs(const Graph &g) {
  std::vector<int> out;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node &n = g.nodes[i];
    if (n.op == OpKind::all_gather && n.inputs.size() == 1 &&
        g.nodes[static_cast<size_t>(n.inputs[0])].op == OpKind::input)
      out.push_back(static_cast<int>(i));
  }
  return out;
}

// Per node: its first reader (graph outputs not counted), or -1.
std::vector<int> zeroFirstReaders(const Graph &g) {
  std::vector<int> first(g.nodes.size(), -1);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    for (int in : g.nodes[i].inputs) {
      if (first[static_cast<size_t>(in)] < 0) first[static_cast<size_t>(in)] = static_cast<int>(i);
    }
  }
  return first;
}

} // namespace

std::vector<ShardedUnitUses> shardedUnitUses(const Graph &g, const ShardingState &s) {
  const std::vector<int> of = zeroShardedIndexOfNode(g, s);
  std::vector<ShardedUnitUses> units;
  auto unitFor = [&](int k) -> ShardedUnitUses & {
    const ShardedParameter &p = s.inputs[static_cast<size_t>(k)].param;
    for (ShardedUnitUses &u : units) {
      if (u.unit == p.unit) return u;
    }
    units.push_back({.unit = p.unit, .shardNumel = p.shard.numel()});
    return units.back();
  };
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    if (of[i] >= 0) {
      ShardedUnitUses &u = unitFor(of[i]);
      u.inputs.push_back(static_cast<int>(i));
      u.params.push_back(of[i]);
    }
  }
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    for (int in : g.nodes[i].inputs) {
      const int k = of[static_cast<size_t>(in)];
      if (k < 0) continue;
      ShardedUnitUses &u = unitFor(k);
      if (u.firstUse < 0) u.firstUse = static_cast<int>(i);
      u.lastUse = static_cast<int>(i);
    }
  }
  std::sort(units.begin(), units.end(), [](const ShardedUnitUses &a, const ShardedUnitUses &b) {
    const int fa = a.firstUse < 0 ? INT32_MAX : a.firstUse;
    const int fb = b.firstUse < 0 ? INT32_MAX : b.firstUse;
    return fa != fb ? fa < fb : a.unit < b.unit;
  });
  return units;
}

std::vector<int64_t> estimatedLiveBytes(const Graph &g) {
  const size_t n = g.nodes.size();
  std::vector<int> last(n, -1);
  for (size_t i = 0; i < n; ++i) {
    for (int in : g.nodes[i].inputs) last[static_cast<size_t>(in)] = static_cast<int>(i);
  }
  for (int o : g.outputs) last[static_cast<size_t>(o)] = static_cast<int>(n); // held to the end
  // a view keeps its base alive: extend the base's life to the view's
  for (size_t i = n; i-- > 0;) {
    const Node &nd = g.nodes[i];
    if (opInfo(nd.op).category == OpCategory::View && !nd.inputs.empty()) {
      int &b = last[static_cast<size_t>(nd.inputs[0])];
      b = std::max(b, last[i]);
    }
  }
  std::vector<int64_t> delta(n + 2, 0);
  for (size_t i = 0; i < n; ++i) {
    const Node &nd = g.nodes[i];
    if (nd.op == OpKind::input || opInfo(nd.op).category == OpCategory::View) continue;
    const int end = std::max(last[i], static_cast<int>(i));
    delta[i] += tracedBytes(nd);
    delta[static_cast<size_t>(end) + 1] -= tracedBytes(nd);
  }
  std::vector<int64_t> live(n, 0);
  int64_t cur = 0;
  for (size_t i = 0; i < n; ++i) {
    cur += delta[i];
    live[i] = cur;
  }
  return live;
}

std::vector<int> residentUnits(const ShardingState &s, int64_t budget) {
  std::vector<std::pair<int64_t, int>> sizes; // gathered bytes, unit
  for (const ShardedInput &in : s.inputs) {
    const int64_t bytes = in.param.shard.numel() * 4 * in.param.world_size;
    bool seen = false;
    for (const auto &[b, u] : sizes) seen |= u == in.param.unit;
    if (!seen) sizes.push_back({bytes, in.param.unit});
  }
  std::sort(sizes.begin(), sizes.end());
  std::vector<int> out;
  if (sizes.empty()) return out;
  const int64_t cap = budget > 0 ? budget : 2 * sizes.front().first;
  int64_t used = 0;
  for (const auto &[bytes, unit] : sizes) {
    if (budget > 0 ? used + bytes > cap : bytes > cap) break;
    used += bytes;
    out.push_back(unit);
  }
  return out;
}

namespace {

// zero3's rewrite of one graph: each unit gathered before its first use, each sharded input
// bound to its shard, and each unit's gradient reduce-scattered after its last part.
class Zero3Rewrite {
public:
  Zero3Rewrite(const Graph &g, const ShardingState &s)
      : g_(g), s_(s), b_(g), valueOf_(g.nodes.size(), -1) {}

  Graph run() {
    const std::vector<int> of = zeroShardedIndexOfNode(g_, s_);
    const std::vector<ShardedUnitUses> units = shardedUnitUses(g_, s_);
    // where each unit is gathered: before its first use
    std::map<int, std::vector<size_t>> gatherBefore; // old node -> units (index into `units`)
    for (size_t u = 0; u < units.size(); ++u) {
      if (units[u].firstUse >= 0) gatherBefore[units[u].firstUse].push_back(u);
    }
    const std::map<int, std::vector<int>> reduceAfter = planReduces();
    for (size_t i = 0; i < g_.nodes.size(); ++i) {
      const int old = static_cast<int>(i);
      b_.begin(old);
      if (auto it = gatherBefore.find(old); it != gatherBefore.end()) {
        for (size_t u : it->second) gatherUnit(units[u]);
      }
      b_.map(old, b_.append(rewritten(i, of[i])));
      if (auto it = reduceAfter.find(old); it != reduceAfter.end()) {
        for (int unit : it->second) reduceUnit(unit);
      }
    }
    return finish();
  }

private:
  // The backward's gradient outputs, per unit (gradsOfUnit_), and where each unit's
  // gradient is complete: old node -> the units reduced after it.
  std::map<int, std::vector<int>> planReduces() {
    std::map<int, int> lastGradNode; // unit -> old node computing its last gradient
    for (size_t k = 0; k < s_.inputs.size(); ++k) {
      const ShardedInput &in = s_.inputs[k];
      if (in.grad_output < 0) continue;
      if (in.grad_output >= static_cast<int>(g_.outputs.size())) {
        throw Error("the gradient output " + std::to_string(in.grad_output) + " of " +
                    in.param.name + " is past the graph's outputs");
      }
      gradsOfUnit_[in.param.unit].push_back(static_cast<int>(k));
      const int node = g_.outputs[static_cast<size_t>(in.grad_output)];
      int &last = lastGradNode.emplace(in.param.unit, node).first->second;
      last = std::max(last, node);
    }
    std::map<int, std::vector<int>> reduceAfter;
    for (const auto &[unit, node] : lastGradNode) reduceAfter[node].push_back(unit);
    return reduceAfter;
  }

  // Node i, remapped: a sharded input (`sharded` its index, else -1) takes its shard, and
  // a reader of one reads the gathered full value.
  Node rewritten(size_t i, int sharded) {
    Node n = b_.remapped(static_cast<int>(i));
    if (sharded >= 0) { // the parameter's input: bound to its unit's shard
      const ShardedParameter &p = s_.inputs[static_cast<size_t>(sharded)].param;
      if (g_.nodes[i].dtype != DType::f32) {
        throw Error("zero3: the sharded parameter " + p.name + " is " +
                    std::string(dtypeName(g_.nodes[i].dtype)) + ", not f32");
      }
      n.shape = staticShape({p.shard.numel()});
      return n;
    }
    const Node &src = g_.nodes[i];
    for (size_t k = 0; k < n.inputs.size(); ++k) {
      const int v = valueOf_[static_cast<size_t>(src.inputs[k])];
      if (v >= 0) n.inputs[k] = v;
    }
    return n;
  }

  void gatherUnit(const ShardedUnitUses &u) {
    const ShardedParameter &rep = s_.inputs[static_cast<size_t>(u.params.front())].param;
    const int gathered =
        b_.emit(OpKind::all_gather, {b_.at(u.inputs.front())}, zeroCollectiveAttrs(rep.world_size));
    for (size_t j = 0; j < u.inputs.size(); ++j) {
      const ShardedParameter &p = s_.inputs[static_cast<size_t>(u.params[j])].param;
      const int64_t n = zeroNumel(p.shape);
      const int flat = b_.emit(OpKind::slice, {gathered}, zeroSliceAttrs(p.offset, p.offset + n));
      valueOf_[static_cast<size_t>(u.inputs[j])] =
          b_.emit(OpKind::reshape, {flat}, zeroReshapeAttrs(p.shape));
    }
  }

  void reduceUnit(int unit) {
    // the unit's flat gradient: each parameter's at its offset, zeros between and after
    std::vector<std::pair<int64_t, int>> parts; // offset, sharded input index
    for (int k : gradsOfUnit_[unit])
      parts.push_back({s_.inputs[static_cast<size_t>(k)].param.offset, k});
    std::sort(parts.begin(), parts.end());
    const ShardedParameter &first = s_.inputs[static_cast<size_t>(parts.front().second)].param;
    const int world = first.world_size;
    const int64_t total = first.shard.numel() * world;
    std::vector<int> pieces;
    int64_t at = 0;
    auto zeros = [&](int64_t n) {
      Node z;
      z.op = OpKind::full;
      z.dtype = DType::f32;
      z.shape = staticShape({n});
      z.attrs.value = 0;
      pieces.push_back(b_.append(std::move(z)));
    };
    for (const auto &[offset, k] : parts) {
      const ShardedParameter &p = s_.inputs[static_cast<size_t>(k)].param;
      if (offset < at) continue; // a parameter listed twice
      if (offset > at) zeros(offset - at);
      const int grad =
          b_.at(g_.outputs[static_cast<size_t>(s_.inputs[static_cast<size_t>(k)].grad_output)]);
      const int64_t n = zeroNumel(p.shape);
      pieces.push_back(
          b_.emit(OpKind::reshape, {b_.cast(grad, DType::f32)}, zeroReshapeAttrs({n})));
      at = offset + n;
    }
    if (at < total) zeros(total - at);
    Attrs cat;
    cat.dim = 0;
    const int flat = pieces.size() == 1 ? pieces[0] : b_.emit(OpKind::cat, pieces, cat);
    // scaled before the reduce-scatter (the scaling joins the flattening kernel), so that the
    // reduce-scatter's result is the output itself and nothing waits for it before the end
    const int scaled =
        b_.emit(OpKind::mul, {flat, b_.scalar(1.0 / static_cast<double>(world), DType::f32)});
    unitGrad_[unit] = b_.emit(OpKind::reduce_scatter, {scaled}, zeroCollectiveAttrs(world));
  }

  // The first gradient output of a unit is its shard gradient; the unit's other outputs are
  // ignored by the runtime (one per unit is handed on): a scalar zero, not a copy of it.
  Graph finish() {
    std::map<int, int> ignored; // unit -> its scalar
    for (const auto &[unit, ks] : gradsOfUnit_) {
      const int firstOut = firstGradOutput(ks);
      for (int k : ks) {
        if (s_.inputs[static_cast<size_t>(k)].grad_output != firstOut && !ignored.count(unit))
          ignored[unit] = b_.scalar(0, DType::f32);
      }
    }
    Graph out = b_.finish();
    for (const auto &[unit, ks] : gradsOfUnit_) {
      const int firstOut = firstGradOutput(ks);
      for (int k : ks) {
        const int o = s_.inputs[static_cast<size_t>(k)].grad_output;
        out.outputs[static_cast<size_t>(o)] = o == firstOut ? unitGrad_[unit] : ignored[unit];
      }
    }
    return out;
  }

  int firstGradOutput(const std::vector<int> &ks) const {
    int firstOut = INT32_MAX;
    for (int k : ks) firstOut = std::min(firstOut, s_.inputs[static_cast<size_t>(k)].grad_output);
    return firstOut;
  }

  const Graph &g_;
  const ShardingState &s_;
  GraphBuilder b_;
  std::vector<int> valueOf_;                    // sharded input node -> its gathered full value
  std::map<int, int> unitGrad_;                 // unit -> the new node of its shard gradient
  std::map<int, std::vector<int>> gradsOfUnit_; // unit -> sharded input indices with a grad
};

} // namespace

Graph zero3Pass(const Graph &g, const PassContext &ctx) {
  const ShardingState &s = ctx.sharding;
  if (s.empty() || s.stage < 3) return g;
  return Zero3Rewrite(g, s).run();
}

Graph zeroGradientPass(const Graph &g, const PassContext &ctx) {
  const ShardingState &s = ctx.sharding;
  // the backward of a full-mode training entry whose parameters are sharded by stage 1 or 2
  if (s.empty() || s.stage > 2 || !ctx.backward || ctx.graph.find(" stage ") != std::string::npos)
    return g;
  return Zero3Rewrite(g, s).run(); // no sharded inputs there: only the reduce-scatters
}

Graph prefetchPass(const Graph &g, const PassContext &ctx) {
  const std::vector<int> gathers = zeroGathersOfInputs(g);
  if (gathers.empty()) return g;
  const std::vector<int> first = zeroFirstReaders(g);
  const std::vector<int64_t> live = estimatedLiveBytes(g);
  std::vector<int64_t> extra(g.nodes.size(), 0); // bytes the moves so far hold longer
  // the node each gather is emitted before (its own position: not moved)
  std::map<int, std::vector<int>> startBefore; // old node -> gathers
  std::set<int> moved;
  int floor = 0; // gathers keep their order
  int previousReader = -1;
  for (int gt : gathers) {
    const int64_t bytes = tracedBytes(g.nodes[static_cast<size_t>(gt)]);
    int at = gt;
    if (ctx.memory_budget > 0) { // as early as the budget allows
      while (at - 1 >= floor &&
             live[static_cast<size_t>(at - 1)] + extra[static_cast<size_t>(at - 1)] + bytes <=
                 ctx.memory_budget)
        --at;
    } else if (previousReader >= 0) { // one unit ahead: with the previous unit's first use
      at = std::max(floor, std::min(gt, previousReader));
    }
    for (int t = at; t < gt; ++t) extra[static_cast<size_t>(t)] += bytes;
    previousReader = first[static_cast<size_t>(gt)];
    floor = at;
    if (at < gt) {
      startBefore[at].push_back(gt);
      moved.insert(gt);
    }
  }
  if (moved.empty()) return g;
  GraphBuilder b(g);
  std::vector<bool> done(g.nodes.size(), false);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const int old = static_cast<int>(i);
    b.begin(old);
    if (auto it = startBefore.find(old); it != startBefore.end()) {
      for (int gt : it->second) {
        const int in = g.nodes[static_cast<size_t>(gt)].inputs[0];
        if (!done[static_cast<size_t>(in)]) { // its shard input: inputs can be anywhere
          b.copy(in);
          done[static_cast<size_t>(in)] = true;
        }
        b.copy(gt);
        done[static_cast<size_t>(gt)] = true;
      }
    }
    if (!done[i]) {
      b.copy(old);
      done[i] = true;
    }
  }
  return b.finish();
}

Graph selectiveUnshardPass(const Graph &g, const PassContext &ctx) {
  const ShardingState &s = ctx.sharding;
  if (s.empty() || s.stage < 3) return g;
  // a regional stage is reused by every layer: keeping its unit gathered from the forward to
  // the backward would keep every layer's; each stage gathers again in its backward
  if (ctx.graph.find(" stage ") != std::string::npos) return g;
  const std::vector<int> resident = residentUnits(s, ctx.memory_budget);
  if (resident.empty()) return g;
  auto isResident = [&](int unit) {
    return std::find(resident.begin(), resident.end(), unit) != resident.end();
  };
  const std::vector<int> of = zeroShardedIndexOfNode(g, s);
  // the gathered value of each sharded parameter: reshape(slice(all_gather(input))) as the
  // zero3 pass builds it, found by the parameter's offset
  std::vector<int> gatherOfInput(g.nodes.size(), -1); // shard input node -> its all_gather
  for (int gt : zeroGathersOfInputs(g))
    gatherOfInput[static_cast<size_t>(g.nodes[gt].inputs[0])] = gt;
  std::map<int, int> gatherOfUnit; // unit -> all_gather node
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    if (of[i] >= 0 && gatherOfInput[i] >= 0)
      gatherOfUnit[s.inputs[static_cast<size_t>(of[i])].param.unit] = gatherOfInput[i];
  }
  // per parameter (sharded input index): the reshape node giving its full value, if any
  std::map<int, int> valueNode;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node &r = g.nodes[i];
    if (r.op != OpKind::reshape) continue;
    const Node &sl = g.nodes[static_cast<size_t>(r.inputs[0])];
    if (sl.op != OpKind::slice ||
        g.nodes[static_cast<size_t>(sl.inputs[0])].op != OpKind::all_gather)
      continue;
    for (size_t k = 0; k < s.inputs.size(); ++k) {
      const ShardedParameter &p = s.inputs[k].param;
      auto gu = gatherOfUnit.find(p.unit);
      if (gu != gatherOfUnit.end() && gu->second == sl.inputs[0] && sl.attrs.start == p.offset &&
          r.attrs.dims == p.shape)
        valueNode.emplace(static_cast<int>(k), static_cast<int>(i));
    }
  }
  if (ctx.backward) {
    // the saved parameters of resident units arrive gathered: read them, not a new gather
    std::set<int> dropped; // old gathers of resident units and their slices
    for (const auto &[unit, gt] : gatherOfUnit) {
      if (isResident(unit)) dropped.insert(gt);
    }
    std::map<int, int> replaceBy; // old reshape node -> old input node of its parameter
    for (size_t i = 0; i < g.nodes.size(); ++i) {
      if (of[i] < 0 || !isResident(s.inputs[static_cast<size_t>(of[i])].param.unit)) continue;
      if (auto v = valueNode.find(of[i]); v != valueNode.end())
        replaceBy[v->second] = static_cast<int>(i);
    }
    GraphBuilder b(g);
    for (size_t i = 0; i < g.nodes.size(); ++i) {
      const int old = static_cast<int>(i);
      const Node &src = g.nodes[i];
      b.begin(old);
      if (of[i] >= 0 && isResident(s.inputs[static_cast<size_t>(of[i])].param.unit)) {
        Node n = b.remapped(old);
        n.shape = staticShape(s.inputs[static_cast<size_t>(of[i])].param.shape);
        b.map(old, b.append(std::move(n)));
        continue;
      }
      if (dropped.count(old)) continue;
      if (src.op == OpKind::slice && dropped.count(src.inputs[0])) {
        dropped.insert(old);
        continue;
      }
      if (src.op == OpKind::reshape && dropped.count(src.inputs[0])) {
        auto r = replaceBy.find(old);
        if (r == replaceBy.end()) {
          throw Error("selective_unshard: a gathered parameter of a resident unit is read in "
                      "the backward but not saved by the forward");
        }
        b.map(old, b.at(r->second)); // its uses read the saved full value
        continue;
      }
      for (int in : src.inputs) {
        if (dropped.count(in)) {
          throw Error("selective_unshard: node " + std::to_string(old) + " (" +
                      std::string(opName(src.op)) + ") reads a resident unit's gather directly");
        }
      }
      b.copy(old);
    }
    return b.finish();
  }
  // forward: a resident unit's saved parameter (an output that is its input node) becomes
  // the gathered value, held until the backward
  std::map<int, int> outputValue; // sharded input index -> new node of its gathered value
  GraphBuilder b(g);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const int old = static_cast<int>(i);
    b.begin(old);
    b.copy(old);
    // right after a resident unit's gather: the values of its parameters that no node reads
    for (size_t k = 0; k < s.inputs.size(); ++k) {
      const ShardedParameter &p = s.inputs[k].param;
      auto gu = gatherOfUnit.find(p.unit);
      if (!isResident(p.unit) || gu == gatherOfUnit.end() || gu->second != old) continue;
      if (auto v = valueNode.find(static_cast<int>(k)); v != valueNode.end()) continue;
      const int64_t n = zeroNumel(p.shape);
      const int flat = b.emit(OpKind::slice, {b.at(old)}, zeroSliceAttrs(p.offset, p.offset + n));
      outputValue[static_cast<int>(k)] = b.emit(OpKind::reshape, {flat}, zeroReshapeAttrs(p.shape));
    }
  }
  Graph out = b.finish();
  for (size_t o = 0; o < g.outputs.size(); ++o) {
    const int k = of[static_cast<size_t>(g.outputs[o])];
    if (k < 0 || !isResident(s.inputs[static_cast<size_t>(k)].param.unit)) continue;
    if (auto v = valueNode.find(k); v != valueNode.end()) {
      out.outputs[o] = b.at(v->second);
    } else if (auto w = outputValue.find(k); w != outputValue.end()) {
      out.outputs[o] = w->second;
    }
  }
  return out;
}

const std::map<std::string, ScheduledPassFn> &builtinScheduledPasses() {
  static const std::map<std::string, ScheduledPassFn> passes = {
      {"zero1", zeroGradientPass},
      {"zero2", zeroGradientPass},
      {"zero3", zero3Pass},
      {"prefetch", prefetchPass},
      {"selective_unshard", selectiveUnshardPass},
  };
  return passes;
}

} // namespace rcjit
