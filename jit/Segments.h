// Graph-break segments: a function with host reads runs its C++ on every call, and each
// piece of traced work between host reads runs compiled code looked up by structural hash.
#pragma once
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "targets/Executable.h"
#include "tracer/Tracer.h"

namespace rcjit {

/// The compiled segments of one function. Thread-safe.
class SegmentTable {
public:
  explicit SegmentTable(size_t limit) : limit_(limit) {}
  /// Compiles (or reuses) code for `seg` and fills its pending tensors. Returns true when
  /// the code was compiled now. Past `limit` distinct segments, runs the segment's graph
  /// through the eager interpreter instead of compiling more.
  bool run(Segment &seg);
  int compiled() const;
  int reused() const;

private:
  size_t limit_;
  mutable std::mutex mu_;
  std::map<std::string, std::shared_ptr<Executable>> programs_;
  int compiled_ = 0, reused_ = 0;
};

} // namespace rcjit
