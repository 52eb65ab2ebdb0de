// The logs command: reads a trace's typed events (support/Events.h), prints a text/HTML report.
#include "tools/LogsCommand.h"

#include "tools/ProfileSummary.h"

#include <algorithm>
#include <boost/program_options.hpp>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

#include "support/Events.h"
#include "tools/Cli.h"

namespace po = boost::program_options;
using nlohmann::json;

namespace rcjit::tools {

namespace {

struct Usage : std::runtime_error {
  using std::runtime_error::runtime_error;
};

using Counts = std::map<std::string, int>; // text → occurrences, in text order

struct CompileRow {
  int entry = 0;
  double ms = 0;
  std::string reason;
  int64_t nodes = 0, kernels = 0, regionsCompiled = 0, regionsReused = 0;
};

struct Recompile {
  int64_t entry = 0;
  std::string guard;
};

struct LimitHit {
  int64_t limit = 0;
  std::string guard;
};

// One "dynamic" event: an argument dim that became a symbol of an entry, or a candidate dim
// that stayed static (symbol < 0) and why.
struct DynamicDim {
  int64_t entry = -1;
  int64_t symbol = -1;
  std::string dims; // "arg 0 dim 1", "arg 0 dim 0 = arg 1 dim 0", "every dim"
  int64_t min = 0, max = 0;
  std::string why;

  bool symbolic() const { return symbol >= 0; }
};

// What the trace says about one compiled function (the "function" id of its events).
struct FunctionReport {
  std::optional<std::string> name; // CompileOptions::name and/or the compile() call's file:line
  std::vector<CompileRow> compiles;
  std::vector<Recompile> recompiles;
  std::vector<LimitHit> limitHits;
  std::vector<DynamicDim> dynamic; // in trace order: by entry, symbols before static dims
  Counts breaks; // one graph break ("item() on the result of sum (%1)") → times traced
  Counts hints;

  double totalMs() const {
    double t = 0;
    for (const CompileRow &c : compiles) t += c.ms;
    return t;
  }
  double maxMs() const {
    double m = 0;
    for (const CompileRow &c : compiles) m = std::max(m, c.ms);
    return m;
  }
  int breakCount() const {
    int n = 0;
    for (const auto &[where, count] : breaks) n += count;
    return n;
  }
};

// A function of one process: ids restart at 0 in each process appending to the same trace.
struct FunctionKey {
  int run = 0, id = -1;
  auto operator<=>(const FunctionKey &) const = default;
};

struct CacheReport {
  int diskHits = 0, memoryHits = 0, misses = 0, stores = 0;
  // ("disk hit", "memory hit", "miss" or "store", module name) → count
  std::map<std::pair<std::string, std::string>, int> byName;
  Counts rejections; // reason → count
  Counts other;      // message → count
};

struct Report {
  std::string file;
  int runs = 1;
  std::map<FunctionKey, FunctionReport> functions;
  Counts hints; // perf hints that name no function
  CacheReport cache;
  Counts events; // event kind → count
  int lines = 0, malformed = 0;
};

// Reading state: which functions compiled an entry in the current run, and the breaks and
// dynamic dims seen before the compile event they belong to (both are logged before their
// entry's compile event, which may be the first of a new run).
struct Reader {
  Report report;
  std::set<int> compiled;
  std::map<int, std::vector<std::string>> pendingBreaks;
  std::map<int, std::vector<DynamicDim>> pendingDynamic;

