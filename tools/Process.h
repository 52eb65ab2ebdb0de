// Child processes without a shell: arguments reach the program verbatim.
#pragma once
#include <string>
#include <vector>

namespace rcjit::tools {

/// Runs the program `argv[0]` (a path, or a name searched on PATH) with arguments `argv`,
/// its stdout and stderr sent to /dev/null, and waits for it. No shell is involved, so no
/// argument is ever interpreted. Returns the exit status; -1 when it could not be started
/// or died from a signal. Thread-safe.
int runProgram(const std::vector<std::string> &argv);

} // namespace rcjit::tools
