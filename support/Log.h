// Log events: a cheap enabled-check per kind, stderr lines, and JSON lines to a trace file.
#pragma once
#include <string>

#include <nlohmann/json_fwd.hpp>

namespace rcjit::logging {

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
  compile, // every compile (trace file only; not a stderr kind)
};

/// Whether `k` prints to stderr (one relaxed atomic load).
bool enabled(Kind k);
/// Whether anything is recorded for `k` (stderr or the trace file).
bool wanted(Kind k);
/// Prints "[rcjit:KIND] text" when enabled, and appends {"event": KIND, "message": text,
/// ...fields} to RCJIT_TRACE_FILE when set. Thread-safe.
void emit(Kind k, const std::string &text, const nlohmann::json &fields);
void emit(Kind k, const std::string &text);
const char *kindName(Kind k);

} // namespace rcjit::logging
