// max_autotune across lowerings: one graph compiled several ways (small matmuls as
// generated kernels or as library calls), the way that runs fastest on the real inputs kept.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "targets/Executable.h"

namespace rcjit {

/// An Executable that runs one of `candidates` (compiled from one graph: the same inputs
/// and outputs, different code). The first call times each candidate on its inputs (run()
/// is pure: a candidate's first run does its own tuning, then the best of a few runs
/// counts), keeps the fastest, logs the choice as an `autotune` compile step of `moduleId`
/// with `names` (one per candidate), and every later call runs the chosen one; calls made
/// while another thread times run candidate 0. `onChosen`, when set, is called once with
/// the index kept (the caller remembers the choice, e.g. in the compile cache, so a later
/// process compiles only that candidate). Thread-safe. `candidates` must not be empty.
std::shared_ptr<Executable> fastestOf(std::vector<std::shared_ptr<Executable>> candidates,
                                      std::vector<std::string> names, std::string moduleId,
                                      std::function<void(int)> onChosen = nullptr);

} // namespace rcjit
