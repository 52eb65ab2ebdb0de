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
//
// A struct's fields are written once, as the list RCJIT_FIELDS(F): F(type, member, "key") per
// field, in order. RCJIT_EVENT_FIELDS(RCJIT_FIELDS) makes from it both the members
// (value-initialized: 0, false, empty) and the static `fields(v, s)` visitor, which calls
// v("key", s.member) for each in that order (what toJson, fromJson and the equality of
// nested values read).
#define RCJIT_FIELD_MEMBER(Type, member, key) Type member{};
#define RCJIT_FIELD_VISIT(Type, member, key) v(key, s.member);
#define RCJIT_EVENT_FIELDS(LIST)                                                                   \
  LIST(RCJIT_FIELD_MEMBER)                                                                         \
  template <class V, class S> static void fields(V &&v, S &s) { LIST(RCJIT_FIELD_VISIT) }          \
  static_assert(true, "")
#define RCJIT_TRACE_EVENT(Type, kindValue, nameText)                                               \
  static constexpr Kind kKind = Kind::kindValue;                                                   \
  static constexpr const char *kName = nameText;                                                   \
  std::string message() const;                                                                     \
  nlohmann::json toJson() const;                                                                   \
  static Type fromJson(const nlohmann::json &j);                                                   \
  bool operator==(const Type &) const = default

/// One dim of a compiled function's argument: {"arg": 0, "dim": 1} prints "arg 0 dim 1".
struct DimRef {
#define RCJIT_FIELDS(F)                                                                            \
  F(int64_t, arg, "arg")                                                                           \
  F(int64_t, dim, "dim")
  RCJIT_EVENT_FIELDS(RCJIT_FIELDS);
#undef RCJIT_FIELDS
  bool operator==(const DimRef &) const = default;
};
/// "arg 0 dim 1 = arg 1 dim 0"; "every dim" for an empty list.
std::string dimsText(const std::vector<DimRef> &dims);
/// "function 3 (model.cpp:42)", "function 3 (attn, model.cpp:42)", or "function 3" for a
/// function without a name (a trace written before functions had names).
std::string functionLabel(int64_t function, const std::optional<std::string> &name);

/// One host read that split a trace: "item() on the result of sum (%1)".
struct GraphBreak {
#define RCJIT_FIELDS(F)                                                                            \
  F(std::string, op, "op")             /* the host read: item, to_vector, ... */                   \
  F(std::string, producer, "producer") /* the op of the node it read */                            \
  F(int64_t, node, "node")             /* that node's id in the traced graph */                    \
  /* the module the value was computed in ("blocks.0 (Block)") */                                  \
  F(std::optional<std::string>, module, "module")                                                  \
  /* where the host read was called: file (last component) */                                      \
  F(std::optional<std::string>, file, "file")                                                      \
  F(std::optional<int64_t>, line, "line") /* and line */                                           \
  /* the module whose forward made the read ("blocks.1 (Block)") */                                \
  F(std::optional<std::string>, readIn, "read_in")
  RCJIT_EVENT_FIELDS(RCJIT_FIELDS);
#undef RCJIT_FIELDS
  bool operator==(const GraphBreak &) const = default;
  std::string text() const;
};

/// One guarded input of an entry: a row of the guards table.
struct GuardRow {
#define RCJIT_FIELDS(F)                                                                            \
  F(std::string, input, "input")   /* "arg 0", "captured 3 (blocks.0.fc.weight)" */                \
  F(std::string, dtype, "dtype")   /* "f32" */                                                     \
  F(std::string, device, "device") /* "cpu", "cuda:0" */                                           \
  F(std::string, sizes, "sizes")   /* "[4, s0 in [2, 128]]" */                                     \
  /* "[64, 1]", "[*, 1]" (unchecked), "row-major" (symbolic sizes) */                              \
  F(std::string, strides, "strides")                                                               \
  F(bool, requiresGrad, "requires_grad")
  RCJIT_EVENT_FIELDS(RCJIT_FIELDS);
#undef RCJIT_FIELDS
  bool operator==(const GuardRow &) const = default;
};