  FunctionReport &function(std::optional<int> id) {
    return report.functions[{report.runs, id.value_or(-1)}];
  }
};

// ---- reading ------------------------------------------------------------------------------

void flushPending(Reader &rd, int id) {
  for (const std::string &b : rd.pendingBreaks[id]) ++rd.function(id).breaks[b];
  rd.pendingBreaks.erase(id);
  std::vector<DynamicDim> &dims = rd.function(id).dynamic;
  for (DynamicDim &d : rd.pendingDynamic[id]) dims.push_back(std::move(d));
  rd.pendingDynamic.erase(id);
}

// A second "entry 0" of a function id means a new process appended to the trace.
void add(Reader &rd, const logging::CompileEvent &e) {
  int id = static_cast<int>(e.function);
  CompileRow c;
  c.entry = static_cast<int>(e.entry);
  c.ms = e.seconds * 1e3;
  c.reason = e.reason;
  c.nodes = e.nodes;
  c.kernels = e.kernels;
  c.regionsCompiled = e.regionsCompiled;
  c.regionsReused = e.regionsReused;
  if (c.entry == 0 && rd.compiled.count(id)) {
    ++rd.report.runs;
    rd.compiled.clear();
  }
  rd.compiled.insert(id);
  flushPending(rd, id);
  FunctionReport &f = rd.function(id);
  if (e.name) f.name = e.name;
  f.compiles.push_back(c);
}

void add(Reader &rd, const logging::RecompileEvent &e) {
  rd.function(static_cast<int>(e.function)).recompiles.push_back({e.entry, e.guard});
}

void add(Reader &rd, const logging::RecompileLimitEvent &e) {
  rd.function(static_cast<int>(e.function)).limitHits.push_back({e.limit, e.guard});
}

// Breaks and dims are logged before the compile event of their entry: they wait for it.
void add(Reader &rd, const logging::GraphBreakEvent &e) {
  std::vector<std::string> &pending = rd.pendingBreaks[static_cast<int>(e.function)];
  for (const logging::GraphBreak &b : e.breaks) pending.push_back(b.text());
}

void add(Reader &rd, const logging::DynamicSymbolEvent &e) {
  rd.pendingDynamic[static_cast<int>(e.function)].push_back(
      {e.entry, e.symbol, logging::dimsText(e.dims), e.min, e.max, e.why});
}

void add(Reader &rd, const logging::StaticDimEvent &e) {
  rd.pendingDynamic[static_cast<int>(e.function)].push_back(
      {e.entry, -1, logging::dimsText(e.dims), 0, 0, e.why});
}

void add(Reader &rd, const logging::PerfHintEvent &e) {
  std::optional<int> fn;
  if (e.function) fn = static_cast<int>(*e.function);
  ++(fn ? rd.function(fn).hints : rd.report.hints)[e.message()];
}

void add(Reader &rd, const logging::CacheHitEvent &e) {
  ++(e.where == "disk" ? rd.report.cache.diskHits : rd.report.cache.memoryHits);
  ++rd.report.cache.byName[{e.where + " hit", e.name}];
}

void add(Reader &rd, const logging::CacheMissEvent &e) {
  ++rd.report.cache.misses;
  ++rd.report.cache.byName[{"miss", e.name}];
}

void add(Reader &rd, const logging::CacheStoreEvent &e) {
  ++rd.report.cache.stores;
  ++rd.report.cache.byName[{"store", e.name}];
}

void add(Reader &rd, const logging::CacheRejectEvent &e) { ++rd.report.cache.rejections[e.reason]; }

// Every other event is only counted; the other cache events are listed by their message.
template <class E> void add(Reader &rd, const E &e) {
  if constexpr (E::kKind == logging::Kind::cache) ++rd.report.cache.other[e.message()];
}

void addEvent(Reader &rd, const logging::Event &event) {
  std::visit(
      [&rd](const auto &e) {
        if constexpr (!std::is_same_v<std::decay_t<decltype(e)>, std::monostate>) add(rd, e);
      },
      event);
  ++rd.report.events[logging::kindName(logging::kindOf(event))];
}

// "[json.exception.parse_error.101] parse error at line 1, column 2: syntax error ..." →
// "not JSON: syntax error ..." (the JSON library's line is always 1 here).
std::string describe(const std::exception &e) {
  std::string what = e.what();
  if (dynamic_cast<const json::parse_error *>(&e)) {
    size_t colon = what.find(": ");
    return "not JSON: " + (colon == std::string::npos ? what : what.substr(colon + 2));
  }
  if (dynamic_cast<const json::exception *>(&e) && what.find("] ") != std::string::npos) {
    return what.substr(what.find("] ") + 2);
  }
  return what;
}

// A trace of another version is wrong on every line: the first few say why.
constexpr int kShownErrors = 20;

Report readTrace(const std::string &path, std::ostream &err) {
  if (std::filesystem::is_directory(path)) {
    throw std::runtime_error("cannot read trace file '" + path + "': it is a directory");
  }
  std::ifstream in(path);
  if (!in) {
    throw std::runtime_error("cannot read trace file '" + path + "': " + std::strerror(errno));
  }
  Reader rd;
  Report &r = rd.report;
  r.file = path;
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    ++r.lines;
    try {
      addEvent(rd, logging::parseEvent(json::parse(line)));
    } catch (const std::exception &e) {
      if (++r.malformed <= kShownErrors) {
        err << "rcjit logs: " << path << ": line " << n << ": " << describe(e) << "\n";
      }
    }
  }
  if (r.malformed > kShownErrors) {
    err << "rcjit logs: " << path << ": " << r.malformed - kShownErrors
        << " more malformed lines not shown\n";
  }
  if (in.bad()) throw std::runtime_error("error while reading trace file '" + path + "'");
  while (!rd.pendingBreaks.empty()) flushPending(rd, rd.pendingBreaks.begin()->first);
  while (!rd.pendingDynamic.empty()) flushPending(rd, rd.pendingDynamic.begin()->first);
  return r;
}

// ---- shared wording -----------------------------------------------------------------------

std::string fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

// "function 3 (model.cpp:42)", or "run 2 function 3 (model.cpp:42)" when several processes
// appended to the trace.
std::string functionName(const Report &r, FunctionKey k) {
  std::string run = r.runs > 1 ? "run " + std::to_string(k.run) + " " : "";
  if (k.id < 0) return run + "unknown function";
  auto it = r.functions.find(k);
  return run +
         logging::functionLabel(k.id, it == r.functions.end() ? std::nullopt : it->second.name);
}

// The generated code of an entry: kernels (full mode) or regions (regional mode).
std::string codeText(const CompileRow &c) {
  if (c.regionsCompiled + c.regionsReused > 0) {
    return plural(c.regionsCompiled, "region") + " (+" + std::to_string(c.regionsReused) +
           " reused)";
  }
  return std::to_string(c.kernels);
}

std::string eventCounts(const Report &r) {
  std::string s;
  for (const auto &[kind, n] : r.events)
    s += (s.empty() ? "" : ", ") + std::to_string(n) + " " + kind;
  return plural(r.lines - r.malformed, "event") + (s.empty() ? "" : " (" + s + ")") + "; " +
         plural(r.malformed, "malformed line");
}

std::string totals(const Report &r) {
  int entries = 0, recompiles = 0, limits = 0, breaks = 0;
  double ms = 0;
  for (const auto &[id, f] : r.functions) {
    entries += static_cast<int>(f.compiles.size());
    recompiles += static_cast<int>(f.recompiles.size());
    limits += static_cast<int>(f.limitHits.size());
    breaks += f.breakCount();
    ms += f.totalMs();
  }
  return plural(static_cast<int64_t>(r.functions.size()), "function") + ", " +
         plural(entries, "entry", "entries") + ", " + plural(recompiles, "recompile") + ", " +
         plural(limits, "recompile-limit hit") + ", " + plural(breaks, "graph break") +
         ", compile " + fixed(ms, 1) + " ms total";
}

std::string runsNote(const Report &r) {
  if (r.runs == 1) return "";
  return std::to_string(r.runs) + " runs: processes appending to one trace restart ids at 0";
}

std::string limitText(const LimitHit &h) {
  return "recompile_limit (" + std::to_string(h.limit) +
         ") reached, later misses run eagerly; last failing guard: " + h.guard;
}

// "[2, 128]", "[2, inf]" for an unbounded range.
std::string rangeText(const DynamicDim &d) {
  return "[" + std::to_string(d.min) + ", " +
         (d.max == INT64_MAX ? std::string("inf") : std::to_string(d.max)) + "]";
}

// "arg 0 dim 1 -> symbol s0 in [2, inf] (mark_dynamic)", "arg 0 dim 1 stays static: why".
std::string dynamicText(const DynamicDim &d) {
  if (d.symbolic()) {
    return d.dims + " -> symbol s" + std::to_string(d.symbol) + " in " + rangeText(d) + " (" +
           d.why + ")";
  }
  return (d.dims.empty() ? "" : d.dims + " stays static: ") + d.why;
}

std::string cacheHeadline(const Report &r) {
  int rejected = 0;
  for (const auto &[reason, n] : r.cache.rejections) rejected += n;
  const CacheReport &c = r.cache;
  return plural(c.diskHits, "disk hit") + ", " + plural(rejected, "rejection") + ", " +
         plural(c.memoryHits, "memory hit") + ", " + plural(c.misses, "miss", "misses") + ", " +
         plural(c.stores, "store");
}

// ---- text ---------------------------------------------------------------------------------

void printCounts(std::ostream &out, const std::string &title, const Counts &c) {
  if (c.empty()) return;
  out << "  " << title << ":\n";
  for (const auto &[text, n] : c) out << "    " << n << "x " << text << "\n";
}

void printCompiles(std::ostream &out, const FunctionReport &f) {
  if (f.compiles.empty()) return;
  char line[160];
  std::snprintf(line, sizeof line, "  %5s %10s %6s %-24s %s\n", "entry", "ms", "nodes", "kernels",
                "reason");
  out << line;
  for (const CompileRow &c : f.compiles) {
    std::snprintf(line, sizeof line, "  %5d %10.2f %6lld %-24s ", c.entry, c.ms,
                  static_cast<long long>(c.nodes), codeText(c).c_str());
    out << line << c.reason << "\n";
  }
}

void printFunction(std::ostream &out, const Report &r, FunctionKey id, const FunctionReport &f) {
  int64_t n = static_cast<int64_t>(f.compiles.size());
  out << "\n"
      << functionName(r, id) << ": " << plural(n, "entry", "entries") << ", "
      << plural(static_cast<int64_t>(f.recompiles.size()), "recompile") << ", compile "
      << fixed(f.totalMs(), 1) << " ms total, " << fixed(f.maxMs(), 1) << " ms max\n";
  printCompiles(out, f);
  if (!f.recompiles.empty()) out << "  recompiles:\n";
  for (const Recompile &rc : f.recompiles) {
    out << "    entry " << rc.entry << ": " << rc.guard << "\n";
  }
  for (const LimitHit &h : f.limitHits) out << "  " << limitText(h) << "\n";
  if (!f.dynamic.empty()) out << "  dynamic shapes:\n";
  for (const DynamicDim &d : f.dynamic) {
    out << "    entry " << d.entry << ": " << dynamicText(d) << "\n";
  }
  printCounts(out, "graph breaks", f.breaks);
  printCounts(out, "perf hints", f.hints);
}

void printText(std::ostream &out, const Report &r) {
  out << "rcjit logs: " << r.file << "\n" << eventCounts(r) << "\n" << totals(r) << "\n";
  if (r.runs > 1) out << runsNote(r) << "\n";
  for (const auto &[id, f] : r.functions) printFunction(out, r, id, f);
  if (!r.hints.empty()) out << "\nother perf hints:\n";
  for (const auto &[text, n] : r.hints) out << "  " << n << "x " << text << "\n";
  out << "\ncache: " << cacheHeadline(r) << "\n";
  printCounts(out, "rejections", r.cache.rejections);
  printCounts(out, "other cache events", r.cache.other);
}

// ---- HTML ---------------------------------------------------------------------------------

// HTML text and attribute values: markupEscaped (Cli.h).
std::string escape(const std::string &s) { return markupEscaped(s); }

using Rows = std::vector<std::vector<std::string>>;

void htmlTable(std::ostream &o, const std::string &title, const std::vector<std::string> &head,
               const Rows &rows) {
  o << "<h2>" << escape(title) << "</h2>\n";
  if (rows.empty()) {
    o << "<p class=\"none\">none</p>\n";
    return;
  }
  o << "<table>\n<tr>";
  for (const std::string &h : head) o << "<th>" << escape(h) << "</th>";
  o << "</tr>\n";
  for (const auto &row : rows) {
    o << "<tr>";
    for (const std::string &cell : row) o << "<td>" << escape(cell) << "</td>";
    o << "</tr>\n";
  }
  o << "</table>\n";
}

Rows countRows(const Report &r, Counts FunctionReport::*member, const Counts &orphans) {
  Rows rows;
  for (const auto &[id, f] : r.functions) {
    for (const auto &[text, n] : f.*member)
      rows.push_back({functionName(r, id), text, std::to_string(n)});
  }
  for (const auto &[text, n] : orphans) rows.push_back({"-", text, std::to_string(n)});
  return rows;
}

Rows functionRows(const Report &r) {
  Rows rows;
  for (const auto &[id, f] : r.functions) {
    rows.push_back({functionName(r, id), std::to_string(f.compiles.size()),
                    std::to_string(f.recompiles.size()), std::to_string(f.limitHits.size()),
                    std::to_string(f.breakCount()), fixed(f.totalMs(), 2), fixed(f.maxMs(), 2)});
  }
  return rows;
}

Rows compileRows(const Report &r) {
  Rows rows;
  for (const auto &[id, f] : r.functions) {
    for (const CompileRow &c : f.compiles) {
      rows.push_back(
          {functionName(r, id), std::to_string(c.entry), fixed(c.ms, 2), c.reason, codeText(c)});
    }
  }
  return rows;
}

Rows recompileRows(const Report &r) {
  Rows rows;
  for (const auto &[id, f] : r.functions) {
    for (const Recompile &rc : f.recompiles) {
      rows.push_back({functionName(r, id), "entry " + std::to_string(rc.entry), rc.guard});
    }
    for (const LimitHit &h : f.limitHits) {
      rows.push_back({functionName(r, id), "limit " + std::to_string(h.limit) + " reached",
                      h.guard + " (later misses run eagerly)"});
    }
  }
  return rows;
}

// The symbolic dims (symbolic = true) or the dims that stayed static of every function.
Rows dynamicRows(const Report &r, bool symbolic) {
  Rows rows;
  for (const auto &[id, f] : r.functions) {
    for (const DynamicDim &d : f.dynamic) {
      if (d.symbolic() != symbolic) continue;
      std::vector<std::string> row = {functionName(r, id), std::to_string(d.entry),
                                      d.dims.empty() ? "-" : d.dims};
      if (symbolic) {
        row.push_back("s" + std::to_string(d.symbol));
        row.push_back(rangeText(d));
      }
      row.push_back(d.why);
      rows.push_back(std::move(row));
    }
  }
  return rows;
}

Rows cacheRows(const Report &r) {
  Rows rows;
  for (const auto &[what, n] : r.cache.byName) {
    rows.push_back({what.first, what.second.empty() ? "-" : what.second, std::to_string(n)});
  }
  for (const auto &[why, n] : r.cache.rejections)
    rows.push_back({"rejected", why, std::to_string(n)});
  for (const auto &[msg, n] : r.cache.other) rows.push_back({"other", msg, std::to_string(n)});
  return rows;
}

constexpr const char *kCss =
    "body{font-family:system-ui,sans-serif;margin:2em;color:#222}"
    "h1{font-size:1.4em}h2{font-size:1.15em;margin-top:1.6em}"
    "table{border-collapse:collapse}th,td{border:1px solid #ccc;padding:3px 8px;"
    "text-align:left;vertical-align:top;font-family:ui-monospace,monospace;font-size:.9em}"
    "th{background:#f0f0f0}p.none{color:#888}";

void writeHtml(std::ostream &o, const Report &r) {
  o << "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>rcjit logs: "
    << escape(r.file) << "</title>\n<style>" << kCss << "</style>\n</head>\n<body>\n"
    << "<h1>rcjit logs: " << escape(r.file) << "</h1>\n<p>" << escape(eventCounts(r)) << "<br>\n"
    << escape(totals(r)) << "<br>\n"
    << escape(runsNote(r)) << "</p>\n";
  htmlTable(
      o, "Functions",
      {"function", "entries", "recompiles", "limit hits", "graph breaks", "total ms", "max ms"},
      functionRows(r));
  htmlTable(o, "Compiles", {"function", "entry", "ms", "reason", "kernels"}, compileRows(r));
  htmlTable(o, "Recompiles", {"function", "entry", "failing guard"}, recompileRows(r));
  htmlTable(o, "Symbolic dims", {"function", "entry", "dims", "symbol", "range", "why"},
            dynamicRows(r, true));
  htmlTable(o, "Dims that stay static", {"function", "entry", "dims", "why"},
            dynamicRows(r, false));
  htmlTable(o, "Graph breaks", {"function", "break", "count"},
            countRows(r, &FunctionReport::breaks, {}));
  htmlTable(o, "Perf hints", {"function", "hint", "count"},
            countRows(r, &FunctionReport::hints, r.hints));
  htmlTable(o, "Cache events (" + cacheHeadline(r) + ")", {"event", "detail", "count"},
            cacheRows(r));
  o << "</body>\n</html>\n";
}

void saveHtml(const std::string &path, const Report &r) {
  std::ofstream o(path, std::ios::trunc);
  writeHtml(o, r);
  if (!o.flush()) throw std::runtime_error("cannot write '" + path + "'");
}

// ---- the command --------------------------------------------------------------------------

int run(const std::string &file, const std::string &html, std::ostream &out, std::ostream &err) {
  Report r = readTrace(file, err);
  if (r.malformed > 0 && r.malformed == r.lines) { // e.g. `rcjit logs /etc/passwd`
    throw std::runtime_error("'" + file + "' is not a trace: none of its " +
                             plural(r.lines, "line") + " is a trace event of schema " +
                             std::to_string(logging::kTraceSchema) +
                             " (RCJIT_TRACE_FILE=FILE writes them)");
  }
  printText(out, r);
  if (!html.empty()) {
    saveHtml(html, r);
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
