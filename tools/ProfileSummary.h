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
/// (top `top`), and how much of the calls' time their steps cover. Throws rcjit::Error for
/// a malformed file.
void summarizeProfile(const std::string &path, std::ostream &out, int top = 15);

} // namespace rcjit::tools
