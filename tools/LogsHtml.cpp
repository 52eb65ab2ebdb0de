// The logs command's HTML report: summary tables, a timeline, and a section per entry.
#include "tools/LogsHtml.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <stdexcept>
#include <vector>

#include "tools/Cli.h"

namespace rcjit::tools {

namespace {

std::string esc(const std::string &s) { return markupEscaped(s); }

using HtmlRows = std::vector<std::vector<std::string>>;

// "fn-1-3": the anchor of function 3 of run 1; "fn-1-3-e0" of its entry 0.
std::string htmlAnchor(FunctionKey k) {
  return "fn-" + std::to_string(k.run) + "-" + std::to_string(k.id < 0 ? 0 : k.id) +
         (k.id < 0 ? "u" : "");
}
std::string htmlAnchor(FunctionKey k, const EntryReport &e, size_t index) {
  return htmlAnchor(k) + "-e" + std::to_string(e.entry) + (e.failed ? "-f" : "") +
         (index ? "-" + std::to_string(index) : "");
}

// A table inside an entry: no heading of its own.
void htmlInnerTable(std::ostream &o, const std::vector<std::string> &head, const HtmlRows &rows) {
  o << "<table>\n<tr>";
  for (const std::string &h : head) o << "<th>" << esc(h) << "</th>";
  o << "</tr>\n";
  for (const auto &row : rows) {
    o << "<tr>";
    for (const std::string &cell : row) o << "<td>" << esc(cell) << "</td>";
    o << "</tr>\n";
  }
  o << "</table>\n";
}

void htmlTable(std::ostream &o, const std::string &title, const std::vector<std::string> &head,
               const HtmlRows &rows) {
  o << "<h2>" << esc(title) << "</h2>\n";
  if (rows.empty()) {
    o << "<p class=\"none\">none</p>\n";
    return;
  }
  htmlInnerTable(o, head, rows);
}

void openSection(std::ostream &o, const std::string &id) { o << "<section id=\"" << id << "\">\n"; }
void closeSection(std::ostream &o) { o << "</section>\n"; }

// ---- the summary tables -------------------------------------------------------------------

HtmlRows htmlCountRows(const TraceReport &r, Counts FunctionReport::*member,
                       const Counts &orphans) {
  HtmlRows rows;
  for (const auto &[id, f] : r.functions) {
    for (const auto &[text, n] : f.*member)
      rows.push_back({functionName(r, id), text, std::to_string(n)});
  }
  for (const auto &[text, n] : orphans) rows.push_back({"-", text, std::to_string(n)});
  return rows;
}

HtmlRows htmlCompileRows(const TraceReport &r) {
  HtmlRows rows;
  for (const auto &[id, f] : r.functions) {
    for (const EntryReport &c : f.entries) {
      if (!c.compiled) continue;
      rows.push_back({functionName(r, id), std::to_string(c.entry), fixedDigits(c.ms, 2), c.reason,
                      codeText(c)});
    }
  }
  return rows;
}

HtmlRows htmlRecompileRows(const TraceReport &r) {
  HtmlRows rows;
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

HtmlRows htmlDynamicRows(const TraceReport &r, bool symbolic) {
  HtmlRows rows;
  for (const auto &[id, f] : r.functions) {
    for (const DynamicDim &d : f.dynamic()) {
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

HtmlRows htmlCacheRows(const TraceReport &r) {
  HtmlRows rows;
  for (const auto &[what, n] : r.cache.byName) {
    rows.push_back({what.first, what.second.empty() ? "-" : what.second, std::to_string(n)});
  }
  for (const auto &[why, n] : r.cache.rejections)
    rows.push_back({"rejected", why, std::to_string(n)});
  for (const auto &[msg, n] : r.cache.other) rows.push_back({"other", msg, std::to_string(n)});
  return rows;
}

// The index: every function with its entries, linked to their sections.
void htmlIndex(std::ostream &o, const TraceReport &r) {
  openSection(o, "index");
  o << "<h2>Functions</h2>\n";
  if (r.functions.empty())
    o << "<p class=\"none\">none</p>\n";
  else
    o << "<table>\n<tr><th>function</th><th>entries</th><th>failed</th><th>recompiles</th>"
         "<th>limit hits</th><th>graph breaks</th><th>total ms</th><th>max ms</th></tr>\n";
  for (const auto &[id, f] : r.functions) {
    o << "<tr><td><a href=\"#" << htmlAnchor(id) << "\">" << esc(functionName(r, id)) << "</a>";
    for (size_t i = 0; i < f.entries.size(); ++i) {
      const EntryReport &e = f.entries[i];
      o << " <a class=\"" << (e.failed ? "bad" : "entry") << "\" href=\"#" << htmlAnchor(id, e, i)
        << "\">" << (e.failed ? "failed " : "") << "e" << e.entry << "</a>";
    }
    o << "</td><td>" << f.compiledCount() << "</td><td>" << f.failedCount() << "</td><td>"
      << f.recompiles.size() << "</td><td>" << f.limitHits.size() << "</td><td>" << f.breakCount()
      << "</td><td>" << fixedDigits(f.totalMs(), 2) << "</td><td>" << fixedDigits(f.maxMs(), 2)
      << "</td></tr>\n";
  }
  if (!r.functions.empty()) o << "</table>\n";
  closeSection(o);
}

// ---- the timeline -------------------------------------------------------------------------

// One SVG per run: a row per function, compiles as bars (red: failed), traced calls as ticks.
void htmlTimeline(std::ostream &o, const TraceReport &r) {
  openSection(o, "timeline");
  o << "<h2>Timeline</h2>\n<p>Compiles (blue bars; red: failed) and the calls the trace "
       "recorded (green ticks: each entry's first "
    << logging::kTracedCalls << " calls, then calls 4, 8, 16, ...), by function, in seconds "
    << "since the run's first event.</p>\n";
  bool any = false;
  for (int run = 1; run <= r.runs; ++run) {
    const double origin = run - 1 < static_cast<int>(r.runStart.size()) ? r.runStart[run - 1] : 0;
    std::vector<std::pair<FunctionKey, const FunctionReport *>> rows;
    double end = 0;
    for (const auto &[id, f] : r.functions) {
      if (id.run != run) continue;
      rows.push_back({id, &f});
      for (const EntryReport &e : f.entries) {
        if (e.start <= 0) continue;
        end = std::max(end, e.start - origin + e.ms / 1e3);
        for (const CallRow &c : e.calls) end = std::max(end, c.time - origin + c.ms / 1e3);
      }
    }
    if (rows.empty() || end <= 0 || origin <= 0) continue;
    any = true;
    const int labelW = 300, plotW = 640, rowH = 22, top = 24;
    const int height = top + rowH * static_cast<int>(rows.size()) + 8;
    auto x = [&](double t) { return labelW + (t - origin) / end * plotW; };
    if (r.runs > 1) o << "<h3>run " << run << "</h3>\n";
    o << "<svg class=\"timeline\" width=\"" << labelW + plotW + 40 << "\" height=\"" << height
      << "\" role=\"img\">\n";
    for (int i = 0; i <= 4; ++i) {
      const double t = end * i / 4, px = labelW + plotW * i / 4.0;
      o << "<line x1=\"" << px << "\" y1=\"" << top - 6 << "\" x2=\"" << px << "\" y2=\""
        << height - 4 << "\" stroke=\"#ddd\"/><text x=\"" << px << "\" y=\"12\" "
        << "font-size=\"11\" text-anchor=\"middle\">" << fixedDigits(t, t < 1 ? 3 : 2)
        << " s</text>\n";
    }
    for (size_t i = 0; i < rows.size(); ++i) {
      const double y = top + rowH * static_cast<double>(i);
      std::string label = functionName(r, rows[i].first);
      if (label.size() > 44) label = label.substr(0, 41) + "...";
      o << "<text x=\"4\" y=\"" << y + 14 << "\" font-size=\"12\">" << esc(label) << "</text>\n";
      for (const EntryReport &e : rows[i].second->entries) {
        if (e.start <= 0) continue;
        o << "<rect x=\"" << x(e.start) << "\" y=\"" << y + 3 << "\" width=\""
          << std::max(1.5, e.ms / 1e3 / end * plotW) << "\" height=\"" << rowH - 8 << "\" fill=\""
          << (e.failed ? "#d33" : "#4a7bd0") << "\"><title>"
          << esc("entry " + std::to_string(e.entry) + (e.failed ? " failed" : " compiled") +
                 " in " + fixedDigits(e.ms, 2) + " ms (" + e.reason + ")")
          << "</title></rect>\n";
        for (const CallRow &c : e.calls) {
          o << "<rect x=\"" << x(c.time) << "\" y=\"" << y + 1 << "\" width=\""
            << std::max(1.0, c.ms / 1e3 / end * plotW) << "\" height=\"" << rowH - 4
            << "\" fill=\"#2a2\" opacity=\"0.8\"><title>"
            << esc("entry " + std::to_string(e.entry) + " call " + std::to_string(c.call) + ": " +
                   fixedDigits(c.ms, 3) + " ms")
            << "</title></rect>\n";
        }
      }
    }
    o << "</svg>\n";
  }
  if (!any) o << "<p class=\"none\">no timed events (a trace without times)</p>\n";
  closeSection(o);
}

// ---- failures and source locations ----------------------------------------------------------

void htmlFailures(std::ostream &o, const TraceReport &r) {
  openSection(o, "failures");
  o << "<h2>Failed compiles</h2>\n";
  bool any = false;
  for (const auto &[id, f] : r.functions) {
    for (size_t i = 0; i < f.entries.size(); ++i) {
      const EntryReport &e = f.entries[i];
      if (!e.failed) continue;
      if (!any)
        o << "<table>\n<tr><th>function</th><th>entry</th><th>ms</th><th>why it "
             "compiled</th><th>error</th></tr>\n";
      any = true;
      o << "<tr><td><a href=\"#" << htmlAnchor(id, e, i) << "\">" << esc(functionName(r, id))
        << "</a></td><td>" << e.entry << "</td><td>" << fixedDigits(e.ms, 2) << "</td><td>"
        << esc(e.reason) << "</td><td class=\"error\">" << esc(e.error) << "</td></tr>\n";
    }
  }
  o << (any ? "</table>\n" : "<p class=\"none\">none</p>\n");
  closeSection(o);
}

// "model.cpp:42" → ("model.cpp", 42); ("", 0) when the text has no ":line" at its end.
std::pair<std::string, int> htmlSplitLocation(const std::string &s) {
  size_t colon = s.rfind(':');
  if (colon == std::string::npos || colon + 1 >= s.size()) return {"", 0};
  for (size_t i = colon + 1; i < s.size(); ++i) {
    if (!std::isdigit(static_cast<unsigned char>(s[i]))) return {"", 0};
  }
  size_t start = s.rfind(", ", colon);
  start = start == std::string::npos ? 0 : start + 2;
  return {s.substr(start, colon - start), std::stoi(s.substr(colon + 1))};
}

// The places in the user's source that the trace names: compile() calls and host reads, as
// a tree of file → line → what happened there (tlparse's stack trie, one frame deep).
void htmlSources(std::ostream &o, const TraceReport &r) {
  openSection(o, "sources");
  o << "<h2>Source locations</h2>\n";
  std::map<std::string, std::map<int, std::set<std::string>>> tree;
  for (const auto &[id, f] : r.functions) {
    if (f.name) {
      auto [file, line] = htmlSplitLocation(*f.name);
      if (!file.empty()) tree[file][line].insert("compile() of " + functionName(r, id));
    }
    for (const EntryReport &e : f.entries) {
      for (const logging::GraphBreak &b : e.breaks) {
        if (!b.file || b.file->empty()) continue;
        tree[*b.file][static_cast<int>(b.line.value_or(0))].insert(
            "graph break in " + functionName(r, id) + ": " + b.op + "() on the result of " +
            b.producer + (b.module ? " computed in module " + *b.module : std::string()) +
            (b.readIn ? ", read in module " + *b.readIn : std::string()));
      }
    }
  }
  if (tree.empty())
    o << "<p class=\"none\">none</p>\n";
  else
    o << "<ul class=\"tree\">\n";
  for (const auto &[file, lines] : tree) {
    o << "<li>" << esc(file) << "\n<ul>\n";
    for (const auto &[line, what] : lines) {
      o << "<li>line " << line << "<ul>";
      for (const std::string &w : what) o << "<li>" << esc(w) << "</li>";
      o << "</ul></li>\n";
    }
    o << "</ul></li>\n";
  }
  if (!tree.empty()) o << "</ul>\n";
  closeSection(o);
}

// ---- one entry ----------------------------------------------------------------------------

void htmlPart(std::ostream &o, const char *part, const std::string &title) {
  o << "<div class=\"part\" data-part=\"" << part << "\">\n<h4>" << esc(title) << "</h4>\n";
}

void htmlPre(std::ostream &o, const char *part, const std::string &title, const std::string &text,
             bool open) {
  if (text.empty()) return;
  o << "<div class=\"part\" data-part=\"" << part << "\">\n<details" << (open ? " open" : "")
    << "><summary>" << esc(title) << "</summary>\n<pre>" << esc(text) << "</pre>\n</details>\n"
    << "</div>\n";
}

// Compile time by phase: trace, passes, lower, llvm, load (and what the logs cost). A target
// compile that reported its own steps (the CPU's llvm and load) is counted through them.
void htmlPhases(std::ostream &o, const EntryReport &e) {
  if (e.steps.empty()) return;
  std::map<std::string, double> by;
  for (const StepRow &s : e.steps) by[s.phase.empty() ? "other" : s.phase] += s.ms;
  const double nested = by["llvm"] + by["load"] + by["logging"];
  if (nested > 0) {
    by["target (other)"] = std::max(0.0, by["target"] - nested);
    by.erase("target");
  }
  double counted = 0;
  for (const auto &[phase, ms] : by) counted += ms;
  if (e.ms > counted) by["rest (guards, plans, probes)"] = e.ms - counted;
  htmlPart(o, "phases", "Compile time by phase");
  o << "<table>\n<tr><th>phase</th><th>ms</th><th>share</th></tr>\n";
  const double total = std::max(e.ms, counted);
  for (const char *phase : {"trace", "passes", "lower", "llvm", "load", "target", "target (other)",
                            "autotune", "logging", "other", "rest (guards, plans, probes)"}) {
    auto it = by.find(phase);
    if (it == by.end() || it->second <= 0) continue;
    const double pct = total > 0 ? 100 * it->second / total : 0;
    o << "<tr><td>" << esc(phase) << "</td><td>" << fixedDigits(it->second, 2)
      << "</td><td><span class=\"bar\" style=\"width:" << fixedDigits(pct * 2, 0) << "px\"></span> "
      << fixedDigits(pct, 1) << " %</td></tr>\n";
  }
  o << "</table>\n</div>\n";
  HtmlRows rows;
  for (const StepRow &s : e.steps) rows.push_back({s.step, s.phase, fixedDigits(s.ms, 3)});
  o << "<div class=\"part\" data-part=\"steps\">\n<details><summary>Compile steps ("
    << e.steps.size() << ")</summary>\n";
  htmlInnerTable(o, {"step", "phase", "ms"}, rows);
  o << "</details>\n</div>\n";
}

void htmlGuards(std::ostream &o, const EntryReport &e) {
  if (e.guards.empty() && e.guardsText.empty()) return;
  htmlPart(o, "guards", "Guards");
  if (e.guards.empty()) {
    o << "<pre>" << esc(e.guardsText) << "</pre>\n</div>\n";
    return;
  }
  HtmlRows rows;
  for (const logging::GuardRow &g : e.guards) {
    rows.push_back({g.input, g.dtype, g.device, g.sizes, g.strides, g.requiresGrad ? "yes" : ""});
  }
  htmlInnerTable(o, {"input", "dtype", "device", "sizes", "strides", "requires_grad"}, rows);
  for (const std::string &n : e.guardNotes) o << "<p>" << esc(n) << "</p>\n";
  o << "</div>\n";
}

void htmlBreaks(std::ostream &o, const EntryReport &e) {
  if (e.breaks.empty()) return;
  htmlPart(o, "breaks", "Graph breaks");
  HtmlRows rows;
  for (const logging::GraphBreak &b : e.breaks) {
    rows.push_back(
        {b.op + "() on the result of " + b.producer + " (%" + std::to_string(b.node) + ")",
         b.file ? *b.file + ":" + std::to_string(b.line.value_or(0)) : "-", b.module.value_or("-"),
         b.readIn.value_or("-")});
  }
  htmlInnerTable(o, {"host read", "read at", "value computed in", "read in module"}, rows);
  o << "<p>The function's C++ runs on every call and the work between host reads runs as "
       "compiled segments: keep the value a tensor (where() instead of branching on it) or "
       "read it outside the compiled function.</p>\n</div>\n";
}

void htmlEntry(std::ostream &o, const TraceReport &r, FunctionKey id, const EntryReport &e,
               size_t index) {
  o << "<section class=\"entry" << (e.failed ? " failed" : "") << "\" id=\""
    << htmlAnchor(id, e, index) << "\">\n<h3>" << esc(functionName(r, id)) << " entry " << e.entry
    << (e.failed     ? ": compile failed"
        : e.compiled ? ""
                     : ": not compiled")
    << "</h3>\n<p>";
  if (e.compiled || e.failed) {
    o << (e.failed ? "failed after " : "compiled in ") << fixedDigits(e.ms, 2)
      << " ms; why: " << esc(e.reason);
  }
  if (e.compiled) o << "; " << e.nodes << " nodes; kernels: " << esc(codeText(e));
  o << "</p>\n";
  if (e.failed) {
    htmlPart(o, "failure", "Failure");
    o << "<pre class=\"error\">" << esc(e.error) << "</pre>\n</div>\n";
  }
  htmlPhases(o, e);
  htmlGuards(o, e);
  htmlBreaks(o, e);
  if (!e.dynamic.empty()) {
    htmlPart(o, "dynamic", "Dynamic dims");
    o << "<ul>";
    for (const DynamicDim &d : e.dynamic) o << "<li>" << esc(dynamicText(d)) << "</li>";
    o << "</ul>\n</div>\n";
  }
  htmlPre(o, "traced", "Graph as traced (before the passes)", e.traced, false);
  htmlPre(o, "fusion", "Fusion groups", e.fusion, true);
  htmlPre(o, "graph", "Graph after the passes, with its program or regional plan", e.graph, false);
  htmlPre(o, "code", "LLVM IR", e.llvmIr, false);
  if (!e.cache.empty()) {
    htmlPart(o, "cache", "Cache lookups during the compile");
    HtmlRows rows;
    for (const auto &[what, n] : e.cache) rows.push_back({what, std::to_string(n)});
    htmlInnerTable(o, {"event", "count"}, rows);
    o << "</div>\n";
  }
  if (!e.calls.empty()) {
    htmlPart(o, "calls", "Calls");
    HtmlRows rows;
    bool tiered = false; // tiered compilation: which tier each call ran
    for (const CallRow &c : e.calls) tiered = tiered || !c.tier.empty();
    for (const CallRow &c : e.calls) {
      rows.push_back({std::to_string(c.call), fixedDigits(c.ms, 3)});
      if (tiered) rows.back().push_back(c.tier.empty() ? "-" : c.tier);
    }
    htmlInnerTable(o,
                   tiered ? std::vector<std::string>{"call", "ms", "tier"}
                          : std::vector<std::string>{"call", "ms"},
                   rows);
    o << "</div>\n";
  }
  o << "</section>\n";
}

void htmlFunction(std::ostream &o, const TraceReport &r, FunctionKey id, const FunctionReport &f) {
  o << "<section class=\"function\" id=\"" << htmlAnchor(id) << "\">\n<h2>"
    << esc(functionName(r, id)) << "</h2>\n";
  if (!f.entries.empty()) {
    o << "<div class=\"part\" data-part=\"chain\">\n<h4>Compiles in order</h4>\n<ol start=\"0\">";
    for (size_t i = 0; i < f.entries.size(); ++i) {
      const EntryReport &e = f.entries[i];
      o << "<li><a href=\"#" << htmlAnchor(id, e, i) << "\">entry " << e.entry << "</a>"
        << (e.failed ? " (failed)" : "") << ": " << esc(e.reason) << "</li>";
    }
    o << "</ol>\n";
    for (const LimitHit &h : f.limitHits) o << "<p>" << esc(limitText(h)) << "</p>\n";
    o << "</div>\n";
  }
  for (size_t i = 0; i < f.entries.size(); ++i) htmlEntry(o, r, id, f.entries[i], i);
  o << "</section>\n";
}

constexpr const char *kHtmlCss =
    "body{font-family:system-ui,sans-serif;margin:2em;color:#222;max-width:1200px}"
    "h1{font-size:1.4em}h2{font-size:1.15em;margin-top:1.6em}h3{font-size:1.05em;"
    "margin:1.2em 0 .3em;border-top:1px solid #ccc;padding-top:.6em}h4{font-size:.95em;"
    "margin:.8em 0 .3em}table{border-collapse:collapse}th,td{border:1px solid #ccc;"
    "padding:3px 8px;text-align:left;vertical-align:top;font-family:ui-monospace,monospace;"
    "font-size:.9em}th{background:#f0f0f0}p.none{color:#888}pre{background:#f7f7f7;"
    "padding:.6em;overflow-x:auto;font-size:.85em;max-height:40em}summary{cursor:pointer;"
    "font-weight:600;font-size:.95em}.error,a.bad{color:#b00}section.failed h3{color:#b00}"
    "span.bar{display:inline-block;height:.8em;background:#4a7bd0}"
    "section.function{margin-top:2em}ul.tree{font-family:ui-monospace,monospace;"
    "font-size:.9em}";

} // namespace

void writeLogsHtml(std::ostream &o, const TraceReport &r) {
  o << "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>rcjit logs: "
    << esc(r.file) << "</title>\n<style>" << kHtmlCss << "</style>\n</head>\n<body>\n"
    << "<h1>rcjit logs: " << esc(r.file) << "</h1>\n<p>" << esc(eventCounts(r)) << "<br>\n"
    << esc(totals(r)) << "<br>\n"
    << esc(runsNote(r)) << "</p>\n";
  htmlIndex(o, r);
  htmlTimeline(o, r);
  htmlFailures(o, r);
  openSection(o, "compiles");
  htmlTable(o, "Compiles", {"function", "entry", "ms", "reason", "kernels"}, htmlCompileRows(r));
  closeSection(o);
  openSection(o, "recompiles");
  htmlTable(o, "Recompiles", {"function", "entry", "failing guard"}, htmlRecompileRows(r));
  closeSection(o);
  openSection(o, "dynamic");
  htmlTable(o, "Symbolic dims", {"function", "entry", "dims", "symbol", "range", "why"},
            htmlDynamicRows(r, true));
  htmlTable(o, "Dims that stay static", {"function", "entry", "dims", "why"},
            htmlDynamicRows(r, false));
  closeSection(o);
  openSection(o, "graph-breaks");
  htmlTable(o, "Graph breaks", {"function", "break", "count"},
            htmlCountRows(r, &FunctionReport::breaks, {}));
  closeSection(o);
  openSection(o, "hints");
  htmlTable(o, "Perf hints", {"function", "hint", "count"},
            htmlCountRows(r, &FunctionReport::hints, r.hints));
  closeSection(o);
  htmlSources(o, r);
  openSection(o, "cache");
  htmlTable(o, "Cache events (" + cacheHeadline(r) + ")", {"event", "detail", "count"},
            htmlCacheRows(r));
  closeSection(o);
  openSection(o, "entries");
  o << "<h2>Entries</h2>\n";
  for (const auto &[id, f] : r.functions) htmlFunction(o, r, id, f);
  closeSection(o);
  o << "</body>\n</html>\n";
}

void saveLogsHtml(const std::string &path, const TraceReport &r) {
  std::ofstream o(path, std::ios::trunc);
  if (!o)
    throw std::runtime_error("--html: cannot write " + path + " (" + std::strerror(errno) + ")");
  writeLogsHtml(o, r);
  closeOutput(o, "--html", path);
}

} // namespace rcjit::tools
