// `rcjit logs FILE [--html OUT]`: a summary of a RCJIT_TRACE_FILE (JSON lines), like tlparse.
#pragma once
#include <ostream>
#include <string>
#include <vector>

namespace rcjit::tools {

/// Runs the logs command on `args` (the words after "logs"): reads the JSON-lines trace FILE,
/// prints a per-function summary (entries, compile times, failed compiles, recompiles and
/// their failing guards, recompile-limit hits, graph breaks, perf hints) and the cache events
/// to `out`, and with `--html OUT` also writes the full report as one self-contained HTML
/// page (tools/LogsHtml.h). A Chrome-trace profile (RCJIT_PROFILE) is summarized instead.
/// Malformed lines are reported on `err` ("line N: ...") and skipped. Returns 0 on success, 1
/// on a failure (unreadable trace, unwritable HTML), 2 on a usage error; never throws.
/// Thread-safe.
int logsCommand(const std::vector<std::string> &args, std::ostream &out, std::ostream &err);

} // namespace rcjit::tools
