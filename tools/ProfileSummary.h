// `rcjit logs PROFILE.json`: the top steps of a profile the runtime profiler wrote
// (include/rcjit/Profile.h, Chrome trace event format).
#pragma once
#include <ostream>
#include <string>

namespace rcjit::tools {

/// Whether `path` holds a Chrome trace (a JSON object with "traceEvents"), not a JSON-lines
/// log trace.
bool isChromeTrace(const std::string &path);

/// Prints the time per category, the compiled calls, the steps and eager ops by total time
/// (top `top`), and how much of the calls' time their steps cover. Reads the file once,
/// streaming (no JSON tree; 32 bytes kept per call, compile and step event), in n log n time.
/// Throws rcjit::Error for a malformed file, one that is not a regular file, or when memory
/// runs out.
void summarizeProfile(const std::string &path, std::ostream &out, int top = 15);

} // namespace rcjit::tools
