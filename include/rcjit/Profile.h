// The runtime profiler: per-call, per-step and per-op times in the Chrome trace event format
// (open the file in https://ui.perfetto.dev or chrome://tracing; `rcjit logs FILE` sums it).
#pragma once
#include <string>

namespace rcjit::profiler {

/// Starts recording: every compiled call ("call", named like the logs name the function),
/// each step of a compiled CPU program ("kernel", "library" or "eager step", named by its
/// kernel or op), each compile ("compile") and each eager op run outside compiled code
/// ("eager op"), with the thread that ran it. `RCJIT_PROFILE=FILE` starts it when the
/// library loads and writes FILE at exit. Restarting drops what was recorded.
void start(const std::string &path);
/// Stops recording and writes the trace to the path given to start(); an rcjit::Error
/// when it cannot be written. Does nothing when not recording.
void stop();
/// Whether the profiler is recording.
bool enabled();

} // namespace rcjit::profiler
