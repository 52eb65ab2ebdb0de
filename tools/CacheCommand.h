// `rcjit cache stats|clear|export FILE|import FILE`: the compile cache from the command line.
#pragma once
#include <ostream>
#include <string>
#include <vector>

namespace rcjit::tools {

/// Runs the cache command on `args` (the words after "cache"). Returns 0 on success, 1 on a
/// failure (unreadable file, bad blob), 2 on a usage error; never throws. Not thread-safe
/// with other users of the process-wide cache settings (it may change the directory).
int cacheCommand(const std::vector<std::string> &args, std::ostream &out, std::ostream &err);

} // namespace rcjit::tools
