// The trace-event schema: every event round-trips through JSON, every field is required, and
// lines of another schema version or of no known event are refused with a reason.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <set>

#include "support/Events.h"

using namespace rcjit::logging;
using nlohmann::json;

namespace {

// One event of each type with every field set to something other than its default.
std::vector<Event> samples() {
  return {
      CompileEvent{.function = 3,
                   .entry = 1,
                   .seconds = 0.25,
                   .reason = "arg 0 dim 1: expected 8, got 9",
                   .nodes = 22,
                   .kernels = 4,
                   .regionsCompiled = 2,
                   .regionsReused = 1},
      RecompileEvent{.function = 3, .entry = 1, .guard = "arg 0 dim 1: expected 8, got 9"},
      RecompileLimitEvent{.function = 2, .limit = 8, .guard = "arg 0 dim 0: expected 2, got 3"},
      FailingGuardsEvent{.function = 1, .failures = "  entry 0: arg 0 dim 1: expected 8, got 9\n"},
      GuardsEvent{.function = 1,
                  .entry = 0,
                  .guards = "arg 0: f32 cpu [4, 8]\narg 1: ...",
                  .table = std::vector<GuardRow>{{.input = "arg 0",
                                                  .dtype = "f32",
                                                  .device = "cpu",
                                                  .sizes = "[4, 8]",
                                                  .strides = "[8, 1]",
                                                  .requiresGrad = true}},
                  .notes = std::vector<std::string>{"autocast: bf16"}},
      GraphDumpEvent{.function = 1,
                     .entry = 2,
                     .graph = "graph() {\n  %0 = input\n}\n",
                     .traced = "graph() {}\n",
                     .fusion = "fusion: 1 group\n"},
      OutputCodeEvent{.function = 1, .entry = 2, .llvmIr = "define void @k0() {\n}\n"},
      GraphBreakEvent{.function = 4,
                      .breaks = {{.op = "item",
                                  .producer = "sum",
                                  .node = 1,
                                  .module = "blocks.0 (Block)",
                                  .file = "model.cpp",
                                  .line = 42,
                                  .readIn = "blocks.1 (Block)"},
                                 {.op = "to_vector", .producer = "mul", .node = 7}}},
      DynamicSymbolEvent{.function = 5,
                         .entry = 1,
                         .symbol = 1,
                         .dims = {{.arg = 0, .dim = 1}, {.arg = 1, .dim = 0}},
                         .min = 2,
                         .max = INT64_MAX,
                         .why = "Dynamic::always"},
      StaticDimEvent{.function = 5,
                     .entry = 1,
                     .dims = {{.arg = 0, .dim = 1}},
                     .why = "the function fails at s0=5: reshape: ..."},
      PerfHintEvent{.function = 2, .hint = "falls back to eager: raise recompile_limit"},
      CompileStepEvent{.graph = "function 3 entry 0",
                       .step = "fuse",
                       .seconds = 0.002,
                       .result = "fusion: 1 groups, 0 calls, 0 views\n",
                       .function = 3,
                       .name = "model.cpp:9",
                       .entry = 0,
                       .phase = "lower"},
      CompileFailedEvent{.function = 6,
                         .entry = 1,
                         .seconds = 0.01,
                         .reason = "arg 0 dim 0: expected 2, got 3",
                         .error = "graph break in a fullgraph compile"},
      CallEvent{.function = 6, .entry = 0, .call = 4, .seconds = 0.0005},
      CacheHitEvent{.where = "disk",
                    .key = "rcjit-0123456789abcdef",
                    .name = "rcjit_f0_e1",
                    .function = 0,
                    .entry = 1},
      CacheMissEvent{.where = "memory", .key = "rcjit-fedcba9876543210", .name = "rcjit_f1_e0"},
      CacheStoreEvent{.where = "disk", .key = "rcjit-00112233", .name = "rcjit_f0_e0", .bytes = 9},
      CacheRejectEvent{
          .key = "rcjit-1", .path = "/c/rcjit-1.rcobj", .reason = "truncated", .deleted = true},
      CacheEvictEvent{.count = 3, .dir = "/c"},
      CacheLoadEvent{.objects = 12},
      CacheWriteFailedEvent{.dir = "/c", .error = "No space left on device"},
      CacheOffEvent{.why = "cannot create the key file"},
      CacheBadSettingEvent{.variable = "RCJIT_CACHE_MAX_BYTES",
                           .value = "lots",
                           .expected = "a positive integer",
                           .fallback = "1 GiB"},
      CacheRemoteEvent{.url = "redis://10.0.0.2:6379/0",
                       .state = "unreachable",
                       .error = "connect: Connection refused",
                       .retrySeconds = 30},
  };
}

json toLine(const Event &e) {
  json j = std::visit(
      [](const auto &x) {
        if constexpr (requires { x.toJson(); }) {
          return x.toJson();
        } else {
          return json();
        }
      },
      e);
  j["v"] = kTraceSchema;
  return j;
}

TEST(Events, EveryEventTypeHasASample) {
  std::set<size_t> types;
  for (const Event &e : samples()) types.insert(e.index());
  EXPECT_EQ(types.size(), std::variant_size_v<Event> - 1); // all but the monostate placeholder
  EXPECT_EQ(types.count(0), 0u);
}

TEST(Events, EveryEventRoundTripsThroughJson) {
  for (const Event &e : samples()) {
    json line = toLine(e);
    Event back = parseEvent(json::parse(line.dump()));
    EXPECT_EQ(back, e) << line.dump();
    EXPECT_EQ(messageOf(back), messageOf(e));
    EXPECT_EQ(kindOf(back), kindOf(e));
  }
}

// The std::optional fields of each event type.
std::set<std::string> optionalKeys(const Event &e) {
  std::set<std::string> keys = {"name"};
  if (std::holds_alternative<PerfHintEvent>(e)) keys.insert("function");
  if (std::holds_alternative<GuardsEvent>(e)) keys.insert({"table", "notes"});
  if (std::holds_alternative<GraphDumpEvent>(e)) keys.insert({"traced", "fusion"});
  if (std::holds_alternative<CompileStepEvent>(e)) keys.insert({"function", "entry", "phase"});
  if (std::holds_alternative<CacheHitEvent>(e) || std::holds_alternative<CacheMissEvent>(e) ||
      std::holds_alternative<CacheStoreEvent>(e))
    keys = {"function", "entry"}; // their "name" (the module's) is required
  return keys;
}

// The JSON carries every field: drop any one and the event no longer parses (the message is
// never needed to recover a field).
TEST(Events, EveryFieldIsInTheJson) {
  for (const Event &e : samples()) {
    json line = toLine(e);
    for (const auto &[key, value] : line.items()) {
      if (key == "v" || key == "event") continue;
      json cut = line;
      cut.erase(key);
      if (optionalKeys(e).count(key)) { // parses without it, and the field is lost
        EXPECT_NE(parseEvent(cut), e) << key << " in " << line.dump();
        continue;
      }
      EXPECT_THROW(parseEvent(cut), json::exception) << key << " in " << line.dump();
    }
  }
}

TEST(Events, MessagesAreDerivedFromTheFields) {
  RecompileEvent recompile{.function = 3, .entry = 1, .guard = "arg 0 dim 1: expected 8, got 9"};
  EXPECT_EQ(recompile.message(), "function 3: recompiling because arg 0 dim 1: expected 8, got 9");
  GraphBreakEvent graphBreak{
      .function = 1,
      .name = "model.cpp:42",
      .breaks = {{.op = "item", .producer = "sum", .node = 1, .module = "blocks.0 (Block)"}}};
  EXPECT_EQ(graphBreak.message().rfind("function 1 (model.cpp:42): graph break: item() on the "
                                       "result of sum (%1) in module blocks.0 (Block). ",
                                       0),
            0u)
      << graphBreak.message();
  EXPECT_NE(graphBreak.message().find("keep the value a tensor"), std::string::npos)
      << "what to do about it";
  DynamicSymbolEvent symbol{.function = 0,
                            .entry = 1,
                            .symbol = 0,
                            .dims = {{.arg = 0, .dim = 1}},
                            .min = 2,
                            .max = INT64_MAX,
                            .why = "automatic"};
  EXPECT_EQ(symbol.message(),
            "function 0 entry 1: arg 0 dim 1 -> symbol s0 in [2, inf] (automatic)");
  StaticDimEvent everyDim{.function = 2, .entry = 0, .why = "graph breaks"};
  EXPECT_EQ(everyDim.message(), "function 2 entry 0: every dim stays static: graph breaks");
  CacheMissEvent miss{
      .where = "disk", .key = "rcjit-5fe1866fcc87c74080c179741c385c6d", .name = "rcjit_f0_e1"};
  EXPECT_EQ(miss.message(),
            "miss in memory and on disk rcjit-5fe1866fcc87 (rcjit_f0_e1): compiling");
  CacheRejectEvent object{.key = "rcjit-5fe1866fcc87c74080c179741c385c6d",
                          .reason = "it failed to link",
                          .deleted = true};
  EXPECT_EQ(object.message(),
            "rejected cached object rcjit-5fe1866fcc87: it failed to link (evicted; recompiling)");
  PerfHintEvent hint{.hint = "no function"};
  EXPECT_EQ(hint.message(), "no function");
  // milliseconds with three decimals (it printed "12.999100 ms")
  CompileStepEvent step{.graph = "function 3 entry 0",
                        .step = "fuse",
                        .seconds = 0.0129991,
                        .result = "fusion: 1 group\n"};
  EXPECT_EQ(step.message(), "function 3 entry 0: fuse (12.999 ms)\nfusion: 1 group\n");
  // a break says where it was read (file:line) and in which module
  GraphBreakEvent located{.function = 1,
                          .breaks = {{.op = "item",
                                      .producer = "sum",
                                      .node = 1,
                                      .module = "blocks.0 (Block)",
                                      .file = "model.cpp",
                                      .line = 42,
                                      .readIn = "head (Head)"}}};
  EXPECT_EQ(located.message().rfind("function 1: graph break: item() on the result of sum (%1) in "
                                    "module blocks.0 (Block), read at model.cpp:42 in module "
                                    "head (Head). ",
                                    0),
            0u)
      << located.message();
  CompileFailedEvent failed{.function = 2,
                            .name = "attn, model.cpp:7",
                            .entry = 0,
                            .seconds = 0.0125,
                            .reason = "first call",
                            .error = "boom"};
  EXPECT_EQ(failed.message(),
            "function 2 (attn, model.cpp:7) entry 0 failed to compile after 12.500 ms (first "
            "call): boom");
  EXPECT_EQ((CallEvent{.function = 2, .entry = 1, .call = 8, .seconds = 0.00025}).message(),
            "function 2 entry 1 call 8: 0.250 ms");
  EXPECT_TRUE(tracedCall(1) && tracedCall(3) && tracedCall(4) && tracedCall(64));
  EXPECT_FALSE(tracedCall(5) || tracedCall(6) || tracedCall(65));
}

std::string parseError(const json &line) {
  try {
    parseEvent(line);
  } catch (const std::exception &e) {
    return e.what();
  }
  return "no error";
}

TEST(Events, LinesOfAnotherSchemaAreRefused) {
  json line = RecompileEvent{.function = 0, .entry = 1, .guard = "g"}.toJson();
  EXPECT_NE(parseError(line).find("no schema version \"v\""), std::string::npos)
      << parseError(line);
  line["v"] = kTraceSchema + 1;
  EXPECT_EQ(parseError(line), "unknown trace schema version 2 (this rcjit reads version 1)");
  line["v"] = "1";
  EXPECT_NE(parseError(line).find("unknown trace schema version \"1\""), std::string::npos);
  line["v"] = kTraceSchema;
  line["event"] = "teleport";
  EXPECT_EQ(parseError(line), "unknown event 'teleport' in trace schema 1");
  line.erase("event");
  EXPECT_EQ(parseError(line), "not a trace event (no \"event\" string)");
  EXPECT_EQ(parseError(json::array({1, 2})), "not a trace event (not a JSON object)");
  json wrongType = RecompileEvent{.function = 0, .entry = 1, .guard = "g"}.toJson();
  wrongType["v"] = kTraceSchema;
  wrongType["entry"] = "one";
  EXPECT_NE(parseError(wrongType).find("type must be number"), std::string::npos)
      << parseError(wrongType);
}

} // namespace

namespace {

// A trace line that cannot be written (a full disk: /dev/full) is said once on stderr, with
// the path and the reason, and ends the trace instead of dropping lines silently.
TEST(TraceFile, AFailedWriteIsSaidOnceAndEndsTheTrace) {
  setTraceFile("/dev/full");
  EXPECT_TRUE(wanted(Kind::compile));
  testing::internal::CaptureStderr();
  write(Kind::compile, "first", json::object());
  write(Kind::compile, "second", json::object());
  const std::string err = testing::internal::GetCapturedStderr();
  const bool stillOn = wanted(Kind::compile);
  setTraceFile("");
  EXPECT_FALSE(stillOn) << "the trace ended";
  EXPECT_NE(err.find("cannot write the trace file /dev/full (No space left on device)"),
            std::string::npos)
      << err;
  size_t said = 0;
  for (size_t at = err.find("/dev/full"); at != std::string::npos;
       at = err.find("/dev/full", at + 1))
    ++said;
  EXPECT_EQ(said, 1u) << err;
}

} // namespace
