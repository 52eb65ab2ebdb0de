// The logs command: a trace's text summary (tools/LogsReport.h), its HTML report
// (tools/LogsHtml.h), or a profile's summary (tools/ProfileSummary.h).
#include "tools/LogsCommand.h"

#include "tools/LogsHtml.h"
#include "tools/LogsReport.h"
#include "tools/ProfileSummary.h"

#include <boost/program_options.hpp>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "tools/Cli.h"

namespace po = boost::program_options;

namespace rcjit::tools {

namespace {

struct Usage : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// ---- text ---------------------------------------------------------------------------------

void printCounts(std::ostream &out, const std::string &title, const Counts &c) {
  if (c.empty()) return;
  out << "  " << title << ":\n";
  for (const auto &[text, n] : c) out << "    " << n << "x " << text << "\n";
}

void printCompiles(std::ostream &out, const FunctionReport &f) {
  if (f.compiledCount() == 0) return;
  char line[160];
  std::snprintf(line, sizeof line, "  %5s %10s %6s %-24s %s\n", "entry", "ms", "nodes", "kernels",
                "reason");
  out << line;
  for (const EntryReport &c : f.entries) {
    if (!c.compiled) continue;
    std::snprintf(line, sizeof line, "  %5lld %10.2f %6lld %-24s ", static_cast<long long>(c.entry),
                  c.ms, static_cast<long long>(c.nodes), codeText(c).c_str());
    out << line << c.reason << "\n";
  }
}

void printFunction(std::ostream &out, const TraceReport &r, FunctionKey id,
                   const FunctionReport &f) {
  int64_t n = f.compiledCount();
  out << "\n"
      << functionName(r, id) << ": " << plural(n, "entry", "entries") << ", "
      << plural(static_cast<int64_t>(f.recompiles.size()), "recompile") << ", compile "
      << fixedDigits(f.totalMs(), 1) << " ms total, " << fixedDigits(f.maxMs(), 1) << " ms max\n";
  printCompiles(out, f);
  for (const EntryReport &e : f.entries) {
    if (e.failed)
      out << "  entry " << e.entry << " failed to compile (" << e.reason << "): " << e.error
          << "\n";
  }
  if (!f.recompiles.empty()) out << "  recompiles:\n";
  for (const Recompile &rc : f.recompiles) {
    out << "    entry " << rc.entry << ": " << rc.guard << "\n";
  }
  for (const LimitHit &h : f.limitHits) out << "  " << limitText(h) << "\n";
  const std::vector<DynamicDim> dynamic = f.dynamic();
  if (!dynamic.empty()) out << "  dynamic shapes:\n";
  for (const DynamicDim &d : dynamic) {
    out << "    entry " << d.entry << ": " << dynamicText(d) << "\n";
  }
  printCounts(out, "graph breaks", f.breaks);
  printCounts(out, "perf hints", f.hints);
}

void printText(std::ostream &out, const TraceReport &r) {
  out << "rcjit logs: " << r.file << "\n" << eventCounts(r) << "\n" << totals(r) << "\n";
  if (r.runs > 1) out << runsNote(r) << "\n";
  for (const auto &[id, f] : r.functions) printFunction(out, r, id, f);
  if (!r.hints.empty()) out << "\nother perf hints:\n";
  for (const auto &[text, n] : r.hints) out << "  " << n << "x " << text << "\n";
  out << "\ncache: " << cacheHeadline(r) << "\n";
  printCounts(out, "rejections", r.cache.rejections);
  printCounts(out, "other cache events", r.cache.other);
}

// ---- the command --------------------------------------------------------------------------

int run(const std::string &file, const std::string &html, std::ostream &out, std::ostream &err) {
  TraceReport r = readTraceReport(file, err);
  if (r.malformed > 0 && r.malformed == r.lines) { // e.g. `rcjit logs /etc/passwd`
    throw std::runtime_error("'" + file + "' is not a trace: none of its " +
                             plural(r.lines, "line") + " is a trace event of schema " +
                             std::to_string(logging::kTraceSchema) +
                             " (RCJIT_TRACE_FILE=FILE writes them)");
  }
  printText(out, r);
  if (!html.empty()) {
    saveLogsHtml(html, r);
    err << "rcjit logs: wrote " << html << "\n";
  }
  return kOk;
}

} // namespace

int logsCommand(const std::vector<std::string> &args, std::ostream &out, std::ostream &err) {
  po::options_description desc("rcjit logs FILE [--html OUT]: summarize a RCJIT_TRACE_FILE, "
                               "or a RCJIT_PROFILE profile");
  std::string file, html;
  desc.add_options()("help,h", "show this help")(
      "html", po::value(&html), "also write the report as a self-contained HTML page")(
      "file", po::value(&file), "the JSON-lines trace (written with RCJIT_TRACE_FILE=FILE)");
  po::positional_options_description pos;
  pos.add("file", 1);
  try {
    po::variables_map vm;
    po::store(po::command_line_parser(args).options(desc).positional(pos).run(), vm);
    po::notify(vm);
    if (vm.count("help")) {
      out << desc;
      return kOk;
    }
    if (file.empty()) throw Usage("missing the trace FILE");
    if (vm.count("html") && html.empty()) throw Usage("--html needs a file name");
    if (isChromeTrace(file)) { // a profile (RCJIT_PROFILE), not a log trace
      if (!html.empty()) throw Usage("--html is for log traces, not profiles");
      summarizeProfile(file, out);
      return kOk;
    }
    return run(file, html, out, err);
  } catch (const Usage &e) {
    err << "rcjit logs: " << e.what() << "\n" << desc;
    return kUsage;
  } catch (const po::error &e) {
    err << "rcjit logs: " << e.what() << " (see 'rcjit logs --help')\n";
    return kUsage;
  } catch (const std::exception &e) {
    err << "rcjit logs: error: " << e.what() << "\n";
    return kFailure;
  }
}

} // namespace rcjit::tools
