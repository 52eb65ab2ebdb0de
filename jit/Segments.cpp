// Compiled graph-break segments: key by hash and input layouts, compile once, fill the
// pending tensors with the results.
#include "jit/Segments.h"

#include <sstream>

#include "jit/CompileGraph.h"
#include "jit/Interpreter.h"
#include "targets/eager/Eager.h"
#include "tracer/GraphIO.h"

namespace rcjit {

bool SegmentTable::run(Segment &seg) {
  std::ostringstream key;
  key << hashGraph(seg.graph).hex();
  std::vector<Shape> strides;
  for (const Tensor &t : seg.inputs) {
    strides.push_back(t.strides());
    key << "|" << shapeStr(t.strides());
  }
  std::shared_ptr<Executable> program;
  bool fresh = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = programs_.find(key.str());
    if (it != programs_.end()) {
      program = it->second;
      ++reused_;
    }
  }
  std::vector<Tensor> outs;
  if (!program) {
    bool full;
    {
      std::lock_guard<std::mutex> lock(mu_);
      full = programs_.size() >= limit_;
    }
    if (full) {
      outs = interpretGraph(seg.graph, seg.inputs);
    } else {
      CompileRequest r;
      r.moduleId = r.label = "rcjit_segment";
      r.samples.push_back({seg.graph, strides});
      program = compileGraph(std::move(r)).executable;
      std::lock_guard<std::mutex> lock(mu_);
      programs_.emplace(key.str(), program);
      ++compiled_;
      fresh = true;
    }
  }
  if (program) {
    std::vector<const Tensor *> ptrs;
    for (const Tensor &t : seg.inputs) ptrs.push_back(&t);
    outs = program->run(ptrs.data(), ptrs.size());
  }
  for (size_t i = 0; i < seg.pending.size(); ++i) eager::copyInto(seg.pending[i], outs[i]);
  return fresh;
}

int SegmentTable::compiled() const {
  std::lock_guard<std::mutex> lock(mu_);
  return compiled_;
}

int SegmentTable::reused() const {
  std::lock_guard<std::mutex> lock(mu_);
  return reused_;
}

} // namespace rcjit
