// The rcjit tool's commands as a library: runCli parses argv and runs one command.
#pragma once
#include <ostream>

namespace rcjit::tools {

/// Exit codes: 0 ok, 1 runtime failure, 2 usage error. Output goes to `out`, errors and
/// progress to `err`.
enum ExitCode { kOk = 0, kFailure = 1, kUsage = 2 };

/// Runs `rcjit <command> [options]`; never throws.
int runCli(int argc, const char *const *argv, std::ostream &out, std::ostream &err);

} // namespace rcjit::tools
