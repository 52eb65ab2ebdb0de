// rcjit's logs: which event kinds print to stderr (also settable with env RCJIT_LOGS).
#pragma once
#include <string_view>

namespace rcjit {

/// Enables log kinds from a comma list: recompiles, recompiles_verbose, guards,
/// graph_breaks, perf_hints, dynamic, graph, output_code, cache ("all" for every kind, ""
/// for none). Replaces the previous setting; an unknown kind is an rcjit::Error naming it.
/// Events print to stderr as "[rcjit:KIND] message". Independently of this setting, every
/// event is appended as one JSON line to the file named by env RCJIT_TRACE_FILE, if set.
/// Thread-safe.
void set_logs(std::string_view kinds);

} // namespace rcjit
