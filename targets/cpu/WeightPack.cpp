// Packed weight copies for the CPU library steps (targets/cpu/WeightPack.h).
#include "targets/cpu/WeightPack.h"

#include <atomic>

#include "support/Env.h"
#include "targets/eager/DnnlContext.h"
#include "tracer/TensorImpl.h"

namespace rcjit::cpu {

using dnnl::memory;

namespace {

// The most bytes of packed weight copies there may be in the process
// (RCJIT_PACK_WEIGHTS_MAX_MB, default 1024): past it a step runs over the plain weight.
// Those alive are counted in detail::packedWeightBytes (memory_stats).
int64_t packedBytesBudget() {
  static const int64_t budget =
      envInteger("RCJIT_PACK_WEIGHTS_MAX_MB", 1024, 0, int64_t{1} << 40, "MiB") << 20;
  return budget;
}

// Counts `bytes` more of packed copies if the budget allows; false (nothing counted) if not.
bool reservePackedBytes(int64_t bytes) {
  std::atomic<int64_t> &alive = detail::packedWeightBytes();
  const int64_t budget = packedBytesBudget();
  int64_t now = alive.load(std::memory_order_relaxed);
  do {
    if (now + bytes > budget) return false;
  } while (!alive.compare_exchange_weak(now, now + bytes, std::memory_order_relaxed));
  return true;
}

std::atomic<int> &packWeightsOverride() {
  static std::atomic<int> v{-1}; // -1: the environment decides
  return v;
}

} // namespace

memory::desc unbatched(const memory::desc &d) {
  const memory::dims dims = d.dims();
  if (dims.size() != 3 || dims[0] != 1) return d;
  return d.reshape({dims[1], dims[2]});
}

bool packWeightsSetting() {
  const int forced = packWeightsOverride().load(std::memory_order_relaxed);
  if (forced >= 0) return forced != 0;
  static const bool on = envFlag("RCJIT_PACK_WEIGHTS", true);
  return on;
}

void setPackWeightsOverride(int on) {
  packWeightsOverride().store(on < 0 ? -1 : on ? 1 : 0, std::memory_order_relaxed);
}

WeightPack::Packed::~Packed() {
  detail::packedWeightBytes().fetch_sub(bytes, std::memory_order_relaxed);
}

WeightPack::WeightPack(const memory::desc &plain, const memory::desc &packed)
    : plain_(packed.dims().size() == 2 ? unbatched(plain) : plain), packed_(packed),
      reorder_(dnnl::reorder::primitive_desc(eager::DnnlContext::instance().engine(), plain_,
                                             eager::DnnlContext::instance().engine(), packed)) {}

std::shared_ptr<const WeightPack::Packed>
WeightPack::get(char *data, const std::shared_ptr<detail::Storage> *owner) const {
  if (!owner || !*owner) return nullptr;
  const uint32_t version = (*owner)->version.load(std::memory_order_acquire);
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = copies_.find(data);
    const bool same = it != copies_.end() && it->second->version == version &&
                      !it->second->owner.owner_before(*owner) &&
                      !owner->owner_before(it->second->owner);
    if (same && it->second->bytes > 0) return it->second; // packed
    if (!same) {
      // first sight of this weight at this version: remember it, run unpacked (a weight
      // that changes every call, as in training, would pay a repack per call)
      if (copies_.size() >= 64) { // drop the entries of weights that no longer exist
        for (auto i = copies_.begin(); i != copies_.end();)
          i = i->second->owner.expired() ? copies_.erase(i) : std::next(i);
      }
      auto seen = std::make_shared<Packed>();
      seen->data = data;
      seen->version = version;
      seen->owner = *owner;
      copies_[data] = std::move(seen); // a stale copy goes back to the budget once unused
      return nullptr;
    }
  }
  const int64_t bytes = static_cast<int64_t>(packed_.get_size());
  auto p = std::make_shared<Packed>();
  if (!reservePackedBytes(bytes)) return nullptr;
  p->bytes = bytes; // given back by ~Packed, also if the reorder below throws
  p->mem = memory(packed_, eager::DnnlContext::instance().engine());
  reorder(data, p->mem);
  p->data = data;
  p->version = version;
  p->owner = *owner;
  std::lock_guard<std::mutex> lock(mu_);
  copies_[data] = p;
  return p;
}

void WeightPack::reorder(char *data, memory to) const {
  auto &ctx = eager::DnnlContext::instance();
  memory from(plain_, ctx.engine(), data);
  dnnl::stream &s = ctx.stream();
  reorder_.execute(s, from, to);
  s.wait();
}

char *WeightPack::reorderNow(char *data) const {
  void *buf = eager::threadBuffer(eager::ThreadBuffer::reorderedWeight, packed_.get_size());
  reorder(data, memory(packed_, eager::DnnlContext::instance().engine(), buf));
  return static_cast<char *>(buf);
}

namespace {
constexpr const char *kEachCall = "over the weight reordered into its blocked layout on each call";
} // namespace

std::string PackingStep::describe() const {
  return inner_->describe() + ", over a copy of the weight packed once per version (until it is: " +
         (plain_ ? plain_->describe() : std::string(kEachCall)) + ")";
}

void PackingStep::runWith(char *const *operands, char *result,
                          const std::shared_ptr<detail::Storage> *weight) const {
  std::shared_ptr<const WeightPack::Packed> packed = pack_->get(operands[1], weight);
  if (!packed && plain_) return plain_->runWith(operands, result, nullptr);
  char *w =
      packed ? static_cast<char *>(packed->mem.get_data_handle()) : pack_->reorderNow(operands[1]);
  char *ops[3] = {operands[0], w, operands[2]};
  inner_->runWith(ops, result, nullptr);
}

std::string RepackingStep::describe() const { return inner_->describe() + ", " + kEachCall; }

} // namespace rcjit::cpu