/// A new entry of compiled function `function` (ids count from 0 in each process).
struct CompileEvent {
  RCJIT_TRACE_EVENT(CompileEvent, compile, "compile");
#define RCJIT_FIELDS(F)                                                                            \
  F(int64_t, function, "function")                                                                 \
  /* CompileOptions::name or the compile() call's file:line */                                     \
  F(std::optional<std::string>, name, "name")                                                      \
  F(int64_t, entry, "entry")                                                                       \
  F(double, seconds, "seconds")                                                                    \
  /* "first call", or the guard that failed on every older entry */                                \
  F(std::string, reason, "reason")                                                                 \
  F(int64_t, nodes, "nodes")                                                                       \
  F(int64_t, kernels, "kernels")                  /* full mode */                                  \
  F(int64_t, regionsCompiled, "regions_compiled") /* regional mode */                              \
  F(int64_t, regionsReused, "regions_reused")
  RCJIT_EVENT_FIELDS(RCJIT_FIELDS);
#undef RCJIT_FIELDS
};

/// A call missed every entry and compiles entry `entry`; `guard` failed on the newest one.
struct RecompileEvent {
  RCJIT_TRACE_EVENT(RecompileEvent, recompiles, "recompile");
#define RCJIT_FIELDS(F)                                                                            \
  F(int64_t, function, "function")                                                                 \
  /* CompileOptions::name or the compile() call's file:line */                                     \
  F(std::optional<std::string>, name, "name")                                                      \
  F(int64_t, entry, "entry")                                                                       \
  F(std::string, guard, "guard")
  RCJIT_EVENT_FIELDS(RCJIT_FIELDS);
#undef RCJIT_FIELDS
};

/// The first miss past recompile_limit: from now on misses run eagerly.
struct RecompileLimitEvent {
  RCJIT_TRACE_EVENT(RecompileLimitEvent, recompiles, "recompile_limit");
#define RCJIT_FIELDS(F)                                                                            \
  F(int64_t, function, "function")                                                                 \
  /* CompileOptions::name or the compile() call's file:line */                                     \
  F(std::optional<std::string>, name, "name")                                                      \
  F(int64_t, limit, "limit")                                                                       \
  F(std::string, guard, "guard") /* the last failing guard */
  RCJIT_EVENT_FIELDS(RCJIT_FIELDS);
#undef RCJIT_FIELDS
};

/// Every failing guard of every entry at a recompile (one "  entry N: ..." line per entry).
struct FailingGuardsEvent {
  RCJIT_TRACE_EVENT(FailingGuardsEvent, recompiles_verbose, "failing_guards");
#define RCJIT_FIELDS(F)                                                                            \
  F(int64_t, function, "function")                                                                 \
  /* CompileOptions::name or the compile() call's file:line */                                     \
  F(std::optional<std::string>, name, "name")                                                      \
  F(std::string, failures, "failures")
  RCJIT_EVENT_FIELDS(RCJIT_FIELDS);
#undef RCJIT_FIELDS
};

/// The guards of a new entry, as GuardSet::print writes them (one line per input).
struct GuardsEvent {
  RCJIT_TRACE_EVENT(GuardsEvent, guards, "guards");
#define RCJIT_FIELDS(F)                                                                            \
  F(int64_t, function, "function")                                                                 \
  /* CompileOptions::name or the compile() call's file:line */                                     \
  F(std::optional<std::string>, name, "name")                                                      \
  F(int64_t, entry, "entry")                                                                       \
  F(std::string, guards, "guards")                                                                 \
  /* the same guards, one row per input */                                                         \
  F(std::optional<std::vector<GuardRow>>, table, "table")                                          \
  /* guards on no input: autocast, symbol sources */                                               \
  F(std::optional<std::vector<std::string>>, notes, "notes")
  RCJIT_EVENT_FIELDS(RCJIT_FIELDS);
#undef RCJIT_FIELDS
};

/// The graph of a new entry after the passes, with its program or regional plan; `traced`
/// is the graph as traced (before the passes), `fusion` the fusion plan alone (full mode).
struct GraphDumpEvent {
  RCJIT_TRACE_EVENT(GraphDumpEvent, graph, "graph");
#define RCJIT_FIELDS(F)                                                                            \
  F(int64_t, function, "function")                                                                 \
  /* CompileOptions::name or the compile() call's file:line */                                     \
  F(std::optional<std::string>, name, "name")                                                      \
  F(int64_t, entry, "entry")                                                                       \
  F(std::string, graph, "graph")                                                                   \
  F(std::optional<std::string>, traced, "traced")                                                  \
  F(std::optional<std::string>, fusion, "fusion")
  RCJIT_EVENT_FIELDS(RCJIT_FIELDS);
#undef RCJIT_FIELDS
};

