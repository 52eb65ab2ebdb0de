// Graph-break segments: a function with host reads runs its C++ on every call, and each
// piece of traced work between host reads runs compiled code looked up by structural hash.
#pragma once
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "jit/autograd/CompiledTraining.h"
#include "targets/Executable.h"
#include "tracer/Tracer.h"

namespace rcjit {

/// The compiled segments of one function. Thread-safe.
///
/// With `training`, a segment whose inputs require grad (grad mode on) compiles a forward
/// and a backward (TrainingPlan), and its filled tensors carry the autograd node that runs
/// the backward: the function's backward is split at its graph breaks like its forward.
class SegmentTable {
public:
  SegmentTable(size_t limit, bool training) : limit_(limit), training_(training) {}
  /// Compiles (or reuses) code for `seg` and fills its pending tensors. Returns true when
  /// the code was compiled now. Past `limit` distinct segments, runs the segment's graph
  /// eagerly instead of compiling more (with eager autograd when it trains).
  bool run(Segment &seg);
  bool training() const { return training_; }
  int compiled() const; // programs: a training segment's forward, and its backward once compiled
  int reused() const;

private:
  size_t limit_;
  bool training_;
  mutable std::mutex mu_;
  std::map<std::string, std::shared_ptr<Executable>> programs_;
  std::map<std::string, std::shared_ptr<TrainingPlan>> plans_;
  int compiled_ = 0, reused_ = 0;
};

} // namespace rcjit
