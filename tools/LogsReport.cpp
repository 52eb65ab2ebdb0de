// Reads a trace's typed events (support/Events.h) into per-function, per-entry reports.
#include "tools/LogsReport.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <stdexcept>
#include <type_traits>
#include <variant>

#include "tools/Cli.h"

using nlohmann::json;

namespace rcjit::tools {

double FunctionReport::totalMs() const {
  double t = 0;
  for (const EntryReport &e : entries) t += e.compiled ? e.ms : 0;
  return t;
}

double FunctionReport::maxMs() const {
  double m = 0;
  for (const EntryReport &e : entries) m = std::max(m, e.compiled ? e.ms : 0);
  return m;
}

int FunctionReport::breakCount() const {
  int n = 0;
  for (const auto &[where, count] : breaks) n += count;
  return n;
}

int FunctionReport::compiledCount() const {
  return static_cast<int>(std::count_if(entries.begin(), entries.end(),
                                        [](const EntryReport &e) { return e.compiled; }));
}

int FunctionReport::failedCount() const {
  return static_cast<int>(
      std::count_if(entries.begin(), entries.end(), [](const EntryReport &e) { return e.failed; }));
}

std::vector<DynamicDim> FunctionReport::dynamic() const {
  std::vector<DynamicDim> out;
  for (const EntryReport &e : entries) out.insert(out.end(), e.dynamic.begin(), e.dynamic.end());
  return out;
}

namespace {

// Reading state. Everything about an entry (its guards, graphs, code, compile steps, cache
// lookups, graph breaks, dynamic dims) is logged before its compile or compile_failed
// event, which may be the first of a new process appending to the trace: it waits in
// `pending` until that event says which run it belongs to.
struct Reader {
  TraceReport report;
  std::set<int> compiled; // functions with a compiled entry 0 in the current run
  std::map<int, EntryReport> pending;
  double time = 0; // the current line's "time"

