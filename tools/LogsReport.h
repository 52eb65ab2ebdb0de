// What a RCJIT_TRACE_FILE says, gathered per function and per entry: the model that the
// logs command's text summary and its HTML report (tools/LogsHtml.h) print.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "support/Events.h"

namespace rcjit::tools {

using Counts = std::map<std::string, int>; // text → occurrences, in text order

/// One step of an entry's compile (CompileStepEvent): trace, a pass, fuse, LLVM, ...
struct StepRow {
  std::string step, phase, result;
  double ms = 0;
};

/// A call of an entry that the trace recorded (the first ones, then powers of two).
struct CallRow {
  int64_t call = 0;
  double ms = 0;
  double time = 0;  // seconds since the run's first event, at the call's start
  std::string tier; // tiered compilation: "fast" or "optimized" ("" untiered)
};

/// One "dynamic" event: an argument dim that became a symbol of an entry, or a candidate dim
/// that stayed static (symbol < 0) and why.
struct DynamicDim {
  int64_t entry = -1;
  int64_t symbol = -1;
  std::string dims; // "arg 0 dim 1", "arg 0 dim 0 = arg 1 dim 0", "every dim"
  int64_t min = 0, max = 0;
  std::string why;
  bool symbolic() const { return symbol >= 0; }
};

/// One entry of a compiled function: how its compile went, and what it produced.
struct EntryReport {
  int64_t entry = 0;
  bool compiled = false; // a compile event arrived
  bool failed = false;   // a compile_failed event arrived
  std::string error;     // the failure's message
  double ms = 0;         // compile time (until the failure, for a failed one)
  double start = 0;      // seconds since the run's first event, when the compile began
  std::string reason;
  int64_t nodes = 0, kernels = 0, regionsCompiled = 0, regionsReused = 0;
  std::vector<logging::GuardRow> guards;
  std::vector<std::string> guardNotes;
  std::string guardsText; // traces without the table
  std::string traced, graph, fusion, llvmIr;
  std::vector<StepRow> steps;
  std::vector<logging::GraphBreak> breaks;
  std::vector<DynamicDim> dynamic;
  Counts cache; // "memory hit (rcjit_f0_e0)" → count
  std::vector<CallRow> calls;
};

struct Recompile {
  int64_t entry = 0;
  std::string guard;
};

struct LimitHit {
  int64_t limit = 0;
  std::string guard;
};

/// What the trace says about one compiled function (the "function" id of its events).
struct FunctionReport {
  std::optional<std::string> name;  // CompileOptions::name and/or the compile() call's file:line
  std::vector<EntryReport> entries; // in trace order
  std::vector<Recompile> recompiles;
  std::vector<LimitHit> limitHits;
  Counts breaks; // one graph break (its text) → times traced
  Counts hints;

  double totalMs() const;
  double maxMs() const;
  int breakCount() const;
  int compiledCount() const;
  int failedCount() const;
  std::vector<DynamicDim> dynamic() const;
};

/// A function of one process: ids restart at 0 in each process appending to the same trace.
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

struct TraceReport {
  std::string file;
  int runs = 1;
  std::map<FunctionKey, FunctionReport> functions;
  Counts hints; // perf hints that name no function
  CacheReport cache;
  Counts events; // event kind → count
  int lines = 0, malformed = 0;
  std::vector<double> runStart; // per run (index run - 1): the time of its first event
};

/// Reads the JSON-lines trace at `path`. Malformed lines are counted and the first few
/// reported on `err` ("line N: ..."); throws std::runtime_error when the file cannot be read.
TraceReport readTraceReport(const std::string &path, std::ostream &err);

// Wording shared by the text and HTML reports.
std::string fixedDigits(double v, int digits);
/// "function 3 (model.cpp:42)", or "run 2 function 3 (model.cpp:42)" when several processes
/// appended to the trace.
std::string functionName(const TraceReport &r, FunctionKey k);
/// The generated code of an entry: kernels (full mode) or regions (regional mode).
std::string codeText(const EntryReport &e);
std::string eventCounts(const TraceReport &r);
std::string totals(const TraceReport &r);
std::string runsNote(const TraceReport &r);
std::string limitText(const LimitHit &h);
std::string rangeText(const DynamicDim &d);
std::string dynamicText(const DynamicDim &d);
std::string cacheHeadline(const TraceReport &r);

} // namespace rcjit::tools
