// `rcjit logs` on a trace recorded here by real compiles: its numbers are the compiler's.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include <rcjit/rcjit.h>

#include "cache/ClearHooks.h"
#include "support/Events.h"
#include "support/Log.h"
#include "tools/LogsCommand.h"

using namespace rcjit;
namespace fs = std::filesystem;

namespace {

#define EXPECT_CONTAINS(text, what)                                                                \
  EXPECT_NE((text).find(what), std::string::npos) << "no '" << (what) << "' in:\n" << (text)

Tensor scaledSoftmax(const Tensor &x) { return softmax(x, -1) * 3.0; }
Tensor branchy(const Tensor &x) { return sum(x).item() > 0 ? x * 2.0 : x * 3.0; }
const int kBranchyLine = __LINE__ - 1;

std::string plural(uint64_t n, const std::string &one, const std::string &many) {
  return std::to_string(n) + " " + (n == 1 ? one : many);
}

TEST(LogsTrace, SummaryOfARealTraceHasTheCompilersNumbers) {
  fs::path dir = fs::path(testing::TempDir()) / "rcjit_logs_trace_test";
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string previousDir = cache::dir();
  cache::set_key_file((dir / "cache.key").string());
  cache::set_dir((dir / "cache").string());
  std::string trace = (dir / "trace.jsonl").string();
  logging::setTraceFile(trace);
  cache::Stats before = cache::stats();

  // a recompile whose entry makes dim 1 symbolic (Dynamic::automatic); then it serves width 10
  auto cf = compile(scaledSoftmax);
  cf(Tensor::randn({4, 8}, 1));
  cf(Tensor::randn({4, 9}, 2));
  cf(Tensor::randn({4, 10}, 3));
  // a graph break
  auto cb = compile(branchy);
  cb(Tensor::ones({3}));
  // cache hits: the same function again, with the in-process kernel tables dropped
  cache::detail::runClearHooks();
  auto again = compile(scaledSoftmax);
  again(Tensor::randn({4, 8}, 4));

  logging::setTraceFile("");
  cache::Stats after = cache::stats();
  CompileStats a = cf.stats(), b = cb.stats(), c = again.stats();
  ASSERT_EQ(a.recompiles, 1);
  ASSERT_EQ(b.graph_breaks, 1);
  uint64_t memoryHits = after.memory_hits - before.memory_hits;
  uint64_t diskHits = after.disk_hits - before.disk_hits;
  uint64_t misses = after.misses - before.misses;
  ASSERT_GT(memoryHits, 0u);

  std::ostringstream out, err;
  ASSERT_EQ(tools::logsCommand({trace}, out, err), 0) << err.str();
  std::string summary = out.str();
  EXPECT_EQ(err.str(), "");
  EXPECT_CONTAINS(summary, "; 0 malformed lines\n");
  EXPECT_CONTAINS(
      summary, "3 functions, 4 entries, " +
                   plural(a.recompiles + b.recompiles + c.recompiles, "recompile", "recompiles") +
                   ", 0 recompile-limit hits, 1 graph break, compile ");
  EXPECT_CONTAINS(summary, ": 2 entries, 1 recompile, compile ");
  EXPECT_CONTAINS(summary, "  dynamic shapes:\n    entry 1: arg 0 dim 1 -> symbol s0 in [2, inf] "
                           "(automatic: changed from 8 to 9 since entry 0)\n");
  EXPECT_CONTAINS(summary, "  graph breaks:\n    1x item() on the result of sum (%1), read at "
                           "logs_trace_test.cpp:" +
                               std::to_string(kBranchyLine) + "\n");
  EXPECT_CONTAINS(summary, "cache: " + plural(diskHits, "disk hit", "disk hits") +
                               ", 0 rejections, " +
                               plural(memoryHits, "memory hit", "memory hits") + ", " +
                               plural(misses, "miss", "misses") + ", ");

  // every line is of this schema, and cache events name the module they were compiled for
  std::ifstream in(trace);
  int named = 0;
  for (std::string line; std::getline(in, line);) {
    nlohmann::json j = nlohmann::json::parse(line);
    EXPECT_EQ(j.at("v"), logging::kTraceSchema);
    logging::Event e = logging::parseEvent(j);
    EXPECT_EQ(j.at("message"), logging::messageOf(e));
    if (const auto *hit = std::get_if<logging::CacheHitEvent>(&e)) {
      named += hit->name.rfind("rcjit_f", 0) == 0;
    }
  }
  EXPECT_GT(named, 0);
  cache::set_dir(previousDir);
}

} // namespace
