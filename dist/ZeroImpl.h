// dist::ZeroOptimizer's state, shared by its files (ZeroOptimizer.cpp: building, gathering,
// stepping; ZeroCheckpoint.cpp: the whole state and parameters in and out). Internal to dist/.
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <rcjit/Passes.h>
#include <rcjit/Zero.h>

#include "dist/ZeroUnits.h"

namespace rcjit::dist {

using detail::ZeroMember;
using detail::ZeroUnit;

// Every parameter the model registers, as (member pointer, module) in named_parameters()
// order, each parameter once (a tied one: every slot that holds it).
struct Slot {
  Tensor *slot;
  const nn::ModuleBase *owner;
  std::string name;
};

struct ZeroOptimizer::Impl {
  int stage = 1, rank = 0, world = 1;
  nn::ModuleBase *model = nullptr;
  std::vector<Tensor> params; // stages 1 and 2: model.parameters()
  std::vector<ZeroUnit> units;
  std::optional<optim::AdamWOptions> adamw;
  std::optional<optim::SGDOptions> sgd;
  int64_t bucketBytes = 0;
  ZeroStats stats;
  bool hooked = false, unsharded = false;
  double maxGradNorm = 0, lastGradNorm = -1; // ZeroOptions::max_grad_norm; the last step's norm
  // stage 3: the units in the order the current forward pass gathered them
  std::shared_ptr<std::vector<size_t>> pass;
  std::optional<size_t> lastBlock; // the block gathered last in the pass (released by the next)
  std::vector<size_t> blockOrder, previousBlockOrder; // blocks in the order forward called them
  bool prefetchOn = false;
  struct Prefetch {
    size_t unit;
    Work work;
  };
  std::optional<Prefetch> prefetched; // a gather in flight before it is needed

  void build(nn::ModuleBase &m, ZeroOptions o);
  // build's parts: a parameter checked; stages 1 and 2's buckets; stage 3's blocks and hooks
  void checkSlot(const Slot &s) const;
  void buildBuckets(const std::vector<Slot> &slots);
  void buildBlocks(nn::ModuleBase &m, const std::vector<Slot> &slots);
  void addUnit(ZeroUnit u);
  void makeOptimizer(ZeroUnit &u);
  Tensor gatherFlat(size_t i);
  void startPrefetch(size_t i);
  void dropPrefetch();
  void gatherFresh(size_t i);
  void refill(size_t i);
  void release(size_t i);
  void enterRoot();
  void enterBlock(size_t i);
  // stage 3 traced by rcjit::compile: the members hold sharded placeholders (see ZeroMember)
  void installPlaceholders();
  void forgetPlaceholders();
  bool traced = false; // the placeholders are declared
  void unitBackward(size_t i, const std::vector<Tensor> &grads, size_t pos,
                    const std::shared_ptr<std::vector<size_t>> &order, bool retain);
  Work startReduceScatter(ZeroUnit &u, const std::vector<Tensor> &grads);
  bool finishGradient(ZeroUnit &u);
  void stepStage1();
  void stepStage2();
  // Stages 1 and 2 compiled with the zero1 / zero2 pass: the parameters declared sharded (so
  // the compiled backward reduce-scatters into the slices), and step()'s part for that case
  void declareSharded();
  ShardedParameter shardInfo(size_t i, const ZeroMember &mem, int stage) const;
  bool compiledGradients() const;
  void updateSlices();
  // Stages 1 and 2, after each unit's update: its slice all-gathered, all in flight at once
  void startGather(ZeroUnit &u, std::vector<Work> &gathers);
  // then each unit's gathered values written into its parameters
  void finishGathers(std::vector<Work> &gathers);
  void stepStage3();
  void unhook();
  // ZeroCheckpoint.cpp: a whole state (state_dict()'s names) or whole parameter values
  // checked and cut into this rank's slices, nothing changed; then put in
  struct SlicedState {
    double lr = 0;
    std::vector<NamedTensors> units; // per unit: its optimizer's state_dict() over {slice}
  };
  SlicedState sliceState(const NamedTensors &state) const;
  void applyState(const SlicedState &s);
  std::vector<Shape> parameterShapes() const; // model.parameters()' shapes, in order
  void checkFull(const std::vector<Tensor> &values) const;
  void applyFull(const std::vector<Tensor> &values);
  std::string where() const {
    return "dist::ZeroOptimizer (stage " + std::to_string(stage) + ", rank " +
           std::to_string(rank) + " of " + std::to_string(world) + ")";
  }
};

} // namespace rcjit::dist