  FunctionReport &function(std::optional<int64_t> id) {
    return report.functions[{report.runs, static_cast<int>(id.value_or(-1))}];
  }
  EntryReport &entryOf(int64_t id, int64_t entry) {
    EntryReport &e = pending[static_cast<int>(id)];
    e.entry = entry;
    return e;
  }
};

// The pending entry of `id` joins its function (in the current run).
void flushPending(Reader &rd, int id) {
  auto it = rd.pending.find(id);
  if (it == rd.pending.end()) return;
  FunctionReport &f = rd.function(id);
  for (const logging::GraphBreak &b : it->second.breaks) ++f.breaks[b.text()];
  f.entries.push_back(std::move(it->second));
  rd.pending.erase(it);
}

// A second successful "entry 0" of a function id means a new process appended to the trace.
void startEntry(Reader &rd, int id, int64_t entry, bool ok, double seconds) {
  if (ok && entry == 0 && rd.compiled.count(id)) {
    ++rd.report.runs;
    rd.compiled.clear();
    rd.report.runStart.push_back(rd.time - seconds);
  }
  if (ok && entry == 0) rd.compiled.insert(id);
  rd.entryOf(id, entry);
  flushPending(rd, id);
}

void add(Reader &rd, const logging::CompileEvent &e) {
  const int id = static_cast<int>(e.function);
  EntryReport &p = rd.entryOf(id, e.entry);
  p.compiled = true;
  p.ms = e.seconds * 1e3;
  p.start = rd.time - e.seconds;
  p.reason = e.reason;
  p.nodes = e.nodes;
  p.kernels = e.kernels;
  p.regionsCompiled = e.regionsCompiled;
  p.regionsReused = e.regionsReused;
  startEntry(rd, id, e.entry, true, e.seconds);
  if (e.name) rd.function(id).name = e.name;
}

void add(Reader &rd, const logging::CompileFailedEvent &e) {
  const int id = static_cast<int>(e.function);
  EntryReport &p = rd.entryOf(id, e.entry);
  p.failed = true;
  p.error = e.error;
  p.ms = e.seconds * 1e3;
  p.start = rd.time - e.seconds;
  p.reason = e.reason;
  startEntry(rd, id, e.entry, false, e.seconds);
  if (e.name) rd.function(id).name = e.name;
}

void add(Reader &rd, const logging::CallEvent &e) {
  std::vector<EntryReport> &entries = rd.function(e.function).entries;
  for (auto it = entries.rbegin(); it != entries.rend(); ++it) {
    if (it->compiled && it->entry == e.entry) {
      it->calls.push_back({e.call, e.seconds * 1e3, rd.time - e.seconds, e.tier.value_or("")});
      return;
    }
  }
}

void add(Reader &rd, const logging::RecompileEvent &e) {
  rd.function(e.function).recompiles.push_back({e.entry, e.guard});
}

void add(Reader &rd, const logging::RecompileLimitEvent &e) {
  rd.function(e.function).limitHits.push_back({e.limit, e.guard});
}

void add(Reader &rd, const logging::GraphBreakEvent &e) {
  EntryReport &p = rd.pending[static_cast<int>(e.function)];
  p.breaks.insert(p.breaks.end(), e.breaks.begin(), e.breaks.end());
}

void add(Reader &rd, const logging::DynamicSymbolEvent &e) {
  rd.entryOf(e.function, e.entry)
      .dynamic.push_back({e.entry, e.symbol, logging::dimsText(e.dims), e.min, e.max, e.why});
}

void add(Reader &rd, const logging::StaticDimEvent &e) {
  rd.entryOf(e.function, e.entry)
      .dynamic.push_back({e.entry, -1, logging::dimsText(e.dims), 0, 0, e.why});
}

void add(Reader &rd, const logging::GuardsEvent &e) {
  EntryReport &p = rd.entryOf(e.function, e.entry);
  p.guardsText = e.guards;
  if (e.table) p.guards = *e.table;
  if (e.notes) p.guardNotes = *e.notes;
}

void add(Reader &rd, const logging::GraphDumpEvent &e) {
  EntryReport &p = rd.entryOf(e.function, e.entry);
  p.graph = e.graph;
  p.traced = e.traced.value_or("");
  p.fusion = e.fusion.value_or("");
}

void add(Reader &rd, const logging::OutputCodeEvent &e) {
  rd.entryOf(e.function, e.entry).llvmIr = e.llvmIr;
}

void add(Reader &rd, const logging::CompileStepEvent &e) {
  if (!e.function || !e.entry) return; // a step outside an entry's compile (a CLI dump)
  rd.entryOf(*e.function, *e.entry)
      .steps.push_back({e.step, e.phase.value_or(""), e.result, e.seconds * 1e3});
}

void add(Reader &rd, const logging::PerfHintEvent &e) {
  ++(e.function ? rd.function(e.function).hints : rd.report.hints)[e.message()];
}

// A cache lookup or store during an entry's compile is listed with the entry too.
template <class E> void addCacheEntry(Reader &rd, const E &e, const std::string &what) {
  if (e.function && e.entry) {
    ++rd.entryOf(*e.function, *e.entry).cache[what + (e.name.empty() ? "" : " " + e.name)];
  }
}

void add(Reader &rd, const logging::CacheHitEvent &e) {
  // a remote hit (RCJIT_REMOTE_CACHE) counts with the disk hits: loaded, not compiled here
  ++(e.where == "memory" ? rd.report.cache.memoryHits : rd.report.cache.diskHits);
  ++rd.report.cache.byName[{e.where + " hit", e.name}];
  addCacheEntry(rd, e, e.where + " hit");
}

void add(Reader &rd, const logging::CacheMissEvent &e) {
  ++rd.report.cache.misses;
  ++rd.report.cache.byName[{"miss", e.name}];
  addCacheEntry(rd, e, "miss");
}

void add(Reader &rd, const logging::CacheStoreEvent &e) {
  ++rd.report.cache.stores;
  ++rd.report.cache.byName[{"store", e.name}];
  addCacheEntry(rd, e, "store");
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

// Every string of a trace line shown with its control characters as text (controlEscaped):
// neither the summary nor the HTML report passes on a raw ESC or BEL from the trace.
void escapeControls(json &j) {
  if (j.is_string()) {
    std::string &s = j.get_ref<std::string &>();
    auto control = [](char c) {
      const auto u = static_cast<unsigned char>(c);
      return (u < 0x20 && c != '\n' && c != '\t') || u == 0x7f || u == 0xc2;
    };
    if (std::any_of(s.begin(), s.end(), control)) s = controlEscaped(s);
  } else if (j.is_structured()) {
    for (json &v : j) escapeControls(v);
  }
}

// A trace of another version is wrong on every line: the first few say why.
constexpr int kShownErrors = 20;

TraceReport readTraceLines(const std::string &path, std::ostream &err) {
  std::ifstream in(path);
  if (!in) {
    throw std::runtime_error("cannot read trace file '" + path + "': " + std::strerror(errno));
  }
  Reader rd;
  TraceReport &r = rd.report;
  r.file = path;
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    ++r.lines;
    try {
      json j = json::parse(line);
      escapeControls(j);
      logging::Event event = logging::parseEvent(j);
      rd.time = j.is_object() && j.contains("time") && j["time"].is_number()
                    ? j["time"].get<double>()
                    : 0.0;
      if (r.runStart.empty()) r.runStart.push_back(rd.time);
      addEvent(rd, event);
    } catch (const std::bad_alloc &) {
      throw;
    } catch (const std::exception &e) {
      if (++r.malformed <= kShownErrors) {
        err << "rcjit logs: " << path << ": line " << n << ": " << controlEscaped(describe(e))
            << "\n";
      }
    }
  }
  if (r.malformed > kShownErrors) {
    err << "rcjit logs: " << path << ": " << r.malformed - kShownErrors
        << " more malformed lines not shown\n";
  }
  if (in.bad()) throw std::runtime_error("error while reading trace file '" + path + "'");
  while (!rd.pending.empty()) flushPending(rd, rd.pending.begin()->first);
  return r;
}

} // namespace

TraceReport readTraceReport(const std::string &path, std::ostream &err) {
  if (std::filesystem::is_directory(path)) {
    throw std::runtime_error("cannot read trace file '" + path + "': it is a directory");
  }
  checkRegularFile(path, "trace file"); // a FIFO with no writer would block the open
  try {
    return readTraceLines(path, err);
  } catch (const std::bad_alloc &) {
    throw std::runtime_error("out of memory while reading trace file '" + path + "'");
  }
}

// ---- shared wording -----------------------------------------------------------------------

std::string fixedDigits(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

std::string functionName(const TraceReport &r, FunctionKey k) {
  std::string run = r.runs > 1 ? "run " + std::to_string(k.run) + " " : "";
  if (k.id < 0) return run + "unknown function";
  auto it = r.functions.find(k);
  return run +
         logging::functionLabel(k.id, it == r.functions.end() ? std::nullopt : it->second.name);
}

std::string codeText(const EntryReport &c) {
  if (c.regionsCompiled + c.regionsReused > 0) {
    return plural(c.regionsCompiled, "region") + " (+" + std::to_string(c.regionsReused) +
           " reused)";
  }
  return std::to_string(c.kernels);
}

std::string eventCounts(const TraceReport &r) {
  std::string s;
  for (const auto &[kind, n] : r.events)
    s += (s.empty() ? "" : ", ") + std::to_string(n) + " " + kind;
  return plural(r.lines - r.malformed, "event") + (s.empty() ? "" : " (" + s + ")") + "; " +
         plural(r.malformed, "malformed line");
}

std::string totals(const TraceReport &r) {
  int entries = 0, recompiles = 0, limits = 0, breaks = 0, failed = 0;
  double ms = 0;
  for (const auto &[id, f] : r.functions) {
    entries += f.compiledCount();
    failed += f.failedCount();
    recompiles += static_cast<int>(f.recompiles.size());
    limits += static_cast<int>(f.limitHits.size());
    breaks += f.breakCount();
    ms += f.totalMs();
  }
  return plural(static_cast<int64_t>(r.functions.size()), "function") + ", " +
         plural(entries, "entry", "entries") + ", " + plural(recompiles, "recompile") + ", " +
         plural(limits, "recompile-limit hit") + ", " + plural(breaks, "graph break") +
         (failed ? ", " + plural(failed, "failed compile") : "") + ", compile " +
         fixedDigits(ms, 1) + " ms total";
}

std::string runsNote(const TraceReport &r) {
  if (r.runs == 1) return "";
  return std::to_string(r.runs) + " runs: processes appending to one trace restart ids at 0";
}

std::string limitText(const LimitHit &h) {
  return "recompile_limit (" + std::to_string(h.limit) +
         ") reached, later misses run eagerly; last failing guard: " + h.guard;
}

std::string rangeText(const DynamicDim &d) {
  return "[" + std::to_string(d.min) + ", " +
         (d.max == INT64_MAX ? std::string("inf") : std::to_string(d.max)) + "]";
}

std::string dynamicText(const DynamicDim &d) {
  if (d.symbolic()) {
    return d.dims + " -> symbol s" + std::to_string(d.symbol) + " in " + rangeText(d) + " (" +
           d.why + ")";
  }
  return (d.dims.empty() ? "" : d.dims + " stays static: ") + d.why;
}

std::string cacheHeadline(const TraceReport &r) {
  int rejected = 0;
  for (const auto &[reason, n] : r.cache.rejections) rejected += n;
  const CacheReport &c = r.cache;
  return plural(c.diskHits, "disk hit") + ", " + plural(rejected, "rejection") + ", " +
         plural(c.memoryHits, "memory hit") + ", " + plural(c.misses, "miss", "misses") + ", " +
         plural(c.stores, "store");
}

} // namespace rcjit::tools