/// The LLVM IR of a new entry's kernels.
struct OutputCodeEvent {
  RCJIT_TRACE_EVENT(OutputCodeEvent, output_code, "output_code");
#define RCJIT_FIELDS(F)                                                                            \
  F(int64_t, function, "function")                                                                 \
  /* CompileOptions::name or the compile() call's file:line */                                     \
  F(std::optional<std::string>, name, "name")                                                      \
  F(int64_t, entry, "entry")                                                                       \
  F(std::string, llvmIr, "llvm_ir")
  RCJIT_EVENT_FIELDS(RCJIT_FIELDS);
#undef RCJIT_FIELDS
};

/// A trace of `function` read tensor values on the host: it runs as compiled segments.
struct GraphBreakEvent {
  RCJIT_TRACE_EVENT(GraphBreakEvent, graph_breaks, "graph_break");
#define RCJIT_FIELDS(F)                                                                            \
  F(int64_t, function, "function")                                                                 \
  /* CompileOptions::name or the compile() call's file:line */                                     \
  F(std::optional<std::string>, name, "name")                                                      \
  F(std::vector<GraphBreak>, breaks, "breaks")
  RCJIT_EVENT_FIELDS(RCJIT_FIELDS);
#undef RCJIT_FIELDS
};

/// Argument dims of a new entry that became symbol s`symbol` with range [min, max] (max
/// INT64_MAX: unbounded); `why`: mark_dynamic, Dynamic::always, automatic: ...
struct DynamicSymbolEvent {
  RCJIT_TRACE_EVENT(DynamicSymbolEvent, dynamic, "dynamic_symbol");
#define RCJIT_FIELDS(F)                                                                            \
  F(int64_t, function, "function")                                                                 \
  /* CompileOptions::name or the compile() call's file:line */                                     \
  F(std::optional<std::string>, name, "name")                                                      \
  F(int64_t, entry, "entry")                                                                       \
  F(int64_t, symbol, "symbol")                                                                     \
  F(std::vector<DimRef>, dims, "dims") /* every dim that shares the symbol */                      \
  F(int64_t, min, "min")                                                                           \
  F(int64_t, max, "max")                                                                           \
  F(std::string, why, "why")
  RCJIT_EVENT_FIELDS(RCJIT_FIELDS);
#undef RCJIT_FIELDS
};

/// Candidate dims of a new entry that stay static, and why (empty `dims`: every dim).
/// Built without function and entry where the reason is found (jit/Dynamic.cpp).
struct StaticDimEvent {
  RCJIT_TRACE_EVENT(StaticDimEvent, dynamic, "static_dim");
#define RCJIT_FIELDS(F)                                                                            \
  F(int64_t, function, "function")                                                                 \
  /* CompileOptions::name or the compile() call's file:line */                                     \
  F(std::optional<std::string>, name, "name")                                                      \
  F(int64_t, entry, "entry")                                                                       \
  F(std::vector<DimRef>, dims, "dims")                                                             \
  F(std::string, why, "why")
  RCJIT_EVENT_FIELDS(RCJIT_FIELDS);
#undef RCJIT_FIELDS
};

/// Advice on a slow path; `function` when it concerns one compiled function.
struct PerfHintEvent {
  RCJIT_TRACE_EVENT(PerfHintEvent, perf_hints, "perf_hint");
#define RCJIT_FIELDS(F)                                                                            \
  F(std::optional<int64_t>, function, "function")                                                  \
  /* CompileOptions::name or the compile() call's file:line */                                     \
  F(std::optional<std::string>, name, "name")                                                      \
  F(std::string, hint, "hint")
  RCJIT_EVENT_FIELDS(RCJIT_FIELDS);
#undef RCJIT_FIELDS
};

/// One step of the compile path (jit/CompileGraph.h) for the graph `graph` names
/// ("function 3 entry 0"): its time and what it produced (a graph, fusion plan or program).
/// `function`, `name` and `entry` say which entry's compile it is part of (absent outside
/// one: a CLI dump, a segment compiled at a call); `phase` groups steps for the report:
/// trace, passes, lower, llvm, load, autotune.
struct CompileStepEvent {
  RCJIT_TRACE_EVENT(CompileStepEvent, passes, "compile_step");
#define RCJIT_FIELDS(F)                                                                            \
  F(std::string, graph, "graph")                                                                   \
  F(std::string, step, "step")                                                                     \
  F(double, seconds, "seconds")                                                                    \
  F(std::string, result, "result")                                                                 \
  F(std::optional<int64_t>, function, "function")                                                  \
  F(std::optional<std::string>, name, "name")                                                      \
  F(std::optional<int64_t>, entry, "entry")                                                        \
  F(std::optional<std::string>, phase, "phase")
  RCJIT_EVENT_FIELDS(RCJIT_FIELDS);
#undef RCJIT_FIELDS
};

