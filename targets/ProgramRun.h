// What every target's executor does the same way around its steps: read the symbolic sizes
// from the inputs, keep one specialization per size assignment, and hand out the outputs.
#pragma once
#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include <rcjit/Error.h>
#include <rcjit/Tensor.h>

#include "targets/Program.h"
#include "tracer/TensorImpl.h"

namespace rcjit {

/// The symbol values of a call: dim `dim` of input `input` for each symbol (0 for a symbol
/// the program does not use). A few live inline; nullptr for a static program.
class CallSymbols {
public:
  CallSymbols(const Program &p, const Tensor *const *inputs, size_t n);
  const int64_t *data() const { return p_; }

private:
  int64_t inline_[8] = {};
  std::vector<int64_t> heap_;
  const int64_t *p_ = nullptr;
};

/// Specializations of a program per symbol assignment (a static program has one, made at
/// creation); the newest `kMax` are kept. Spec must have a `syms` vector. Thread-safe.
template <class Spec> class SpecTable {
public:
  static constexpr size_t kMax = 32;
  using Make = std::function<std::shared_ptr<const Spec>(const int64_t *syms)>;

  /// `make` builds the specialization for an assignment (nullptr syms: the static one).
  SpecTable(const Program &p, Make make)
      : numSyms_(p.symbols.ranges.size()), make_(std::move(make)) {
    if (p.symbols.empty()) static_ = make_(nullptr);
  }
  /// The static program's specialization; null for a symbolic one.
  const std::shared_ptr<const Spec> &staticSpec() const { return static_; }
  /// get() for a caller that holds the result no longer than the table: the static
  /// specialization without touching its count (a call per regional stage made the count's
  /// atomic updates show), else get()'s, kept alive by `keep`.
  const Spec *find(const int64_t *syms, std::shared_ptr<const Spec> &keep) const {
    if (static_) return static_.get();
    keep = get(syms);
    return keep.get();
  }
  std::shared_ptr<const Spec> get(const int64_t *syms) const {
    if (static_) return static_;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (auto it = specs_.rbegin(); it != specs_.rend(); ++it) {
        if (std::equal(syms, syms + numSyms_, (*it)->syms.begin())) return *it;
      }
    }
    std::shared_ptr<const Spec> spec = make_(syms); // outside the lock: may be slow
    std::lock_guard<std::mutex> lock(mu_);
    if (specs_.size() >= kMax) specs_.erase(specs_.begin());
    specs_.push_back(spec);
    return spec;
  }

private:
  size_t numSyms_;
  Make make_;
  std::shared_ptr<const Spec> static_;
  mutable std::mutex mu_;
  mutable std::vector<std::shared_ptr<const Spec>> specs_;
};

/// The address of value `v` of `p`: its buffer's base (from `bases`, one per buffer) plus
/// the value's offset. Addr is char * (host) or a device address (an integer).
template <class Addr> Addr valueAddress(const Program &p, const Addr *bases, int v) {
  const Value &val = p.values[static_cast<size_t>(v)];
  return bases[val.buffer] + val.offset * static_cast<int64_t>(dtypeSize(val.dtype));
}

/// The tensor behind input buffer `buf` for one call, checked: present, defined, on
/// `device`. Throws rcjit::Error.
inline const detail::TensorImpl &boundInput(const Buffer &buf, const Tensor *const *inputs,
                                            size_t n, Device device) {
  if (buf.index >= static_cast<int>(n)) throw Error("compiled program: missing input");
  // read through the impl (one pointer chase for the device and the address: this runs per
  // input per call, 64 times a regional toy64 call for each layer's inputs)
  const detail::TensorImpl *t = inputs[buf.index]->impl().get();
  if (!t) throw Error("compiled program: input " + std::to_string(buf.index) + " is undefined");
  if (t->storage->device != device) {
    throw Error("compiled program for " + device.str() + ": input " + std::to_string(buf.index) +
                " is on " + t->storage->device.str());
  }
  return *t;
}

