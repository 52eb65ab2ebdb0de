// dist::ZeroOptimizer: ZeRO stages 1-3 over flat per-rank slices of parameter units, with
// non-blocking reduce-scatters and all-gathers; stage 3 gathers a unit when its module is
// called and reduce-scatters its gradient from a custom autograd node.
#include <rcjit/Zero.h>

#include <algorithm>
#include <chrono>
#include <cmath>

#include <rcjit/Autograd.h>
#include <rcjit/Error.h>
#include <rcjit/Passes.h>

#include "autograd/Autograd.h"
#include "autograd/OptimOptions.h"
#include "dist/Collectives.h"
#include "dist/ZeroImpl.h"
#include "dist/ZeroUnits.h"
#include "tracer/ModuleHooks.h"
#include "tracer/Tracer.h"

namespace rcjit::dist {

using detail::collectBlocks;
using detail::secondsSince;
using detail::within;

namespace {

int64_t f32Bytes(int64_t n) { return n * 4; }

void collectSlots(const nn::ModuleBase &m, std::vector<Slot> &out) {
  for (const auto &[name, t] : m.own_parameters())
    out.push_back({t, &m, m.path().empty() ? name : m.path() + "." + name});
  for (const auto &[name, child] : m.children()) collectSlots(*child, out);
}

// The backward of one stage-3 gather: the unit's full gradients are reduce-scattered as soon
// as the unit's backward is done; nothing flows into the slice leaf through autograd.
class ZeroGatherBackward : public autograd::CustomBackward {
public:
  ZeroGatherBackward(ZeroOptimizer::Impl *owner, size_t unit, size_t pos,
                     std::shared_ptr<std::vector<size_t>> order)
      : owner_(owner), unit_(unit), pos_(pos), order_(std::move(order)) {}
  std::string name() const override {
    return "dist::ZeroOptimizer gather of " + owner_->units[unit_].name;
  }
  std::vector<Tensor> backward(const std::vector<Tensor> &gradOutputs, const std::vector<bool> &,
                               bool retainGraph, std::vector<Tensor> &) override {
    owner_->unitBackward(unit_, gradOutputs, pos_, order_, retainGraph);
    return {Tensor()};
  }
  void release() override {}

private:
  ZeroOptimizer::Impl *owner_;
  size_t unit_, pos_;
  std::shared_ptr<std::vector<size_t>> order_;
};

} // namespace

void ZeroOptimizer::Impl::addUnit(ZeroUnit u) {
  for (ZeroMember &m : u.members) {
    m.offset = u.numel;
    u.numel += m.numel;
  }
  u.sliceLen = std::max<int64_t>(1, (u.numel + world - 1) / world);
  u.slice = Tensor::zeros({u.sliceLen});
  std::vector<Tensor> values;
  for (const ZeroMember &m : u.members) values.push_back(*m.slots.front());
  detail::packRange(u, values, rank * u.sliceLen, (rank + 1) * u.sliceLen, u.slice.data<float>());
  u.slice.requires_grad_(true);
  makeOptimizer(u);
  units.push_back(std::move(u));
}

void ZeroOptimizer::Impl::makeOptimizer(ZeroUnit &u) {
  if (adamw) {
    u.optimizer = std::make_unique<optim::AdamW>(std::vector<Tensor>{u.slice}, *adamw);
  } else {
    u.optimizer = std::make_unique<optim::SGD>(std::vector<Tensor>{u.slice}, *sgd);
  }
}

void ZeroOptimizer::Impl::build(nn::ModuleBase &m, ZeroOptions o) {
  model = &m;
  stage = o.stage;
  maxGradNorm = o.max_grad_norm;
  prefetchOn = o.prefetch;
  bucketBytes = o.bucket_bytes;
  if (stage < 1 || stage > 3) {
    throw Error("dist::ZeroOptimizer: stage " + std::to_string(stage) + " is not 1, 2 or 3");
  }
  if (bucketBytes <= 0) throw Error("dist::ZeroOptimizer: bucket_bytes is not positive");
  if (!(maxGradNorm >= 0) || !std::isfinite(maxGradNorm))
    throw Error("dist::ZeroOptimizer: max_grad_norm is not a finite number >= 0");
  if (Tracer::current()) throw Error("dist::ZeroOptimizer: constructed inside a trace");
  rank = dist::rank();
  world = dist::world_size();
  std::vector<Slot> slots;
  collectSlots(m, slots);
  for (const Slot &s : slots) checkSlot(s);
  params = m.parameters();
  broadcast_parameters(params); // every rank starts from rank 0's weights
  if (stage < 3) {
    buildBuckets(slots);
    return declareSharded();
  }
  buildBlocks(m, slots);
}

void ZeroOptimizer::Impl::checkSlot(const Slot &s) const {
  const Tensor &t = *s.slot;
  const std::string name =
      s.owner->path().empty() ? "a parameter of the model" : "a parameter of " + s.owner->path();
  if (!t.defined()) throw Error(where() + ": " + name + " is undefined");
  if (t.dtype() != DType::f32 || !t.device().is_cpu() || !t.is_contiguous()) {
    throw Error(where() + ": " + name + " is " + std::string(dtypeName(t.dtype())) + " on " +
                t.device().str() + "; ZeRO shards contiguous f32 CPU parameters");
  }
  if (!t.requires_grad() || !t.is_leaf()) {
    throw Error(where() + ": " + name + " is not a leaf that requires grad");
  }
}

namespace {
// Adds slot `s` (an element of `slots`) to unit `u`: one member per distinct parameter; its
// slots are every member pointer that holds it.
void addSlot(const std::vector<Slot> &slots, const Slot &s, ZeroUnit &u) {
  const auto index = static_cast<size_t>(&s - slots.data());
  for (ZeroMember &mem : u.members) {
    if (mem.slots.front()->impl() == s.slot->impl()) {
      mem.slots.push_back(s.slot);
      mem.indices.push_back(index);
      return;
    }
  }
  u.members.push_back({s.slot->shape(), 0, s.slot->numel(), {s.slot}, {index}, s.name, {}});
}
} // namespace

void ZeroOptimizer::Impl::buildBuckets(const std::vector<Slot> &slots) {
  ZeroUnit u;
  for (const Slot &s : slots) {
    bool seen = false;
    for (const ZeroMember &mem : u.members) seen |= mem.slots.front()->impl() == s.slot->impl();
    const int64_t bytes = f32Bytes(s.slot->numel());
    int64_t have = 0;
    for (const ZeroMember &mem : u.members) have += f32Bytes(mem.numel);
    if (!seen && !u.members.empty() && have + bytes > bucketBytes) {
      u.name = "bucket " + std::to_string(units.size());
      addUnit(std::move(u));
      u = ZeroUnit();
    }
    addSlot(slots, s, u);
  }
  if (!u.members.empty()) {
    u.name = "bucket " + std::to_string(units.size());
    addUnit(std::move(u));
  }
  // a parameter tied across buckets would be updated twice: the buckets are units only
  for (size_t i = 0; i < units.size(); ++i) {
    for (size_t j = i + 1; j < units.size(); ++j) {
      for (const ZeroMember &a : units[i].members) {
        for (const ZeroMember &b : units[j].members) {
          if (a.slots.front()->impl() == b.slots.front()->impl()) {
            throw Error(where() + ": a parameter is registered in two buckets (tied)");
          }
        }
      }
    }
  }
}

void ZeroOptimizer::Impl::buildBlocks(nn::ModuleBase &m, const std::vector<Slot> &slots) {
  std::vector<nn::ModuleBase *> blocks;
  collectBlocks(m, blocks);
  ZeroUnit rest;
  rest.name = "the parameters outside blocks";
  rest.module = &m;
  std::vector<ZeroUnit> blockUnits(blocks.size());
  for (const Slot &s : slots) {
    ZeroUnit *u = &rest;
    for (size_t b = 0; b < blocks.size(); ++b) {
      if (within(s.owner, blocks[b])) u = &blockUnits[b];
    }
    addSlot(slots, s, *u);
  }
  // a parameter tied across units would be gathered and updated twice
  std::vector<const rcjit::detail::TensorImpl *> seen;
  for (ZeroUnit *u : [&] {
         std::vector<ZeroUnit *> all{&rest};
         for (ZeroUnit &b : blockUnits) all.push_back(&b);
         return all;
       }()) {
    for (const ZeroMember &mem : u->members) {
      const rcjit::detail::TensorImpl *impl = mem.slots.front()->impl().get();
      if (std::find(seen.begin(), seen.end(), impl) != seen.end()) {
        throw Error(where() + ": a parameter is tied across blocks (" + u->name +
                    "); ZeRO-3 gathers each block's parameters alone");
      }
      seen.push_back(impl);
    }
  }
  for (size_t b = 0; b < blocks.size(); ++b) {
    blockUnits[b].module = blocks[b];
    blockUnits[b].name = blocks[b]->path();
    if (!blockUnits[b].members.empty()) addUnit(std::move(blockUnits[b]));
  }
  addUnit(std::move(rest)); // last: the model's own hook is set for it even when it is empty
  // the parameters now live as slices: the members hold nothing until the model is called
  params.clear();
  for (ZeroUnit &u : units) {
    for (ZeroMember &mem : u.members) {
      for (Tensor *slot : mem.slots) *slot = Tensor();
    }
  }
  for (size_t i = 0; i + 1 < units.size(); ++i) {
    nn::detail::setModuleCallHook(*units[i].module, [this, i](nn::ModuleBase &) { enterBlock(i); });
  }
  nn::detail::setModuleCallHook(m, [this](nn::ModuleBase &) { enterRoot(); });
  hooked = true;
}

// ---- stage 3: gather, release, backward ----

// Unit i's full flat values: the prefetched gather when it is this unit's, else a blocking one.
Tensor ZeroOptimizer::Impl::gatherFlat(size_t i) {
  ZeroUnit &u = units[i];
  if (prefetched && prefetched->unit == i) {
    Tensor flat = prefetched->work.wait();
    stats.waitSeconds += prefetched->work.waitSeconds();
    prefetched.reset();
    return flat;
  }
  dropPrefetch(); // a guess that missed: every rank missed it the same way
  const auto t0 = std::chrono::steady_clock::now();
  Tensor flat = all_gather(u.slice.detach());
  stats.waitSeconds += secondsSince(t0);
  stats.gathers += 1;
  stats.gatheredBytes += f32Bytes(u.sliceLen * world);
  return flat;
}

void ZeroOptimizer::Impl::startPrefetch(size_t i) {
  if (!prefetchOn || prefetched || units[i].present) return;
  const auto t0 = std::chrono::steady_clock::now();
  Work w = all_gather_async(units[i].slice.detach());
  stats.waitSeconds += secondsSince(t0); // the shape check is a blocking exchange
  stats.gathers += 1;
  stats.gatheredBytes += f32Bytes(units[i].sliceLen * world);
  prefetched = Prefetch{i, std::move(w)};
}

void ZeroOptimizer::Impl::dropPrefetch() {
  if (!prefetched) return;
  prefetched->work.wait();
  stats.waitSeconds += prefetched->work.waitSeconds();
  prefetched.reset();
}

void ZeroOptimizer::Impl::gatherFresh(size_t i) {
  ZeroUnit &u = units[i];
  Tensor flat = gatherFlat(i);
  u.params.clear();
  for (ZeroMember &mem : u.members) {
    Tensor t = Tensor::empty(mem.shape);
    u.params.push_back(t);
  }
  detail::unpackRange(u, u.params, 0, u.numel, flat.data<float>());
  u.present = true;
  u.entered = true;
  pass->push_back(i);
  if (is_grad_enabled()) {
    autograd::recordCustom(std::make_shared<ZeroGatherBackward>(this, i, pass->size() - 1, pass),
                           {u.slice}, u.params);
  }
  for (size_t k = 0; k < u.members.size(); ++k) {
    for (Tensor *slot : u.members[k].slots) *slot = u.params[k];
  }
}

void ZeroOptimizer::Impl::refill(size_t i) {
  ZeroUnit &u = units[i];
  if (u.present || u.params.empty()) return;
  Tensor flat = gatherFlat(i);
  for (const Tensor &t : u.params) detail::refillStorage(t);
  detail::unpackRange(u, u.params, 0, u.numel, flat.data<float>());
  u.present = true;
}

void ZeroOptimizer::Impl::release(size_t i) {
  ZeroUnit &u = units[i];
  for (const Tensor &t : u.params) detail::releaseStorage(t);
  u.present = false;
}

// What shard_parameter records of member `mem` of unit i at ZeRO stage `stage`.
ShardedParameter ZeroOptimizer::Impl::shardInfo(size_t i, const ZeroMember &mem, int stage) const {
  const ZeroUnit &u = units[i];
  ShardedParameter info;
  info.name = mem.name;
  info.unit = static_cast<int>(i);
  info.offset = mem.offset;
  info.unit_numel = u.numel;
  info.shape = mem.shape;
  info.shard = u.slice;
  info.world_size = world;
  info.rank = rank;
  info.stage = stage;
  return info;
}

void ZeroOptimizer::Impl::installPlaceholders() {
  for (size_t i = 0; i < units.size(); ++i) {
    ZeroUnit &u = units[i];
    for (ZeroMember &mem : u.members) {
      if (!mem.placeholder.defined()) {
        Tensor t = Tensor::empty(mem.shape);
        detail::releaseStorage(t);
        t.requires_grad_(true);
        mem.placeholder = t;
        shard_parameter(t, shardInfo(i, mem, 3));
      }
      for (Tensor *slot : mem.slots) *slot = mem.placeholder;
    }
  }
  traced = true;
}

void ZeroOptimizer::Impl::forgetPlaceholders() {
  for (ZeroUnit &u : units) {
    for (ZeroMember &mem : u.members) {
      if (!mem.placeholder.defined()) continue;
      unshard_parameter(mem.placeholder);
      for (Tensor *slot : mem.slots) {
        if (slot->defined() && slot->impl() == mem.placeholder.impl()) *slot = Tensor();
      }
      mem.placeholder = Tensor();
    }
  }
  traced = false;
}

void ZeroOptimizer::Impl::enterRoot() {
  if (unsharded) return;
  if (Tracer::current()) {
    // rcjit::compile traces the model: the compiled code gathers the units itself (the zero3
    // scheduled pass); the modules hold placeholders that stand for the sharded parameters
    installPlaceholders();
    return;
  }
  pass = std::make_shared<std::vector<size_t>>();
  lastBlock.reset();
  if (!blockOrder.empty()) previousBlockOrder = std::move(blockOrder);
  blockOrder.clear();
  for (ZeroUnit &u : units) u.entered = false;
  gatherFresh(units.size() - 1); // the rest: present for the whole pass
  if (!previousBlockOrder.empty()) startPrefetch(previousBlockOrder.front());
}

void ZeroOptimizer::Impl::enterBlock(size_t i) {
  if (unsharded) return;
  if (Tracer::current()) return enterRoot(); // the placeholders are in place
  if (!pass) enterRoot();                    // a block called without the model: a pass of its own
  ZeroUnit &u = units[i];
  if (u.entered) {
    if (!u.present) {
      throw Error(where() + ": " + u.name +
                  " was called again in one forward pass after its parameters were released "
                  "(ZeRO-3 expects each block to be called once per forward, in order)");
    }
    return;
  }
  if (lastBlock && *lastBlock != i) release(*lastBlock);
  gatherFresh(i);
  lastBlock = i;
  blockOrder.push_back(i);
  // the block that followed this one in the previous forward is probably next
  auto at = std::find(previousBlockOrder.begin(), previousBlockOrder.end(), i);
  if (at != previousBlockOrder.end() && at + 1 != previousBlockOrder.end()) startPrefetch(at[1]);
}

Work ZeroOptimizer::Impl::startReduceScatter(ZeroUnit &u, const std::vector<Tensor> &grads) {
  // world blocks of sliceLen + 1: each rank's slice and, last, whether this rank has a gradient
  const int64_t block = u.sliceLen + 1;
  Tensor flat = Tensor::empty({block * world});
  float *p = flat.data<float>();
  bool any = false;
  for (const Tensor &g : grads) any |= g.defined();
  for (int r = 0; r < world; ++r) {
    detail::packRange(u, grads, r * u.sliceLen, (r + 1) * u.sliceLen, p + r * block);
    p[r * block + u.sliceLen] = any ? 1.0f : 0.0f;
  }
  const auto t0 = std::chrono::steady_clock::now();
  Work w = reduce_scatter_async(flat);
  stats.waitSeconds += secondsSince(t0); // the shape check is a blocking exchange
  stats.reductions += 1;
  stats.reducedBytes += f32Bytes(block * world);
  for (ZeroUnit &other : units) { // Open MPI moves data inside MPI calls: nudge the others
    for (Work &earlier : other.pending) earlier.test();
  }
  return w;
}

void ZeroOptimizer::Impl::unitBackward(size_t i, const std::vector<Tensor> &grads, size_t pos,
                                       const std::shared_ptr<std::vector<size_t>> &order,
                                       bool retain) {
  ZeroUnit &u = units[i];
  std::vector<Tensor> full(u.members.size());
  for (size_t k = 0; k < full.size() && k < grads.size(); ++k) {
    if (grads[k].defined()) full[k] = grads[k].contiguous();
  }
  u.pending.push_back(startReduceScatter(u, full));
  if (!retain) release(i);
  // the unit gathered before this one runs its backward next: gather it back
  if (pos > 0) refill((*order)[pos - 1]);
  if (pos > 1) startPrefetch((*order)[pos - 2]); // and the one whose backward follows
}

// Waits for the unit's reduce-scatters and sets its slice's gradient to their mean over the
// ranks; false (and no gradient) when no rank had one.
bool ZeroOptimizer::Impl::finishGradient(ZeroUnit &u) {
  if (u.pending.empty() && traced) {
    // compiled code reduce-scattered it: the slice's grad() is this rank's mean already
    return u.slice.grad().defined();
  }
  Tensor sum;
  for (Work &w : u.pending) {
    Tensor part = w.wait();
    stats.waitSeconds += w.waitSeconds();
    sum = sum.defined() ? sum + part : part;
  }
  u.pending.clear();
  autograd::setGrad(u.slice, Tensor());
  if (!sum.defined()) return false;
  const float *s = sum.data<float>();
  if (s[u.sliceLen] == 0) return false; // no rank had a gradient for the unit
  Tensor g = Tensor::empty({u.sliceLen});
  float *gp = g.data<float>();
  const float n = static_cast<float>(world);
  for (int64_t j = 0; j < u.sliceLen; ++j) gp[j] = s[j] / n;
  autograd::setGrad(u.slice, g);
  return true;
}

// ---- steps ----

void ZeroOptimizer::Impl::startGather(ZeroUnit &u, std::vector<Work> &gathers) {
  gathers.push_back(all_gather_async(u.slice.detach()));
  stats.gathers += 1;
  stats.gatheredBytes += f32Bytes(u.sliceLen * world);
}

void ZeroOptimizer::Impl::finishGathers(std::vector<Work> &gathers) {
  for (size_t i = 0; i < units.size(); ++i) {
    Tensor flat = gathers[i].wait();
    stats.waitSeconds += gathers[i].waitSeconds();
    std::vector<Tensor> values;
    for (const ZeroMember &mem : units[i].members) values.push_back(*mem.slots.front());
    detail::unpackRange(units[i], values, 0, units[i].numel, flat.data<float>());
    for (const Tensor &v : values) v.impl()->storage->version.fetch_add(1); // as copy_ does
  }
}

void ZeroOptimizer::Impl::declareSharded() {
  for (size_t i = 0; i < units.size(); ++i) {
    const ZeroUnit &u = units[i];
    for (const ZeroMember &mem : u.members)
      shard_parameter(*mem.slots.front(), shardInfo(i, mem, stage));
  }
}

// Whether the gradients came reduce-scattered into the slices by compiled code (the zero1 /
// zero2 pass) rather than whole into the parameters; both at once is an Error.
bool ZeroOptimizer::Impl::compiledGradients() const {
  bool slices = false;
  std::string whole; // a parameter with a whole gradient
  for (const ZeroUnit &u : units) {
    slices |= u.slice.grad().defined();
    for (const ZeroMember &mem : u.members) {
      if (whole.empty() && mem.slots.front()->grad().defined()) whole = mem.name;
    }
  }
  if (slices && !whole.empty()) {
    throw Error(where() + ": some gradients came reduce-scattered by a compiled backward (the " +
                "zero" + std::to_string(stage) + " pass) and others whole (" + whole +
                "); compute the whole loss in one compiled function or none");
  }
  return slices;
}

// Each slice's gradient is this rank's mean already: update, then all-gather.
// Updates every unit whose slice has a gradient (clipped first under max_grad_norm: the
// norm needs every slice) and all-gathers each unit's new values.
void ZeroOptimizer::Impl::updateSlices() {
  if (maxGradNorm > 0) lastGradNorm = detail::clipSliceGradients(units, maxGradNorm);
  std::vector<Work> gathers;
  for (ZeroUnit &u : units) {
    if (u.slice.grad().defined()) {
      u.optimizer->step();
      u.stepped = true;
    }
    startGather(u, gathers);
  }
  finishGathers(gathers);
}

void ZeroOptimizer::Impl::stepStage1() {
  if (compiledGradients()) return updateSlices();
  GradSyncStats g = all_reduce_gradients(params, bucketBytes);
  stats.waitSeconds += g.waitSeconds;
  stats.reductions += g.buckets;
  stats.reducedBytes += g.bytes;
  for (ZeroUnit &u : units) {
    std::vector<Tensor> grads;
    bool any = false;
    for (const ZeroMember &mem : u.members) {
      Tensor g = mem.slots.front()->grad();
      grads.push_back(g.defined() ? g.contiguous() : g);
      any |= g.defined();
    }
    autograd::setGrad(u.slice, Tensor());
    if (any) { // which parameters have a gradient agrees across ranks (checked above)
      Tensor gs = Tensor::empty({u.sliceLen});
      detail::packRange(u, grads, rank * u.sliceLen, (rank + 1) * u.sliceLen, gs.data<float>());
      autograd::setGrad(u.slice, gs);
    }
  }
  updateSlices();
}

void ZeroOptimizer::Impl::stepStage2() {
  if (compiledGradients()) return updateSlices();
  for (ZeroUnit &u : units) { // every unit's reduce-scatter in flight at once
    std::vector<Tensor> grads;
    for (const ZeroMember &mem : u.members) {
      Tensor g = mem.slots.front()->grad();
      grads.push_back(g.defined() ? g.contiguous() : g);
    }
    u.pending.push_back(startReduceScatter(u, grads));
    for (const ZeroMember &mem : u.members) autograd::setGrad(*mem.slots.front(), Tensor());
  }
  if (maxGradNorm > 0) { // the norm needs every slice before any update
    for (ZeroUnit &u : units) finishGradient(u);
    return updateSlices();
  }
  std::vector<Work> gathers;
  for (ZeroUnit &u : units) { // each unit updated as soon as its gradient is in
    if (finishGradient(u)) {
      u.optimizer->step();
      u.stepped = true;
    }
    startGather(u, gathers);
  }
  finishGathers(gathers);
}

void ZeroOptimizer::Impl::stepStage3() {
  if (unsharded) throw Error(where() + ": step() after unshard()");
  for (ZeroUnit &u : units) finishGradient(u);
  if (maxGradNorm > 0) lastGradNorm = detail::clipSliceGradients(units, maxGradNorm);
  for (ZeroUnit &u : units) {
    if (u.slice.grad().defined()) {
      u.optimizer->step();
      u.stepped = true;
    }
  }
  dropPrefetch();
  // the gathered values are stale now: free them; the next forward gathers the new ones
  for (size_t i = 0; i < units.size(); ++i) release(i);
  for (ZeroUnit &u : units) {
    u.params.clear();
    for (ZeroMember &mem : u.members) { // placeholders stay: compiled code keeps reading them
      for (Tensor *slot : mem.slots) *slot = mem.placeholder;
    }
  }
  pass.reset();
  lastBlock.reset();
}

void ZeroOptimizer::Impl::unhook() {
  if (!hooked) return;
  for (size_t i = 0; i + 1 < units.size(); ++i) {
    nn::detail::setModuleCallHook(*units[i].module, nullptr);
  }
  nn::detail::setModuleCallHook(*model, nullptr);
  hooked = false;
}

// ---- the public class ----

ZeroOptimizer::ZeroOptimizer(nn::ModuleBase &model, optim::AdamWOptions adamw, ZeroOptions options)
    : impl_(std::make_unique<Impl>()) {
  optim::checkOptions(adamw, "dist::ZeroOptimizer (AdamW)"); // before any rank communicates
  impl_->adamw = adamw;
  impl_->build(model, options);
}

ZeroOptimizer::ZeroOptimizer(nn::ModuleBase &model, optim::SGDOptions sgd, ZeroOptions options)
    : impl_(std::make_unique<Impl>()) {
  optim::checkOptions(sgd, "dist::ZeroOptimizer (SGD)"); // before any rank communicates
  impl_->sgd = sgd;
  impl_->build(model, options);
}

ZeroOptimizer::~ZeroOptimizer() {
  if (!impl_) return;
  impl_->unhook();
  impl_->forgetPlaceholders();
  if (impl_->stage < 3) {
    for (const ZeroUnit &u : impl_->units) {
      for (const ZeroMember &mem : u.members) unshard_parameter(*mem.slots.front());
    }
  }
}

void ZeroOptimizer::zero_grad() {
  for (ZeroUnit &u : impl_->units) {
    for (Work &w : u.pending) { // a gradient thrown away: let its transfer end first
      try {
        w.wait();
      } catch (const Error &) { // reported by the step that would have used it
      }
    }
    u.pending.clear();
    autograd::setGrad(u.slice, Tensor());
  }
  for (const Tensor &p : impl_->params) autograd::setGrad(p, Tensor());
}

void ZeroOptimizer::step() {
  if (Tracer::current()) throw Error(impl_->where() + ": step() inside rcjit::compile");
  NoGradGuard noGrad;
  switch (impl_->stage) {
  case 1:
    return impl_->stepStage1();
  case 2:
    return impl_->stepStage2();
  default:
    return impl_->stepStage3();
  }
}

double ZeroOptimizer::lr() const { return impl_->adamw ? impl_->adamw->lr : impl_->sgd->lr; }

void ZeroOptimizer::set_lr(double lr) {
  optim::checkLr(lr, "dist::ZeroOptimizer::set_lr");
  if (Tracer::current()) throw Error(impl_->where() + ": set_lr inside rcjit::compile");
  (impl_->adamw ? impl_->adamw->lr : impl_->sgd->lr) = lr;
  for (ZeroUnit &u : impl_->units) u.optimizer->set_lr(lr);
}

void ZeroOptimizer::unshard() {
  if (impl_->stage < 3 || impl_->unsharded) return;
  NoGradGuard noGrad;
  impl_->dropPrefetch();
  impl_->pass = std::make_shared<std::vector<size_t>>();
  impl_->forgetPlaceholders();
  for (size_t i = 0; i < impl_->units.size(); ++i) impl_->gatherFresh(i);
  impl_->unhook();
  impl_->unsharded = true;
}

std::vector<Tensor> ZeroOptimizer::full_parameters() {
  NoGradGuard noGrad;
  std::vector<Tensor> out;
  if (impl_->stage < 3) {
    for (const Tensor &p : impl_->params) out.push_back(p.clone());
    return out;
  }
  for (size_t i = 0; i < impl_->units.size(); ++i) {
    ZeroUnit &u = impl_->units[i];
    std::vector<Tensor> values;
    for (const ZeroMember &mem : u.members) values.push_back(Tensor::empty(mem.shape));
    Tensor flat = impl_->gatherFlat(i);
    detail::unpackRange(u, values, 0, u.numel, flat.data<float>());
    for (size_t k = 0; k < values.size(); ++k) { // back to model.parameters() order
      for (size_t index : u.members[k].indices) {
        if (out.size() <= index) out.resize(index + 1);
        out[index] = values[k];
      }
    }
  }
  return out;
}

double ZeroOptimizer::last_grad_norm() const { return impl_->lastGradNorm; }
int ZeroOptimizer::stage() const { return impl_->stage; }
int ZeroOptimizer::units() const { return static_cast<int>(impl_->units.size()); }
const ZeroStats &ZeroOptimizer::stats() const { return impl_->stats; }
void ZeroOptimizer::reset_stats() { impl_->stats = ZeroStats(); }

ModelStateBytes ZeroOptimizer::model_state_bytes() const {
  ModelStateBytes b;
  for (const ZeroUnit &u : impl_->units) {
    b.parameters += f32Bytes(u.sliceLen);
    if (u.slice.grad().defined()) b.gradients += f32Bytes(u.sliceLen);
    if (u.stepped) {
      const bool adamw = impl_->adamw.has_value();
      const int states = adamw ? 2 : (impl_->sgd->momentum != 0 ? 1 : 0);
      b.optimizer += states * f32Bytes(u.sliceLen);
    }
    if (impl_->stage == 3 && u.present) b.parameters += f32Bytes(u.numel);
  }
  for (const Tensor &p : impl_->params) {
    b.parameters += f32Bytes(p.numel());
    if (p.grad().defined()) b.gradients += f32Bytes(p.numel());
  }
  return b;
}

} // namespace rcjit::dist
