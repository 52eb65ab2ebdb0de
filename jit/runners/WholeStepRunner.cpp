// The whole step entry: the function wrote tensors it did not create (backward(),
// opt.step(), copy_), so its program returns them too and each call writes them back.
#include "autograd/Autograd.h"
#include "jit/CompiledState.h"
#include "jit/runners/StaticRunner.h"
#include "tracer/TensorImpl.h"

namespace rcjit::detail {

namespace {

// A write of one program output into a tensor the function mutated.
struct WriteBack {
  Mutation::Kind kind = Mutation::Kind::data;
  Tensor target;        // as traced
  int captured = -1;    // the captured input it is (its current value is written), or -1
  int output = -1;      // program output; -1: grad() becomes undefined
  bool inPlace = false; // grad: written into the current grad() (the trace read it)
};

// A whole step's write of `value` into `target`: adopts value's storage when each is the
// only owner of its whole storage (no copy), else copies.
void writeBack(const Tensor &target, const Tensor &value) {
  TensorImpl &ti = *target.impl();
  const TensorImpl &vi = *value.impl();
  if (ti.storage == vi.storage && ti.offset == vi.offset && ti.strides == vi.strides)
    return; // the program wrote it in place (runInto)
  if (ti.storage.use_count() == 1 && vi.storage.use_count() == 1 && ti.offset == 0 &&
      vi.offset == 0 && target.is_contiguous() && value.is_contiguous() && ti.dtype == vi.dtype &&
      ti.shape == vi.shape && ti.storage->device == vi.storage->device &&
      ti.storage->nbytes == vi.storage->nbytes) {
    ti.storage = vi.storage;
    return;
  }
  Tensor(target).copy_(value);
}

// Runs the step's program; the outputs past `userOutputs` are written back after each call.
class WholeStepRunner final : public StaticRunner {
public:
  WholeStepRunner(std::shared_ptr<Executable> program, const Trace &t, std::vector<Tensor *> slots)
      : StaticRunner(std::move(program)), slots_(std::move(slots)), userOutputs_(t.outputs.size()) {
    for (const Mutation &m : t.mutations) {
      WriteBack w{m.kind, m.target, -1, m.output, false};
      for (size_t j = 0; j < t.captured.size(); ++j) {
        if (t.captured[j].impl() == m.target.impl()) w.captured = static_cast<int>(j);
      }
      for (const GradGuard &g : t.gradGuards) {
        if (m.kind == Mutation::Kind::grad && g.leaf.impl() == m.target.impl())
          w.inPlace = g.captured >= 0;
      }
      // a data write into a captured input: the program may write it in place
      if (w.kind == Mutation::Kind::data && w.captured >= 0)
        into_.push_back({w.output, static_cast<int>(t.args.size()) + w.captured});
      writes_.push_back(std::move(w));
    }
  }

  std::vector<Tensor> run(const std::vector<const Tensor *> &inputs, const std::vector<Tensor> &,
                          const TracedFn &) const override {
    releaseReplacedGrads();
    return applyWrites(program_->runInto(inputs.data(), inputs.size(), into_));
  }

private:
  const Tensor &targetOf(const WriteBack &w) const {
    return w.captured >= 0 && slots_[w.captured] ? *slots_[w.captured] : w.target;
  }

  // Before a whole step runs: the gradients it replaces without reading them (zero_grad,
  // then backward(), inside the function) are dropped, so that the old and the new gradients
  // of every parameter are not alive at once during the call (the eager step frees them at
  // zero_grad too). A gradient the program reads (accumulation) is its input and stays.
  void releaseReplacedGrads() const {
    for (const WriteBack &w : writes_) {
      if (w.kind != Mutation::Kind::grad || w.inPlace) continue;
      const Tensor &target = targetOf(w);
      if (autograd::AutogradMeta *m = autograd::metaOf(target); m && m->grad.defined())
        autograd::setGrad(target, Tensor());
    }
  }

  std::vector<Tensor> applyWrites(std::vector<Tensor> outs) const {
    for (const WriteBack &w : writes_) {
      const Tensor &target = targetOf(w);
      if (w.kind == Mutation::Kind::data) {
        writeBack(target, outs.at(w.output));
        continue;
      }
      if (w.output < 0) {
        autograd::setGrad(target, Tensor());
        continue;
      }
      autograd::AutogradMeta *m = autograd::metaOf(target);
      if (w.inPlace && m && m->grad.defined()) {
        writeBack(m->grad, outs.at(w.output));
      } else {
        autograd::setGrad(target, outs.at(w.output));
      }
    }
    outs.resize(userOutputs_);
    return outs;
  }

  std::vector<Tensor *> slots_; // the entry's: where each captured tensor's value lives
  size_t userOutputs_;
  std::vector<WriteBack> writes_;
  std::vector<std::pair<int, int>> into_; // (program output, program input) written in place
};

} // namespace

std::unique_ptr<EntryRunner> makeWholeStepRunner(EntryBuild &b) {
  return std::make_unique<WholeStepRunner>(compileProgram(b), b.t, b.e.slots);
}

} // namespace rcjit::detail
