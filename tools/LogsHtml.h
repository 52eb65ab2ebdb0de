// `rcjit logs FILE --html OUT`: a trace as one self-contained HTML page, like tlparse's.
#pragma once
#include <ostream>
#include <string>

#include "tools/LogsReport.h"

namespace rcjit::tools {

/// Writes the report of `r`: an index of functions and entries, a timeline of compiles and
/// calls per run, failed compiles, recompiles, dynamic dims, graph breaks, perf hints, source
/// locations, cache events, and a section per entry (compile time by phase and step, guards
/// table, graph breaks, graph before and after the passes, fusion groups, program, LLVM IR,
/// cache lookups, calls). Every top-level section is a <section id=...>, every part of an
/// entry a <div class="part" data-part=...>, so that tests and readers find them. No script,
/// no external resource; every text is escaped.
void writeLogsHtml(std::ostream &o, const TraceReport &r);
/// writeLogsHtml into the file `path`; std::runtime_error when it cannot be written.
void saveLogsHtml(const std::string &path, const TraceReport &r);

} // namespace rcjit::tools
