// The rcjit tool's commands as a library: runCli parses argv and runs one command.
#pragma once
#include <ostream>

#include "jit/CompileGraph.h"
#include "tracer/Tracer.h"

namespace rcjit::tools {

/// Exit codes: 0 ok, 1 runtime failure, 2 usage error. Output goes to `out`, errors and
/// progress to `err`.
enum ExitCode { kOk = 0, kFailure = 1, kUsage = 2 };

/// The compile request `rcjit trace` makes for trace `t` on `target`: the same one-sample
/// request a full-mode compile of that target makes (so --dump ptx shows the program
/// Target::cuda runs).
CompileRequest traceRequest(const Trace &t, Target target);

/// Runs `rcjit <command> [options]`; never throws.
int runCli(int argc, const char *const *argv, std::ostream &out, std::ostream &err);

} // namespace rcjit::tools