/// A compile of entry `entry` of `function` that threw: `error` is the exception's message
/// (the caller gets the exception), `seconds` the time until it threw.
struct CompileFailedEvent {
  RCJIT_TRACE_EVENT(CompileFailedEvent, compile, "compile_failed");
#define RCJIT_FIELDS(F)                                                                            \
  F(int64_t, function, "function")                                                                 \
  F(std::optional<std::string>, name, "name")                                                      \
  F(int64_t, entry, "entry")                                                                       \
  F(double, seconds, "seconds")                                                                    \
  F(std::string, reason, "reason") /* why it compiled: "first call" or the failing guard */        \
  F(std::string, error, "error")
  RCJIT_EVENT_FIELDS(RCJIT_FIELDS);
#undef RCJIT_FIELDS
};

/// A call of entry `entry` that hit (trace file only): the first kTracedCalls calls of each
/// entry and then every call whose number is a power of two, so that a long run leaves a
/// few lines. `call` counts the entry's calls from 1; `seconds` is this call's time.
struct CallEvent {
  RCJIT_TRACE_EVENT(CallEvent, compile, "call");
#define RCJIT_FIELDS(F)                                                                            \
  F(int64_t, function, "function")                                                                 \
  F(std::optional<std::string>, name, "name")                                                      \
  F(int64_t, entry, "entry")                                                                       \
  F(int64_t, call, "call")                                                                         \
  F(double, seconds, "seconds")                                                                    \
  /* tiered compilation: "fast" or "optimized", the tier the call ran (jit/Tiered.h) */            \
  F(std::optional<std::string>, tier, "tier")
  RCJIT_EVENT_FIELDS(RCJIT_FIELDS);
#undef RCJIT_FIELDS
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
/// "rcjit_f0_e1", "" when unknown), `where` "memory", "disk" or "remote" (the Redis server of
/// RCJIT_REMOTE_CACHE); a store's `where` is "memory", "disk", "remote" or "disk+remote".
struct CacheHitEvent {
  RCJIT_TRACE_EVENT(CacheHitEvent, cache, "cache_hit");
#define RCJIT_FIELDS(F)                                                                            \
  F(std::string, where, "where")                                                                   \
  F(std::string, key, "key")                                                                       \
  F(std::string, name, "name")                                                                     \
  /* the entry whose compile asked (absent outside one) */                                         \
  F(std::optional<int64_t>, function, "function")                                                  \
  F(std::optional<int64_t>, entry, "entry")
  RCJIT_EVENT_FIELDS(RCJIT_FIELDS);
#undef RCJIT_FIELDS
};

/// A lookup found nothing; `where` is the last layer asked (memory when the disk is off).
struct CacheMissEvent {
  RCJIT_TRACE_EVENT(CacheMissEvent, cache, "cache_miss");
#define RCJIT_FIELDS(F)                                                                            \
  F(std::string, where, "where")                                                                   \
  F(std::string, key, "key")                                                                       \
  F(std::string, name, "name")                                                                     \
  /* the entry whose compile asked (absent outside one) */                                         \
  F(std::optional<int64_t>, function, "function")                                                  \
  F(std::optional<int64_t>, entry, "entry")
  RCJIT_EVENT_FIELDS(RCJIT_FIELDS);
#undef RCJIT_FIELDS
};

/// A freshly compiled object kept in memory, and on disk when `where` is "disk".
struct CacheStoreEvent {
  RCJIT_TRACE_EVENT(CacheStoreEvent, cache, "cache_store");
#define RCJIT_FIELDS(F)                                                                            \
  F(std::string, where, "where")                                                                   \
  F(std::string, key, "key")                                                                       \
  F(std::string, name, "name")                                                                     \
  F(int64_t, bytes, "bytes")                                                                       \
  /* the entry whose compile asked (absent outside one) */                                         \
  F(std::optional<int64_t>, function, "function")                                                  \
  F(std::optional<int64_t>, entry, "entry")
  RCJIT_EVENT_FIELDS(RCJIT_FIELDS);
#undef RCJIT_FIELDS
};

/// A cached object refused: a disk entry `path` that failed verification (corrupt, truncated,
/// foreign, forged), or, with an empty `path`, the object of `key` found unusable once loaded.
/// `key` is "" when only the path is known; `deleted`: removed from the cache.
struct CacheRejectEvent {
  RCJIT_TRACE_EVENT(CacheRejectEvent, cache, "cache_reject");
#define RCJIT_FIELDS(F)                                                                            \
  F(std::string, key, "key")                                                                       \
  F(std::string, path, "path")                                                                     \
  F(std::string, reason, "reason")                                                                 \
  F(bool, deleted, "deleted")
  RCJIT_EVENT_FIELDS(RCJIT_FIELDS);
#undef RCJIT_FIELDS
};

/// Least recently used disk entries removed to stay under the size bound.
struct CacheEvictEvent {
  RCJIT_TRACE_EVENT(CacheEvictEvent, cache, "cache_evict");
#define RCJIT_FIELDS(F)                                                                            \
  F(int64_t, count, "count")                                                                       \
  F(std::string, dir, "dir")
  RCJIT_EVENT_FIELDS(RCJIT_FIELDS);
#undef RCJIT_FIELDS
};

/// An artifact blob loaded (cache::load_artifacts).
struct CacheLoadEvent {
  RCJIT_TRACE_EVENT(CacheLoadEvent, cache, "cache_load");
#define RCJIT_FIELDS(F) F(int64_t, objects, "objects")
  RCJIT_EVENT_FIELDS(RCJIT_FIELDS);
#undef RCJIT_FIELDS
};

/// A disk write that failed (`error`: strerror); the process continues without the entry.
struct CacheWriteFailedEvent {
  RCJIT_TRACE_EVENT(CacheWriteFailedEvent, cache, "cache_write_failed");
#define RCJIT_FIELDS(F)                                                                            \
  F(std::string, dir, "dir")                                                                       \
  F(std::string, error, "error")
  RCJIT_EVENT_FIELDS(RCJIT_FIELDS);
#undef RCJIT_FIELDS
};

/// The disk layer is off for this process (no usable key file, ...).
struct CacheOffEvent {
  RCJIT_TRACE_EVENT(CacheOffEvent, cache, "cache_off");
#define RCJIT_FIELDS(F) F(std::string, why, "why")
  RCJIT_EVENT_FIELDS(RCJIT_FIELDS);
#undef RCJIT_FIELDS
};

/// An environment setting that is not `expected`; `fallback` is used instead.
struct CacheBadSettingEvent {
  RCJIT_TRACE_EVENT(CacheBadSettingEvent, cache, "cache_bad_setting");
#define RCJIT_FIELDS(F)                                                                            \
  F(std::string, variable, "variable")                                                             \
  F(std::string, value, "value")                                                                   \
  F(std::string, expected, "expected")                                                             \
  F(std::string, fallback, "fallback")
  RCJIT_EVENT_FIELDS(RCJIT_FIELDS);
#undef RCJIT_FIELDS
};

/// The remote cache (RCJIT_REMOTE_CACHE) changed state, logged once per change: `state`
/// "unreachable" (connect, I/O or timeout: lookups skip it for `retry_seconds`, compiles are
/// local), "reachable" (again, after being unreachable) or "refuses_writes" (an error reply
/// to a write, e.g. a full server: entries are not published until a write succeeds), or
/// "off" (no usable key file to sign entries with: the remote layer is not used).
struct CacheRemoteEvent {
  RCJIT_TRACE_EVENT(CacheRemoteEvent, cache, "cache_remote");
#define RCJIT_FIELDS(F)                                                                            \
  F(std::string, url, "url")                                                                       \
  F(std::string, state, "state")                                                                   \
  F(std::string, error, "error")                                                                   \
  F(int64_t, retrySeconds, "retry_seconds")
  RCJIT_EVENT_FIELDS(RCJIT_FIELDS);
#undef RCJIT_FIELDS
};

#undef RCJIT_TRACE_EVENT
#undef RCJIT_EVENT_FIELDS
#undef RCJIT_FIELD_VISIT
#undef RCJIT_FIELD_MEMBER

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
  X(CacheBadSettingEvent)                                                                          \
  X(CacheRemoteEvent)

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