/// Binds every buffer of `p` for one call, the same way on every target: an input buffer
/// to its tensor's data (which must be on `device`), an arena buffer to `arena` plus its
/// offset, an output buffer to a fresh tensor on `device` (kept in `outputs`, indexed by
/// buffer), a dynamic buffer to `dynamicBase(b)`. With `deferOutputs`, output buffers are
/// left unbound for the caller to allocate when their first step runs (outputsByFirstStep).
/// Throws rcjit::Error for a missing input or one on another device.
/// bindBuffersInto fills `bases` (a vector kept from call to call: no allocation once it
/// has the capacity).
template <class Addr, class DynamicBase>
void bindBuffersInto(const Program &p, const Tensor *const *inputs, size_t n, Device device,
                     Addr arena, std::vector<Tensor> &outputs, std::vector<Addr> &bases,
                     DynamicBase &&dynamicBase, bool deferOutputs = false) {
  bases.assign(p.buffers.size(), Addr{});
  outputs.assign(p.buffers.size(), Tensor());
  for (size_t b = 0; b < p.buffers.size(); ++b) {
    const Buffer &buf = p.buffers[b];
    switch (buf.kind) {
    case Buffer::Kind::input:
      bases[b] = (Addr)(boundInput(buf, inputs, n, device).ptr());
      break;
    case Buffer::Kind::arena:
      bases[b] = arena + buf.offset;
      break;
    case Buffer::Kind::output:
      if (deferOutputs) break;
      outputs[b] = detail::makeTensor(buf.shape, buf.dtype, device);
      bases[b] = (Addr)(outputs[b].data_ptr());
      break;
    case Buffer::Kind::dynamic:
      bases[b] = dynamicBase(b);
      break;
    }
  }
}
template <class Addr, class DynamicBase>
std::vector<Addr> bindBuffers(const Program &p, const Tensor *const *inputs, size_t n,
                              Device device, Addr arena, std::vector<Tensor> &outputs,
                              DynamicBase &&dynamicBase, bool deferOutputs = false) {
  std::vector<Addr> bases;
  bindBuffersInto(p, inputs, n, device, arena, outputs, bases,
                  std::forward<DynamicBase>(dynamicBase), deferOutputs);
  return bases;
}

/// Runs the steps of `p` in order, handing each to the target's hook for its kind:
/// kernel(i, step), library(i, step), eager(i, step), collective(i, step) (the collective
/// and wait steps: the hook tells them apart by step.kind).
template <class Kernel, class Library, class Eager, class Collective>
void forEachStep(const Program &p, Kernel &&kernel, Library &&library, Eager &&eager,
                 Collective &&collective) {
  for (size_t i = 0; i < p.steps.size(); ++i) {
    const Step &s = p.steps[i];
    switch (s.kind) {
    case Step::Kind::kernel:
      kernel(i, s);
      break;
    case Step::Kind::library:
      library(i, s);
      break;
    case Step::Kind::eager:
      eager(i, s);
      break;
    case Step::Kind::collective:
    case Step::Kind::wait:
      collective(i, s);
      break;
    }
  }
}

/// Per step of `p` (plus one entry past the last): the output buffers that step is the
/// first to read or write, so that they are allocated only when needed; the last entry
/// lists the output buffers no step touches.
std::vector<std::vector<int>> outputsByFirstStep(const Program &p);

/// Per step of `p`: the program inputs whose last use it is and that no output views,
/// which a consuming run may drop after the step (Executable::runConsuming).
std::vector<std::vector<int>> inputsDoneAt(const Program &p);

/// Per buffer of `p`: the last step that uses it, as an operand or as its result (-1: none).
std::vector<int> lastUseOfBuffers(const Program &p);

/// Per step of `p`: the dynamic buffers (eager steps' and collectives' results) whose last
/// use it is and that no output views: a run frees them after the step, so a gathered
/// parameter lives from its gather to its last reader, as in eager, not to the program's end.
std::vector<std::vector<int>> dynamicDoneAt(const Program &p);

/// The program's outputs as tensors: views of the input, dynamic or output buffer each
/// output value lives in (`dynamic` and `outBuffers` indexed by buffer). A value returned
/// twice gets separate storage the second time (`clone`).
std::vector<Tensor> collectOutputs(const Program &layout, const Tensor *const *inputs,
                                   const std::vector<Tensor> &dynamic,
                                   const std::vector<Tensor> &outBuffers);
/// The same into `outs` (emptied first; its capacity is reused).
void collectOutputs(const Program &layout, const Tensor *const *inputs,
                    const std::vector<Tensor> &dynamic, const std::vector<Tensor> &outBuffers,
                    std::vector<Tensor> &outs);

} // namespace rcjit
