// Shared executor pieces: call symbols and outputs.
#include "targets/ProgramRun.h"

#include <rcjit/Error.h>

#include "tracer/TensorImpl.h"

namespace rcjit {

CallSymbols::CallSymbols(const Program &p, const Tensor *const *inputs, size_t n) {
  const ProgramSymbols &ps = p.symbols;
  if (ps.empty()) return;
  int64_t *out = inline_;
  if (ps.sources.size() > std::size(inline_)) {
    heap_.resize(ps.sources.size());
    out = heap_.data();
  }
  for (size_t i = 0; i < ps.sources.size(); ++i) {
    if (ps.sources[i].empty()) { // a symbol of the function this program does not use
      out[i] = 0;
      continue;
    }
    const SymSource &src = ps.sources[i][0];
    if (src.input >= static_cast<int>(n)) throw Error("compiled program: missing input");
    out[i] = inputs[src.input]->shape().at(static_cast<size_t>(src.dim));
  }
  p_ = out;
}

std::vector<std::vector<int>> outputsByFirstStep(const Program &p) {
  std::vector<std::vector<int>> at(p.steps.size() + 1);
  std::vector<bool> seen(p.buffers.size(), false);
  for (size_t i = 0; i < p.steps.size(); ++i) {
    const Step &s = p.steps[i];
    std::vector<int> vs = s.operands;
    if (s.result >= 0) vs.push_back(s.result);
    for (int v : vs) {
      const int b = p.values[static_cast<size_t>(v)].buffer;
      if (p.buffers[static_cast<size_t>(b)].kind != Buffer::Kind::output || seen[b]) continue;
      seen[b] = true;
      at[i].push_back(b);
    }
  }
  for (size_t b = 0; b < p.buffers.size(); ++b) {
    if (p.buffers[b].kind == Buffer::Kind::output && !seen[b])
      at.back().push_back(static_cast<int>(b));
  }
  return at;
}

std::vector<std::vector<int>> inputsDoneAt(const Program &p) {
  std::vector<int> last(p.buffers.size(), -1);
  for (size_t i = 0; i < p.steps.size(); ++i) {
    const Step &s = p.steps[i];
    for (int v : s.operands) last[p.values[static_cast<size_t>(v)].buffer] = static_cast<int>(i);
  }
  for (int v : p.outputs) last[p.values[static_cast<size_t>(v)].buffer] = -1; // kept
  std::vector<std::vector<int>> at(p.steps.size());
  for (size_t b = 0; b < p.buffers.size(); ++b) {
    if (p.buffers[b].kind == Buffer::Kind::input && last[b] >= 0)
      at[static_cast<size_t>(last[b])].push_back(p.buffers[b].index);
  }
  return at;
}

std::vector<int> lastUseOfBuffers(const Program &p) {
  std::vector<int> last(p.buffers.size(), -1);
  for (size_t i = 0; i < p.steps.size(); ++i) {
    const Step &s = p.steps[i];
    for (int v : s.operands) last[p.values[static_cast<size_t>(v)].buffer] = static_cast<int>(i);
    if (s.result >= 0) last[p.values[static_cast<size_t>(s.result)].buffer] = static_cast<int>(i);
  }
  return last;
}

std::vector<std::vector<int>> dynamicDoneAt(const Program &p) {
  std::vector<int> last = lastUseOfBuffers(p);
  for (int v : p.outputs) last[p.values[static_cast<size_t>(v)].buffer] = -1; // returned
  std::vector<std::vector<int>> at(p.steps.size());
  for (size_t b = 0; b < p.buffers.size(); ++b) {
    if (p.buffers[b].kind == Buffer::Kind::dynamic && last[b] >= 0)
      at[static_cast<size_t>(last[b])].push_back(static_cast<int>(b));
  }
  return at;
}

std::vector<Tensor> collectOutputs(const Program &p, const Tensor *const *inputs,
                                   const std::vector<Tensor> &dynamic,
                                   const std::vector<Tensor> &outBuffers) {
  std::vector<Tensor> outs;
  collectOutputs(p, inputs, dynamic, outBuffers, outs);
  return outs;
}

void collectOutputs(const Program &p, const Tensor *const *inputs,
                    const std::vector<Tensor> &dynamic, const std::vector<Tensor> &outBuffers,
                    std::vector<Tensor> &outs) {
  outs.clear();
  outs.reserve(p.outputs.size());
  for (size_t o = 0; o < p.outputs.size(); ++o) {
    int v = p.outputs[o];
    const Value &val = p.values[v];
    const Buffer &b = p.buffers[val.buffer];
    const Tensor &base = b.kind == Buffer::Kind::input     ? *inputs[b.index]
                         : b.kind == Buffer::Kind::dynamic ? dynamic[val.buffer]
                                                           : outBuffers[val.buffer];
    // the same value returned twice (CSE merged two outputs): hand out separate storage
    bool repeated = std::find(p.outputs.begin(), p.outputs.begin() + o, v) != p.outputs.begin() + o;
    // an output buffer made for this call (a tensor of its own, also when runInto wrote it
    // over an input's storage) that is the value as it is: handed out itself, no view to
    // allocate; not an eager step's result, so an output never shares another tensor's
    // metadata
    if (!repeated && b.kind == Buffer::Kind::output && val.offset == 0 && base.offset() == 0 &&
        base.impl()->shape == val.shape && base.impl()->strides == val.strides) {
      outs.push_back(base);
      continue;
    }
    Tensor out = detail::makeView(base, val.shape, val.strides, base.offset() + val.offset);
    outs.push_back(repeated ? out.clone() : out);
  }
}

} // namespace rcjit
