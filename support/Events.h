// The typed trace-event schema: one struct per event that the logs and RCJIT_TRACE_FILE carry.
#pragma once
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <variant>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "support/Log.h"

namespace rcjit::logging {

/// The trace format's version: every JSON line carries it as "v". Bump it when a field is
/// removed, renamed or changes meaning; readers reject lines of another version.
constexpr int kTraceSchema = 1;

// Each event is an aggregate with its fields as typed members, built at the emit site with
// designated initializers (`emit(RecompileEvent{.function = 3, .entry = 1, .guard = g})`).
// Its JSON object is {"event": kName, one key per field}; `fields` lists the keys (the
// schema: toJson writes each, fromJson requires each but the std::optional ones).
// message() is the human-readable line, derived from the fields only.
#define RCJIT_TRACE_EVENT(Type, kindValue, nameText)                                               \
  static constexpr Kind kKind = Kind::kindValue;                                                   \
  static constexpr const char *kName = nameText;                                                   \
  std::string message() const;                                                                     \
  nlohmann::json toJson() const;                                                                   \
  static Type fromJson(const nlohmann::json &j);                                                   \
  bool operator==(const Type &) const = default

/// One dim of a compiled function's argument: {"arg": 0, "dim": 1} prints "arg 0 dim 1".
struct DimRef {
  int64_t arg = 0;
  int64_t dim = 0;
  template <class V, class S> static void fields(V &&v, S &s) {
    v("arg", s.arg);
    v("dim", s.dim);
  }
  bool operator==(const DimRef &) const = default;
};
/// "arg 0 dim 1 = arg 1 dim 0"; "every dim" for an empty list.
std::string dimsText(const std::vector<DimRef> &dims);
/// "function 3 (model.cpp:42)", "function 3 (attn, model.cpp:42)", or "function 3" for a
/// function without a name (a trace written before functions had names).
std::string functionLabel(int64_t function, const std::optional<std::string> &name);

/// One host read that split a trace: "item() on the result of sum (%1)".
struct GraphBreak {
  std::string op;                    // the host read: item, to_vector, ...
  std::string producer;              // the op of the node it read
  int64_t node = 0;                  // that node's id in the traced graph
  std::optional<std::string> module; // the module the value was computed in ("blocks.0 (Block)")
  std::optional<std::string> file;   // where the host read was called: file (last component)
  std::optional<int64_t> line;       // and line
  std::optional<std::string> readIn; // the module whose forward made the read ("blocks.1 (Block)")
  template <class V, class S> static void fields(V &&v, S &s) {
    v("op", s.op);
    v("producer", s.producer);
    v("node", s.node);
    v("module", s.module);
    v("file", s.file);
    v("line", s.line);
    v("read_in", s.readIn);
  }
  bool operator==(const GraphBreak &) const = default;
  std::string text() const;
};

/// One guarded input of an entry: a row of the guards table.
struct GuardRow {
  std::string input;   // "arg 0", "captured 3 (blocks.0.fc.weight)"
  std::string dtype;   // "f32"
  std::string device;  // "cpu", "cuda:0"
  std::string sizes;   // "[4, s0 in [2, 128]]"
  std::string strides; // "[64, 1]", "[*, 1]" (unchecked), "row-major" (symbolic sizes)
  bool requiresGrad = false;
  template <class V, class S> static void fields(V &&v, S &s) {
    v("input", s.input);
    v("dtype", s.dtype);
    v("device", s.device);
    v("sizes", s.sizes);
    v("strides", s.strides);
    v("requires_grad", s.requiresGrad);
  }
  bool operator==(const GuardRow &) const = default;
};

/// A new entry of compiled function `function` (ids count from 0 in each process).
struct CompileEvent {
  RCJIT_TRACE_EVENT(CompileEvent, compile, "compile");
  int64_t function = 0;
  std::optional<std::string> name; // CompileOptions::name or the compile() call's file:line
  int64_t entry = 0;
  double seconds = 0;
  std::string reason; // "first call", or the guard that failed on every older entry
  int64_t nodes = 0;
  int64_t kernels = 0;         // full mode
  int64_t regionsCompiled = 0; // regional mode
  int64_t regionsReused = 0;
  template <class V, class S> static void fields(V &&v, S &s) {
    v("function", s.function);
    v("name", s.name);
    v("entry", s.entry);
    v("seconds", s.seconds);
    v("reason", s.reason);
    v("nodes", s.nodes);
    v("kernels", s.kernels);
    v("regions_compiled", s.regionsCompiled);
    v("regions_reused", s.regionsReused);
  }
};

/// A call missed every entry and compiles entry `entry`; `guard` failed on the newest one.
struct RecompileEvent {
  RCJIT_TRACE_EVENT(RecompileEvent, recompiles, "recompile");
  int64_t function = 0;
  std::optional<std::string> name; // CompileOptions::name or the compile() call's file:line
  int64_t entry = 0;
  std::string guard;
  template <class V, class S> static void fields(V &&v, S &s) {
    v("function", s.function);
    v("name", s.name);
    v("entry", s.entry);
    v("guard", s.guard);
  }
};

/// The first miss past recompile_limit: from now on misses run eagerly.
struct RecompileLimitEvent {
  RCJIT_TRACE_EVENT(RecompileLimitEvent, recompiles, "recompile_limit");
  int64_t function = 0;
  std::optional<std::string> name; // CompileOptions::name or the compile() call's file:line
  int64_t limit = 0;
  std::string guard; // the last failing guard
  template <class V, class S> static void fields(V &&v, S &s) {
    v("function", s.function);
    v("name", s.name);
    v("limit", s.limit);
    v("guard", s.guard);
  }
};

/// Every failing guard of every entry at a recompile (one "  entry N: ..." line per entry).
struct FailingGuardsEvent {
  RCJIT_TRACE_EVENT(FailingGuardsEvent, recompiles_verbose, "failing_guards");
  int64_t function = 0;
  std::optional<std::string> name; // CompileOptions::name or the compile() call's file:line
  std::string failures;
  template <class V, class S> static void fields(V &&v, S &s) {
    v("function", s.function);
    v("name", s.name);
    v("failures", s.failures);
  }
};

/// The guards of a new entry, as GuardSet::print writes them (one line per input).
struct GuardsEvent {
  RCJIT_TRACE_EVENT(GuardsEvent, guards, "guards");
  int64_t function = 0;
  std::optional<std::string> name; // CompileOptions::name or the compile() call's file:line
  int64_t entry = 0;
  std::string guards;
  std::optional<std::vector<GuardRow>> table;    // the same guards, one row per input
  std::optional<std::vector<std::string>> notes; // guards on no input: autocast, symbol sources
  template <class V, class S> static void fields(V &&v, S &s) {
    v("function", s.function);
    v("name", s.name);
    v("entry", s.entry);
    v("guards", s.guards);
    v("table", s.table);
    v("notes", s.notes);
  }
};

/// The graph of a new entry after the passes, with its program or regional plan; `traced`
/// is the graph as traced (before the passes), `fusion` the fusion plan alone (full mode).
struct GraphDumpEvent {
  RCJIT_TRACE_EVENT(GraphDumpEvent, graph, "graph");
  int64_t function = 0;
  std::optional<std::string> name; // CompileOptions::name or the compile() call's file:line
  int64_t entry = 0;
  std::string graph;
  std::optional<std::string> traced;
  std::optional<std::string> fusion;
  template <class V, class S> static void fields(V &&v, S &s) {
    v("function", s.function);
    v("name", s.name);
    v("entry", s.entry);
    v("graph", s.graph);
    v("traced", s.traced);
    v("fusion", s.fusion);
  }
};

/// The LLVM IR of a new entry's kernels.
struct OutputCodeEvent {
  RCJIT_TRACE_EVENT(OutputCodeEvent, output_code, "output_code");
  int64_t function = 0;
  std::optional<std::string> name; // CompileOptions::name or the compile() call's file:line
  int64_t entry = 0;
  std::string llvmIr;
  template <class V, class S> static void fields(V &&v, S &s) {
    v("function", s.function);
    v("name", s.name);
    v("entry", s.entry);
    v("llvm_ir", s.llvmIr);
  }
};

/// A trace of `function` read tensor values on the host: it runs as compiled segments.
struct GraphBreakEvent {
  RCJIT_TRACE_EVENT(GraphBreakEvent, graph_breaks, "graph_break");
  int64_t function = 0;
  std::optional<std::string> name; // CompileOptions::name or the compile() call's file:line
  std::vector<GraphBreak> breaks;
  template <class V, class S> static void fields(V &&v, S &s) {
    v("function", s.function);
    v("name", s.name);
    v("breaks", s.breaks);
  }
};

/// Argument dims of a new entry that became symbol s`symbol` with range [min, max] (max
/// INT64_MAX: unbounded); `why`: mark_dynamic, Dynamic::always, automatic: ...
struct DynamicSymbolEvent {
  RCJIT_TRACE_EVENT(DynamicSymbolEvent, dynamic, "dynamic_symbol");
  int64_t function = 0;
  std::optional<std::string> name; // CompileOptions::name or the compile() call's file:line
  int64_t entry = 0;
  int64_t symbol = 0;
  std::vector<DimRef> dims; // every dim that shares the symbol
  int64_t min = 0;
  int64_t max = 0;
  std::string why;
  template <class V, class S> static void fields(V &&v, S &s) {
    v("function", s.function);
    v("name", s.name);
    v("entry", s.entry);
    v("symbol", s.symbol);
    v("dims", s.dims);
    v("min", s.min);
    v("max", s.max);
    v("why", s.why);
  }
};

/// Candidate dims of a new entry that stay static, and why (empty `dims`: every dim).
/// Built without function and entry where the reason is found (jit/Dynamic.cpp).
struct StaticDimEvent {
  RCJIT_TRACE_EVENT(StaticDimEvent, dynamic, "static_dim");
  int64_t function = 0;
  std::optional<std::string> name; // CompileOptions::name or the compile() call's file:line
  int64_t entry = 0;
  std::vector<DimRef> dims;
  std::string why;
  template <class V, class S> static void fields(V &&v, S &s) {
    v("function", s.function);
    v("name", s.name);
    v("entry", s.entry);
    v("dims", s.dims);
    v("why", s.why);
  }
};

/// Advice on a slow path; `function` when it concerns one compiled function.
struct PerfHintEvent {
  RCJIT_TRACE_EVENT(PerfHintEvent, perf_hints, "perf_hint");
  std::optional<int64_t> function;
  std::optional<std::string> name; // CompileOptions::name or the compile() call's file:line
  std::string hint;
  template <class V, class S> static void fields(V &&v, S &s) {
    v("function", s.function);
    v("name", s.name);
    v("hint", s.hint);
  }
};

/// One step of the compile path (jit/CompileGraph.h) for the graph `graph` names
/// ("function 3 entry 0"): its time and what it produced (a graph, fusion plan or program).
/// `function`, `name` and `entry` say which entry's compile it is part of (absent outside
/// one: a CLI dump, a segment compiled at a call); `phase` groups steps for the report:
/// trace, passes, lower, llvm, load, autotune.
struct CompileStepEvent {
  RCJIT_TRACE_EVENT(CompileStepEvent, passes, "compile_step");
  std::string graph;
  std::string step;
  double seconds = 0;
  std::string result;
  std::optional<int64_t> function;
  std::optional<std::string> name;
  std::optional<int64_t> entry;
  std::optional<std::string> phase;
  template <class V, class S> static void fields(V &&v, S &s) {
    v("graph", s.graph);
    v("step", s.step);
    v("seconds", s.seconds);
    v("result", s.result);
    v("function", s.function);
    v("name", s.name);
    v("entry", s.entry);
    v("phase", s.phase);
  }
};

/// A compile of entry `entry` of `function` that threw: `error` is the exception's message
/// (the caller gets the exception), `seconds` the time until it threw.
struct CompileFailedEvent {
  RCJIT_TRACE_EVENT(CompileFailedEvent, compile, "compile_failed");
  int64_t function = 0;
  std::optional<std::string> name;
  int64_t entry = 0;
  double seconds = 0;
  std::string reason; // why it compiled: "first call" or the failing guard
  std::string error;
  template <class V, class S> static void fields(V &&v, S &s) {
    v("function", s.function);
    v("name", s.name);
    v("entry", s.entry);
    v("seconds", s.seconds);
    v("reason", s.reason);
    v("error", s.error);
  }
};

/// A call of entry `entry` that hit (trace file only): the first kTracedCalls calls of each
/// entry and then every call whose number is a power of two, so that a long run leaves a
/// few lines. `call` counts the entry's calls from 1; `seconds` is this call's time.
struct CallEvent {
  RCJIT_TRACE_EVENT(CallEvent, compile, "call");
  int64_t function = 0;
  std::optional<std::string> name;
  int64_t entry = 0;
  int64_t call = 0;
  double seconds = 0;
  template <class V, class S> static void fields(V &&v, S &s) {
    v("function", s.function);
    v("name", s.name);
    v("entry", s.entry);
    v("call", s.call);
    v("seconds", s.seconds);
  }
};
/// CallEvent: every call up to this number is traced, later ones at powers of two.
constexpr int64_t kTracedCalls = 3;
/// Whether call number `call` (from 1) of an entry is traced.
constexpr bool tracedCall(int64_t call) { return call <= kTracedCalls || (call & (call - 1)) == 0; }

/// Which entry's compile the calling thread is running, while a CompileScope lives: the
/// compile-path steps it emits carry it (support/Events.cpp reads it in emit).
struct CompileContext {
  int64_t function = 0;
  std::optional<std::string> name;
  int64_t entry = 0;
};
class CompileScope {
public:
  explicit CompileScope(CompileContext c);
  ~CompileScope();
  CompileScope(const CompileScope &) = delete;
  CompileScope &operator=(const CompileScope &) = delete;
  /// The innermost live scope of this thread, or null.
  static const CompileContext *current();

private:
  CompileContext context_;
  const CompileContext *outer_;
};

/// Cache events. `key` is the full content key ("rcjit-" + 32 hex digits; messages show its
/// first 12 digits), `name` what the object was compiled for (a module id such as
/// "rcjit_f0_e1", "" when unknown), `where` "memory" or "disk".
struct CacheHitEvent {
  RCJIT_TRACE_EVENT(CacheHitEvent, cache, "cache_hit");
  std::string where;
  std::string key;
  std::string name;
  std::optional<int64_t> function; // the entry whose compile asked (absent outside one)
  std::optional<int64_t> entry;
  template <class V, class S> static void fields(V &&v, S &s) {
    v("where", s.where);
    v("key", s.key);
    v("name", s.name);
    v("function", s.function);
    v("entry", s.entry);
  }
};

/// A lookup found nothing; `where` is the last layer asked (memory when the disk is off).
struct CacheMissEvent {
  RCJIT_TRACE_EVENT(CacheMissEvent, cache, "cache_miss");
  std::string where;
  std::string key;
  std::string name;
  std::optional<int64_t> function; // the entry whose compile asked (absent outside one)
  std::optional<int64_t> entry;
  template <class V, class S> static void fields(V &&v, S &s) {
    v("where", s.where);
    v("key", s.key);
    v("name", s.name);
    v("function", s.function);
    v("entry", s.entry);
  }
};

/// A freshly compiled object kept in memory, and on disk when `where` is "disk".
struct CacheStoreEvent {
  RCJIT_TRACE_EVENT(CacheStoreEvent, cache, "cache_store");
  std::string where;
  std::string key;
  std::string name;
  int64_t bytes = 0;
  std::optional<int64_t> function; // the entry whose compile asked (absent outside one)
  std::optional<int64_t> entry;
  template <class V, class S> static void fields(V &&v, S &s) {
    v("where", s.where);
    v("key", s.key);
    v("name", s.name);
    v("bytes", s.bytes);
    v("function", s.function);
    v("entry", s.entry);
  }
};

/// A cached object refused: a disk entry `path` that failed verification (corrupt, truncated,
/// foreign, forged), or, with an empty `path`, the object of `key` found unusable once loaded.
/// `key` is "" when only the path is known; `deleted`: removed from the cache.
struct CacheRejectEvent {
  RCJIT_TRACE_EVENT(CacheRejectEvent, cache, "cache_reject");
  std::string key;
  std::string path;
  std::string reason;
  bool deleted = false;
  template <class V, class S> static void fields(V &&v, S &s) {
    v("key", s.key);
    v("path", s.path);
    v("reason", s.reason);
    v("deleted", s.deleted);
  }
};

/// Least recently used disk entries removed to stay under the size bound.
struct CacheEvictEvent {
  RCJIT_TRACE_EVENT(CacheEvictEvent, cache, "cache_evict");
  int64_t count = 0;
  std::string dir;
  template <class V, class S> static void fields(V &&v, S &s) {
    v("count", s.count);
    v("dir", s.dir);
  }
};

/// An artifact blob loaded (cache::load_artifacts).
struct CacheLoadEvent {
  RCJIT_TRACE_EVENT(CacheLoadEvent, cache, "cache_load");
  int64_t objects = 0;
  template <class V, class S> static void fields(V &&v, S &s) { v("objects", s.objects); }
};

/// A disk write that failed (`error`: strerror); the process continues without the entry.
struct CacheWriteFailedEvent {
  RCJIT_TRACE_EVENT(CacheWriteFailedEvent, cache, "cache_write_failed");
  std::string dir;
  std::string error;
  template <class V, class S> static void fields(V &&v, S &s) {
    v("dir", s.dir);
    v("error", s.error);
  }
};

/// The disk layer is off for this process (no usable key file, ...).
struct CacheOffEvent {
  RCJIT_TRACE_EVENT(CacheOffEvent, cache, "cache_off");
  std::string why;
  template <class V, class S> static void fields(V &&v, S &s) { v("why", s.why); }
};

/// An environment setting that is not `expected`; `fallback` is used instead.
struct CacheBadSettingEvent {
  RCJIT_TRACE_EVENT(CacheBadSettingEvent, cache, "cache_bad_setting");
  std::string variable;
  std::string value;
  std::string expected;
  std::string fallback;
  template <class V, class S> static void fields(V &&v, S &s) {
    v("variable", s.variable);
    v("value", s.value);
    v("expected", s.expected);
    v("fallback", s.fallback);
  }
};

#undef RCJIT_TRACE_EVENT

/// The event table: every event type once (parsing, emit overloads and Event are made from it).
#define RCJIT_TRACE_EVENTS(X)                                                                      \
  X(CompileEvent)                                                                                  \
  X(RecompileEvent)                                                                                \
  X(RecompileLimitEvent)                                                                           \
  X(FailingGuardsEvent)                                                                            \
  X(GuardsEvent)                                                                                   \
  X(GraphDumpEvent)                                                                                \
  X(OutputCodeEvent)                                                                               \
  X(GraphBreakEvent)                                                                               \
  X(DynamicSymbolEvent)                                                                            \
  X(StaticDimEvent)                                                                                \
  X(PerfHintEvent)                                                                                 \
  X(CompileStepEvent)                                                                              \
  X(CompileFailedEvent)                                                                            \
  X(CallEvent)                                                                                     \
  X(CacheHitEvent)                                                                                 \
  X(CacheMissEvent)                                                                                \
  X(CacheStoreEvent)                                                                               \
  X(CacheRejectEvent)                                                                              \
  X(CacheEvictEvent)                                                                               \
  X(CacheLoadEvent)                                                                                \
  X(CacheWriteFailedEvent)                                                                         \
  X(CacheOffEvent)                                                                                 \
  X(CacheBadSettingEvent)

/// Records `e` (stderr when its kind is enabled, the trace file when open); does nothing,
/// not even build the message, when its kind is not wanted. Thread-safe.
#define RCJIT_DECLARE_EMIT(Type) void emit(const Type &e);
RCJIT_TRACE_EVENTS(RCJIT_DECLARE_EMIT)
#undef RCJIT_DECLARE_EMIT

#define RCJIT_EVENT_ALTERNATIVE(Type) , Type
/// Any event (the first alternative is a placeholder that parseEvent never returns).
using Event = std::variant<std::monostate RCJIT_TRACE_EVENTS(RCJIT_EVENT_ALTERNATIVE)>;
#undef RCJIT_EVENT_ALTERNATIVE

/// A trace line that is not an event of this schema; what() says why.
struct TraceError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// The event of one parsed trace line. Throws TraceError for a line without "v" or of another
/// schema version, without an "event" string or with an unknown event, and the JSON
/// library's exception for a missing field or a field of the wrong type.
Event parseEvent(const nlohmann::json &line);

/// The log kind and the message of any event.
Kind kindOf(const Event &e);
std::string messageOf(const Event &e);

} // namespace rcjit::logging
