// Log output: a cheap enabled-check per kind, "[rcjit:KIND]" stderr lines, JSON trace lines.
#pragma once
#include <string>

#include <nlohmann/json_fwd.hpp>

namespace rcjit::logging {

/// The log kinds: what RCJIT_LOGS / set_logs enable, and the "kind" of every trace line.
enum class Kind : unsigned {
  recompiles,
  recompiles_verbose,
  guards,
  graph_breaks,
  perf_hints,
  dynamic,
  graph,
  output_code,
  cache,
  passes,  // each step of the compile path: its time and the graph after it
  compile, // every compile (trace file only; not a stderr kind)
};

/// Whether `k` prints to stderr (one relaxed atomic load).
bool enabled(Kind k);
/// Whether anything is recorded for `k` (stderr or the trace file).
bool wanted(Kind k);
const char *kindName(Kind k);

/// Writes one event (call sites emit the typed events of support/Events.h, which come here):
/// prints `message` to stderr when `k` is enabled, every line prefixed with "[rcjit:KIND] ",
/// and appends `fields` plus {"v", "kind", "pid", "time", "message"} as one JSON line to the
/// trace file when one is open. Thread-safe.
void write(Kind k, const std::string &message, const nlohmann::json &fields);

/// Opens `path` for appending as the trace file (as RCJIT_TRACE_FILE does at start-up), or
/// closes it when `path` is empty. For tests and tools; thread-safe. Throws rcjit::Error when
/// the file cannot be opened.
void setTraceFile(const std::string &path);

} // namespace rcjit::logging
