// The trace events' JSON form (from their field lists), their messages, and line parsing.
#include "support/Events.h"

#include <cinttypes>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <type_traits>

namespace rcjit::logging {

namespace {

using nlohmann::json;

template <class T> struct IsOptional : std::false_type {};
template <class T> struct IsOptional<std::optional<T>> : std::true_type {};

template <class T> constexpr bool kHasFields = requires(T &t) {
  T::fields([](const char *, auto &) {}, t);
};

template <class T> json valueToJson(const T &v);
template <class T> void valueFromJson(const json &j, T &out);

template <class T> json objectToJson(const T &v) {
  json j = json::object();
  T::fields(
      [&j](const char *key, const auto &member) {
        using M = std::remove_cvref_t<decltype(member)>;
        if constexpr (IsOptional<M>::value) {
          if (member) j[key] = valueToJson(*member);
        } else {
          j[key] = valueToJson(member);
        }
      },
      v);
  return j;
}

template <class T> void objectFromJson(const json &j, T &out) {
  if (!j.is_object()) throw TraceError("expected an object, got " + j.dump());
  T::fields(
      [&j](const char *key, auto &member) {
        using M = std::remove_cvref_t<decltype(member)>;
        if constexpr (IsOptional<M>::value) {
          if (j.contains(key) && !j.at(key).is_null()) {
            typename M::value_type v{};
            valueFromJson(j.at(key), v);
            member = std::move(v);
          }
        } else {
          valueFromJson(j.at(key), member); // throws "key 'KEY' not found"
        }
      },
      out);
}

template <class T> json valueToJson(const T &v) {
  if constexpr (kHasFields<T>) {
    return objectToJson(v);
  } else if constexpr (requires { v.begin(); } && !std::is_same_v<T, std::string>) {
    json a = json::array();
    for (const auto &x : v) a.push_back(valueToJson(x));
    return a;
  } else {
    return json(v);
  }
}

template <class T> void valueFromJson(const json &j, T &out) {
  if constexpr (kHasFields<T>) {
    objectFromJson(j, out);
  } else if constexpr (requires { out.begin(); } && !std::is_same_v<T, std::string>) {
    if (!j.is_array()) throw TraceError("expected an array, got " + j.dump());
    out.clear();
    for (const json &x : j) valueFromJson(x, out.emplace_back());
  } else {
    j.get_to(out);
  }
}

std::string fn(int64_t function, const std::optional<std::string> &name) {
  return functionLabel(function, name);
}

std::string fnEntry(int64_t function, const std::optional<std::string> &name, int64_t entry) {
  return fn(function, name) + " entry " + std::to_string(entry);
}

// "rcjit-5fe1866fcc87": enough of a content key to tell entries apart in a log line.
std::string keyPrefix(const std::string &key) { return key.substr(0, 18); }

std::string named(const std::string &key, const std::string &name) {
  return keyPrefix(key) + (name.empty() ? "" : " (" + name + ")");
}

std::string range(int64_t min, int64_t max) {
  return "[" + std::to_string(min) + ", " + (max == INT64_MAX ? "inf" : std::to_string(max)) + "]";
}

} // namespace

std::string functionLabel(int64_t function, const std::optional<std::string> &name) {
  return "function " + std::to_string(function) +
         (name && !name->empty() ? " (" + *name + ")" : std::string());
}

std::string dimsText(const std::vector<DimRef> &dims) {
  if (dims.empty()) return "every dim";
  std::string s;
  for (const DimRef &d : dims) {
    s += (s.empty() ? "arg " : " = arg ") + std::to_string(d.arg) + " dim " + std::to_string(d.dim);
  }
  return s;
}

std::string GraphBreak::text() const {
  std::string s = op + "() on the result of " + producer + " (%" + std::to_string(node) + ")" +
                  (module && !module->empty() ? " in module " + *module : std::string());
  if (file && !file->empty())
    s += ", read at " + *file + (line ? ":" + std::to_string(*line) : std::string());
  if (readIn && !readIn->empty() && readIn != module) s += " in module " + *readIn;
  return s;
}

namespace {
thread_local const CompileContext *tlCompileContext = nullptr;

// A compile step or cache event emitted inside a CompileScope carries its entry.
template <class E> const E &withCompileContext(const E &e) { return e; }
template <class E>
requires std::is_same_v<E, CompileStepEvent> || std::is_same_v<E, CacheHitEvent> ||
    std::is_same_v<E, CacheMissEvent> || std::is_same_v<E, CacheStoreEvent>
        E withCompileContext(const E &e) {
  E out = e;
  if (const CompileContext *c = tlCompileContext; c && !out.function) {
    out.function = c->function;
    out.entry = c->entry;
    if constexpr (std::is_same_v<E, CompileStepEvent>) out.name = c->name;
  }
  return out;
}
} // namespace

CompileScope::CompileScope(CompileContext c) : context_(std::move(c)), outer_(tlCompileContext) {
  tlCompileContext = &context_;
}
CompileScope::~CompileScope() { tlCompileContext = outer_; }
const CompileContext *CompileScope::current() { return tlCompileContext; }

// ---- messages -----------------------------------------------------------------------------

std::string CompileEvent::message() const {
  char ms[32];
  std::snprintf(ms, sizeof ms, "%.3f", seconds * 1e3);
  return fn(function, name) + " compiled entry " + std::to_string(entry) + " in " + ms + " ms (" +
         reason + ")";
}

std::string RecompileEvent::message() const {
  return fn(function, name) + ": recompiling because " + guard;
}

std::string RecompileLimitEvent::message() const {
  return fn(function, name) + ": recompile_limit (" + std::to_string(limit) +
         ") reached; running eagerly from now on. Last failing guard: " + guard;
}

std::string FailingGuardsEvent::message() const {
  return fn(function, name) + ": every failing guard:\n" + failures;
}

std::string GuardsEvent::message() const {
  return fnEntry(function, name, entry) + " guards:\n" + guards;
}

std::string GraphDumpEvent::message() const {
  return fnEntry(function, name, entry) + " graph:\n" + graph;
}

std::string OutputCodeEvent::message() const {
  return fnEntry(function, name, entry) + " LLVM IR:\n" + llvmIr;
}

std::string GraphBreakEvent::message() const {
  std::string where;
  for (const GraphBreak &b : breaks) where += (where.empty() ? "" : "; ") + b.text();
  return fn(function, name) + ": graph break: " + where +
         ". The function's C++ runs on every call and the work between host reads runs as "
         "compiled segments; to get one graph, keep the value a tensor (where() instead of "
         "branching on it) or read it outside the compiled function (fullgraph = true makes "
         "a break an Error)";
}

std::string DynamicSymbolEvent::message() const {
  return fnEntry(function, name, entry) + ": " + dimsText(dims) + " -> symbol s" +
         std::to_string(symbol) + " in " + range(min, max) + " (" + why + ")";
}

std::string StaticDimEvent::message() const {
  return fnEntry(function, name, entry) + ": " + dimsText(dims) + " stays static: " + why;
}

std::string PerfHintEvent::message() const {
  return (function ? fn(*function, name) + " " : std::string()) + hint;
}

std::string CompileStepEvent::message() const {
  char ms[32];
  std::snprintf(ms, sizeof ms, "%.3f", seconds * 1e3);
  return graph + ": " + step + " (" + ms + " ms)\n" + result;
}

std::string CompileFailedEvent::message() const {
  char ms[32];
  std::snprintf(ms, sizeof ms, "%.3f", seconds * 1e3);
  return fnEntry(function, name, entry) + " failed to compile after " + ms + " ms (" + reason +
         "): " + error;
}

std::string CallEvent::message() const {
  char ms[32];
  std::snprintf(ms, sizeof ms, "%.3f", seconds * 1e3);
  return fnEntry(function, name, entry) + " call " + std::to_string(call) + ": " + ms + " ms" +
         (tier ? " (" + *tier + " tier)" : "");
}

std::string CacheHitEvent::message() const { return where + " hit " + named(key, name); }

std::string CacheMissEvent::message() const {
  const char *in = where == "remote" ? "miss in memory, on disk and remote "
                   : where == "disk" ? "miss in memory and on disk "
                                     : "miss in memory ";
  return in + named(key, name) + ": compiling";
}

std::string CacheStoreEvent::message() const {
  return "stored " + named(key, name) + ", " + std::to_string(bytes) + " bytes, " +
         (where == "disk+remote" ? "in memory, on disk and remote"
          : where == "remote"    ? "in memory and remote"
          : where == "disk"      ? "in memory and on disk"
                                 : "in memory");
}

std::string CacheRejectEvent::message() const {
  if (path.empty()) {
    return "rejected cached object " + keyPrefix(key) + ": " + reason +
           (deleted ? " (evicted; recompiling)" : " (recompiling)");
  }
  const bool remote = path.rfind("redis://", 0) == 0;
  return std::string(remote ? "rejected remote entry " : "rejected disk entry ") + path + ": " +
         reason + (deleted ? " (deleted)" : "") + "; ignored, the kernels are recompiled";
}

std::string CacheEvictEvent::message() const {
  return "evicted " + std::to_string(count) + " least recently used entries from " + dir;
}

std::string CacheLoadEvent::message() const {
  return "loaded " + std::to_string(objects) + " objects from artifacts";
}

std::string CacheWriteFailedEvent::message() const {
  return "cannot write cache entry in " + dir + ": " + error + "; continuing without it";
}

std::string CacheOffEvent::message() const { return "disk cache off: " + why; }

std::string CacheRemoteEvent::message() const {
  if (state == "reachable") return "remote cache " + url + " reachable again";
  if (state == "off") return "remote cache " + url + " off: " + error;
  if (state == "refuses_writes") {
    return "remote cache " + url + " refuses writes (" + error +
           "); entries are not published until it takes one again";
  }
  return "remote cache " + url + " unreachable (" + error + "); compiling locally, next try in " +
         std::to_string(retrySeconds) + " s";
}

std::string CacheBadSettingEvent::message() const {
  return variable + "='" + value + "' is not " + expected + "; using " + fallback;
}

// ---- JSON, emit, parsing ------------------------------------------------------------------

#define RCJIT_DEFINE_EVENT(Type)                                                                   \
  json Type::toJson() const {                                                                      \
    json j = objectToJson(*this);                                                                  \
    j["event"] = kName;                                                                            \
    return j;                                                                                      \
  }                                                                                                \
  Type Type::fromJson(const json &j) {                                                             \
    Type e;                                                                                        \
    objectFromJson(j, e);                                                                          \
    return e;                                                                                      \
  }                                                                                                \
  void emit(const Type &e) {                                                                       \
    if (!wanted(Type::kKind)) return;                                                              \
    const auto &x = withCompileContext(e);                                                         \
    write(Type::kKind, x.message(), x.toJson());                                                   \
  }
RCJIT_TRACE_EVENTS(RCJIT_DEFINE_EVENT)
#undef RCJIT_DEFINE_EVENT

Event parseEvent(const json &line) {
  if (!line.is_object()) throw TraceError("not a trace event (not a JSON object)");
  auto v = line.find("v");
  if (v == line.end()) {
    throw TraceError("no schema version \"v\": not a trace line of this rcjit (trace schema " +
                     std::to_string(kTraceSchema) + "); record the trace again");
  }
  if (!v->is_number_integer() || v->get<int64_t>() != kTraceSchema) {
    throw TraceError("unknown trace schema version " + v->dump() + " (this rcjit reads version " +
                     std::to_string(kTraceSchema) + ")");
  }
  auto name = line.find("event");
  if (name == line.end() || !name->is_string()) {
    throw TraceError("not a trace event (no \"event\" string)");
  }
  const std::string &event = name->get_ref<const std::string &>();
#define RCJIT_PARSE_EVENT(Type)                                                                    \
  if (event == Type::kName) return Type::fromJson(line);
  RCJIT_TRACE_EVENTS(RCJIT_PARSE_EVENT)
#undef RCJIT_PARSE_EVENT
  throw TraceError("unknown event '" + event + "' in trace schema " + std::to_string(kTraceSchema));
}

Kind kindOf(const Event &e) {
  return std::visit(
      [](const auto &x) {
        if constexpr (requires { x.kKind; }) {
          return x.kKind;
        } else {
          return Kind::compile; // the placeholder; never parsed
        }
      },
      e);
}

std::string messageOf(const Event &e) {
  return std::visit(
      [](const auto &x) {
        if constexpr (requires { x.message(); }) {
          return x.message();
        } else {
          return std::string();
        }
      },
      e);
}

} // namespace rcjit::logging
