// `rcjit logs`: the summary and HTML report of a recorded trace, malformed lines, exit codes.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>

#include "tools/Cli.h"
#include "tools/LogsCommand.h"

using rcjit::tools::logsCommand;

namespace {

// tests/data/trace_sample.jsonl: `rcjit bench --model toy64 --layers 2 --modes full,regional
// --batch 1,2 --seq 4` (RCJIT_LOGS=guards,graph), then twice a program compiling a function
// with recompile_limit = 2 called on 4 widths and one with a graph break (item()), the second
// time with one disk cache entry corrupted. Three processes append to one trace. Recorded
// before the typed schema and rewritten as trace schema 1 (the same events and fields; the
// recording has no cache miss or store events, which rcjit did not log then).
const std::string kSample = std::string(RCJIT_SOURCE_DIR) + "/tests/data/trace_sample.jsonl";
// The summary of kSample as printed before the dynamic events existed (the cache line now
// also counts memory hits, misses and stores, none in this recording), without its first
// line (which names the file).
const std::string kSampleSummary =
    std::string(RCJIT_SOURCE_DIR) + "/tests/data/trace_sample_summary.txt";
// tests/data/trace_dynamic.jsonl: `rcjit bench --model toy64 --modes full,dynamic --batch 1
// --seq 32 --reps 2` (function 1 marks the sequence dim dynamic in [2, 32]), then a program
// compiling a function with Dynamic::always on two [3, 5] arguments (function 0: shared
// symbols; its dynamic events come before the compile that starts the second run), one
// called on widths 8, 9, 10 (function 1: automatic makes dim 1 symbolic in entry 1), one
// reshaping by a constant called on widths 12, 24 (function 2: dim 1 stays static) and one
// with a graph break on a mark_dynamic argument (function 3: every dim stays static).
// Rewritten as trace schema 1 like kSample.
const std::string kDynamicSample =
    std::string(RCJIT_SOURCE_DIR) + "/tests/data/trace_dynamic.jsonl";

struct Result {
  int rc = -1;
  std::string out, err;
};

Result runLogs(const std::vector<std::string> &args) {
  std::ostringstream out, err;
  Result r;
  r.rc = logsCommand(args, out, err);
  r.out = out.str();
  r.err = err.str();
  return r;
}

std::string tempPath(const std::string &name) {
  std::filesystem::path dir = std::filesystem::path(testing::TempDir()) / "rcjit_logs_test";
  std::filesystem::create_directories(dir);
  return (dir / name).string();
}

std::string writeFile(const std::string &name, const std::string &text) {
  std::string path = tempPath(name);
  std::ofstream(path, std::ios::trunc) << text;
  return path;
}

std::string readFile(const std::string &path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

size_t occurrences(const std::string &text, const std::string &what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// The summary of one function: from its header line to the blank line after it.
std::string section(const std::string &out, const std::string &header) {
  size_t at = out.find("\n" + header + ":");
  if (at == std::string::npos) return "";
  return out.substr(at + 1, out.find("\n\n", at + 1) - at);
}

#define EXPECT_CONTAINS(text, what)                                                                \
  EXPECT_NE((text).find(what), std::string::npos) << "no '" << (what) << "' in:\n" << (text)

TEST(LogsCommand, SummarizesTheRecordedTrace) {
  Result r = runLogs({kSample});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.err, "");
  EXPECT_CONTAINS(r.out, "62 events (");
  EXPECT_CONTAINS(r.out, "12 compile,");
  EXPECT_CONTAINS(r.out, "; 0 malformed lines");
  EXPECT_CONTAINS(r.out, "8 functions, 12 entries, 4 recompiles, 2 recompile-limit hits, "
                         "4 graph breaks");
  EXPECT_CONTAINS(r.out, "3 runs");
  EXPECT_CONTAINS(r.out, "run 2 function 0: 2 entries, 1 recompile, compile ");
  EXPECT_CONTAINS(r.out, "2 regions (+1 reused)");
  EXPECT_CONTAINS(r.out, "    entry 1: arg 0 dim 1: expected 8, got 9\n");
  EXPECT_CONTAINS(r.out, "recompile_limit (2) reached, later misses run eagerly; last failing "
                         "guard: arg 0 dim 1: expected 8, got 10");
  EXPECT_CONTAINS(r.out, "falls back to eager");
  EXPECT_CONTAINS(r.out, "cache: 3 disk hits, 1 rejection");
}

TEST(LogsCommand, GraphBreaksAreCountedPerFunctionAndProcess) {
  Result r = runLogs({kSample});
  ASSERT_EQ(r.rc, 0) << r.err;
  // Each process traces function 1 twice (a first call and one recompile), one break each;
  // the break is logged before the entry it belongs to, so it must land in the same run.
  EXPECT_EQ(occurrences(r.out, "    2x item() on the result of sum (%1)\n"), 2u) << r.out;
  size_t run2 = r.out.find("run 2 function 1:"), run3 = r.out.find("run 3 function 0:");
  ASSERT_NE(run2, std::string::npos);
  EXPECT_NE(r.out.substr(run2, run3 - run2).find("graph breaks:"), std::string::npos) << r.out;
}

TEST(LogsCommand, WritesASelfContainedHtmlReport) {
  std::string html = tempPath("report.html");
  std::filesystem::remove(html);
  Result r = runLogs({kSample, "--html", html});
  ASSERT_EQ(r.rc, 0) << r.err;
  std::string page = readFile(html);
  EXPECT_EQ(page.rfind("<!DOCTYPE html>", 0), 0u) << page.substr(0, 100);
  EXPECT_CONTAINS(page, "<style>");
  EXPECT_CONTAINS(page, "<tr><th>function</th><th>entry</th><th>ms</th><th>reason</th>"
                        "<th>kernels</th></tr>");
  EXPECT_CONTAINS(page, "<td>arg 0 dim 1: expected 8, got 9</td>");
  for (const char *section : {"Recompiles", "Graph breaks", "Perf hints", "Cache events"}) {
    EXPECT_CONTAINS(page, "<h2>" + std::string(section));
  }
  EXPECT_CONTAINS(page, "<td>item() on the result of sum (%1)</td><td>2</td>");
  EXPECT_CONTAINS(page, "authentication failed (forged, or written with another key)");
  for (const char *external : {"<script", "<link", "src=", "http"}) {
    EXPECT_EQ(page.find(external), std::string::npos) << external;
  }
  // links only within the page (the index to the entries)
  for (size_t at = page.find("href=\""); at != std::string::npos; at = page.find("href=\"", at + 1))
    EXPECT_EQ(page.substr(at, 7), "href=\"#") << page.substr(at, 40);
  EXPECT_EQ(page.substr(page.size() - 8), "</html>\n");
}

TEST(LogsCommand, HtmlEscapesEveryText) {
  std::string trace = writeFile(
      "escape.jsonl",
      R"({"v":1,"event":"perf_hint","function":7,"hint":"<script>alert(\"x\")</script> & 'y'"})"
      "\n"
      R"({"v":1,"event":"compile","function":7,"entry":0,"seconds":0.5,"reason":"a < b && c > d",)"
      R"("nodes":1,"kernels":1,"regions_compiled":0,"regions_reused":0})"
      "\n"
      R"({"v":1,"event":"dynamic_symbol","function":7,"entry":0,"symbol":0,)"
      R"("dims":[{"arg":0,"dim":1}],"min":2,"max":8,"why":"x & y"})"
      "\n"
      R"({"v":1,"event":"static_dim","function":7,"entry":0,"dims":[],"why":"'q' > \"p\""})"
      "\n"
      R"({"v":1,"event":"cache_miss","where":"disk","key":"rcjit-0","name":"<m>"})"
      "\n");
  std::string html = tempPath("escape.html");
  Result r = runLogs({trace, "--html", html});
  ASSERT_EQ(r.rc, 0) << r.err;
  std::string page = readFile(html);
  EXPECT_EQ(page.find("<script>"), std::string::npos) << page;
  EXPECT_CONTAINS(page, "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; &#39;y&#39;");
  EXPECT_CONTAINS(page, "<td>a &lt; b &amp;&amp; c &gt; d</td>");
  EXPECT_CONTAINS(page, "<td>arg 0 dim 1</td><td>s0</td><td>[2, 8]</td><td>x &amp; y</td>");
  EXPECT_CONTAINS(page, "<td>every dim</td><td>&#39;q&#39; &gt; &quot;p&quot;</td>");
  EXPECT_CONTAINS(page, "<td>miss</td><td>&lt;m&gt;</td><td>1</td>");
  EXPECT_CONTAINS(r.out, "function 7: 1 entry, 0 recompiles, compile 500.0 ms total");
}

// A trace's strings reach neither the terminal nor the page with their control characters:
// ESC, BEL, CR and a C1 CSI are shown as text (a window title and a screen clear here).
TEST(LogsCommand, ControlCharactersInTheTraceAreShownEscaped) {
  std::string trace = writeFile(
      "controls.jsonl",
      R"({"v":1,"event":"compile","function":3,"entry":0,"seconds":0.5,)"
      R"("reason":"first call\u001b]0;owned\u0007","name":"f\u001b[2J\r\u00c2\u009b",)"
      R"("nodes":1,"kernels":1,"regions_compiled":0,"regions_reused":0})"
      "\n"
      R"({"v":1,"event":"recompile","function":3,"entry":1,"guard":"x.size(0) == 4\u001b[1m"})"
      "\n"
      R"({"v":1,"event":"compile_failed","function":3,"entry":1,"seconds":0.1,)"
      R"("reason":"guard failed","error":"boom\u0007\u007f"})"
      "\n");
  std::string html = tempPath("controls.html");
  Result r = runLogs({trace, "--html", html});
  ASSERT_EQ(r.rc, 0) << r.err;
  const std::string page = readFile(html);
  for (const std::string *text : std::initializer_list<const std::string *>{&r.out, &page}) {
    for (char c : *text) {
      const auto u = static_cast<unsigned char>(c);
      EXPECT_TRUE(u >= 0x20 || c == '\n' || c == '\t') << "raw control byte " << int(u);
      EXPECT_NE(u, 0x7f);
    }
    EXPECT_EQ(text->find("\xc2\x9b"), std::string::npos) << "a raw C1 CSI";
  }
  EXPECT_CONTAINS(r.out, "first call\\x1b]0;owned\\x07");
  EXPECT_CONTAINS(r.out, "f\\x1b[2J\\x0d\xc3\x82\\u009b");
  EXPECT_CONTAINS(r.out, "x.size(0) == 4\\x1b[1m");
  EXPECT_CONTAINS(r.out, "boom\\x07\\x7f");
  EXPECT_CONTAINS(page, "first call\\x1b]0;owned\\x07");
  EXPECT_CONTAINS(page, "boom\\x07\\x7f");
}

TEST(LogsCommand, SummarizesSymbolicAndStaticDims) {
  Result r = runLogs({kDynamicSample});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.err, "");
  EXPECT_CONTAINS(r.out, "32 events (5 cache, 8 compile, 6 dynamic, 1 graph_breaks, ");
  EXPECT_CONTAINS(r.out, "6 functions, 8 entries, 2 recompiles, 0 recompile-limit hits, "
                         "1 graph break, compile ");
  EXPECT_CONTAINS(r.out, "2 runs");
  EXPECT_EQ(section(r.out, "run 1 function 0").find("dynamic"), std::string::npos) << r.out;
  EXPECT_CONTAINS(section(r.out, "run 1 function 1"),
                  "  dynamic shapes:\n    entry 0: arg 0 dim 1 -> symbol s0 in [2, 32] "
                  "(mark_dynamic)\n");
  // logged before the compile event that starts run 2: they belong to run 2's function 0
  EXPECT_CONTAINS(section(r.out, "run 2 function 0"),
                  "  dynamic shapes:\n"
                  "    entry 0: arg 0 dim 0 = arg 1 dim 0 -> symbol s0 in [2, inf] "
                  "(Dynamic::always)\n"
                  "    entry 0: arg 0 dim 1 = arg 1 dim 1 -> symbol s1 in [2, inf] "
                  "(Dynamic::always)\n");
  std::string automatic = section(r.out, "run 2 function 1");
  EXPECT_CONTAINS(automatic, "    entry 1: arg 0 dim 1: expected 8, got 9\n  dynamic shapes:\n"
                             "    entry 1: arg 0 dim 1 -> symbol s0 in [2, inf] (automatic: "
                             "changed from 8 to 9 since entry 0)\n");
  EXPECT_CONTAINS(section(r.out, "run 2 function 2"),
                  "  dynamic shapes:\n    entry 1: arg 0 dim 1 stays static: the function fails "
                  "at s0=5: reshape: cannot reshape [2, 5] (10 elements) to [-1, 3, 4]\n");
  EXPECT_CONTAINS(section(r.out, "run 2 function 3"),
                  "  dynamic shapes:\n    entry 0: every dim stays static: a function with graph "
                  "breaks compiles its segments for static shapes\n  graph breaks:\n");
  EXPECT_EQ(occurrences(r.out, "dynamic shapes:"), 5u) << r.out;
}

TEST(LogsCommand, HtmlListsSymbolicAndStaticDims) {
  std::string html = tempPath("dynamic.html");
  std::filesystem::remove(html);
  Result r = runLogs({kDynamicSample, "--html", html});
  ASSERT_EQ(r.rc, 0) << r.err;
  std::string page = readFile(html);
  EXPECT_CONTAINS(page, "<h2>Symbolic dims</h2>\n<table>\n<tr><th>function</th><th>entry</th>"
                        "<th>dims</th><th>symbol</th><th>range</th><th>why</th></tr>\n");
  EXPECT_CONTAINS(page, "<tr><td>run 1 function 1</td><td>0</td><td>arg 0 dim 1</td><td>s0</td>"
                        "<td>[2, 32]</td><td>mark_dynamic</td></tr>");
  EXPECT_CONTAINS(page, "<tr><td>run 2 function 0</td><td>0</td><td>arg 0 dim 1 = arg 1 dim 1</td>"
                        "<td>s1</td><td>[2, inf]</td><td>Dynamic::always</td></tr>");
  EXPECT_CONTAINS(page, "<tr><td>run 2 function 1</td><td>1</td><td>arg 0 dim 1</td><td>s0</td>"
                        "<td>[2, inf]</td><td>automatic: changed from 8 to 9 since entry 0</td>"
                        "</tr>");
  EXPECT_CONTAINS(page, "<h2>Dims that stay static</h2>\n<table>\n<tr><th>function</th>"
                        "<th>entry</th><th>dims</th><th>why</th></tr>\n");
  EXPECT_CONTAINS(page, "<tr><td>run 2 function 2</td><td>1</td><td>arg 0 dim 1</td><td>the "
                        "function fails at s0=5: reshape: cannot reshape [2, 5] (10 elements) "
                        "to [-1, 3, 4]</td></tr>");
  EXPECT_CONTAINS(page, "<tr><td>run 2 function 3</td><td>0</td><td>every dim</td><td>a function "
                        "with graph breaks compiles its segments for static shapes</td></tr>");
  EXPECT_EQ(occurrences(page, "<td>[2, inf]</td>"), 3u) << page;
}

TEST(LogsCommand, OldTraceWithoutDynamicEventsPrintsAsBefore) {
  Result r = runLogs({kSample});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out, "rcjit logs: " + kSample + "\n" + readFile(kSampleSummary));
  std::string html = tempPath("old.html");
  r = runLogs({kSample, "--html", html});
  ASSERT_EQ(r.rc, 0) << r.err;
  std::string page = readFile(html);
  EXPECT_CONTAINS(page, "<h2>Symbolic dims</h2>\n<p class=\"none\">none</p>\n");
  EXPECT_CONTAINS(page, "<h2>Dims that stay static</h2>\n<p class=\"none\">none</p>\n");
}

TEST(LogsCommand, DynamicEventsWithoutACompileAndMissingFields) {
  std::string trace = writeFile(
      "dynamic.jsonl",
      R"({"v":1,"event":"dynamic_symbol","function":4,"entry":0,"symbol":0,)"
      R"("dims":[{"arg":1,"dim":0}],"min":1,"max":9223372036854775807,"why":"mark_dynamic"})"
      "\n"
      R"({"v":1,"event":"dynamic_symbol","function":4,"entry":0,"symbol":1,)"
      R"("dims":[{"arg":0,"dim":1}],"min":2})"
      "\n"
      R"({"v":1,"event":"static_dim","function":4,"entry":0,"dims":[],"why":"graph breaks"})"
      "\n");
  Result r = runLogs({trace});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.err, "rcjit logs: " + trace + ": line 2: key 'max' not found\n");
  EXPECT_CONTAINS(r.out, "2 events (2 dynamic); 1 malformed line\n");
  // the entry was never compiled (a cut-off trace): its dims are still listed
  EXPECT_CONTAINS(r.out, "function 4: 0 entries, 0 recompiles, compile 0.0 ms total, 0.0 ms max\n"
                         "  dynamic shapes:\n"
                         "    entry 0: arg 1 dim 0 -> symbol s0 in [1, inf] (mark_dynamic)\n"
                         "    entry 0: every dim stays static: graph breaks\n");
}

TEST(LogsCommand, MalformedLinesAreReportedAndSkipped) {
  std::string trace = writeFile(
      "malformed.jsonl",
      R"({"v":1,"event":"compile","function":0,"entry":0,"seconds":0.001,"reason":"first call",)"
      R"("nodes":1,"kernels":1,"regions_compiled":0,"regions_reused":0})"
      "\n"
      "this is not json\n"
      "[1, 2]\n"
      "\n"
      R"({"v":1,"event":"compile","function":0})"
      "\n"
      R"({"v":1,"event":"recompile","function":0,"entry":1,"guard":"arg 0 dim 0: expected 2, got 3"})"
      "\n"
      R"({"v":1,"event":"compile","function":0,"entry":1,"seconds":0.002,"reason":"arg 0 dim 0)");
  Result r = runLogs({trace});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_CONTAINS(r.err, "line 2: not JSON: ");
  EXPECT_CONTAINS(r.err, "line 3: not a trace event");
  EXPECT_CONTAINS(r.err, "line 5: key 'entry' not found");
  EXPECT_CONTAINS(r.err, "line 7: not JSON: ");
  EXPECT_EQ(occurrences(r.err, "\n"), 4u) << r.err;
  EXPECT_CONTAINS(r.out, "2 events (1 compile, 1 recompiles); 4 malformed lines");
  EXPECT_CONTAINS(r.out, "function 0: 1 entry, 1 recompile");
  EXPECT_CONTAINS(r.out, "    entry 1: arg 0 dim 0: expected 2, got 3\n");
}

// A trace of another version (a newer rcjit's, or one from before the typed schema): each
// line is refused with its number and the reason, never guessed at.
TEST(LogsCommand, LinesOfAnotherSchemaVersionAreErrorsNamingTheLine) {
  std::string trace =
      writeFile("versions.jsonl",
                R"({"v":1,"event":"recompile","function":0,"entry":1,"guard":"g"})"
                "\n"
                R"({"v":2,"event":"recompile","function":0,"entry":2,"guard":"g"})"
                "\n"
                R"({"event":"recompiles","function":0,"entry":3,"guard":"g","message":"old"})"
                "\n"
                R"({"v":1,"event":"warp_drive","function":0})"
                "\n"
                "{\"v\":1,\n");
  Result r = runLogs({trace});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_CONTAINS(r.err, "rcjit logs: " + trace +
                             ": line 2: unknown trace schema version 2 (this rcjit reads "
                             "version 1)\n");
  EXPECT_CONTAINS(r.err, ": line 3: no schema version \"v\"");
  EXPECT_CONTAINS(r.err, ": line 4: unknown event 'warp_drive' in trace schema 1\n");
  EXPECT_CONTAINS(r.err, ": line 5: not JSON: ");
  EXPECT_EQ(occurrences(r.err, "\n"), 4u) << r.err;
  EXPECT_CONTAINS(r.out, "1 event (1 recompiles); 4 malformed lines\n");
}

TEST(LogsCommand, ATraceOfAnotherVersionShowsItsFirstErrorsOnly) {
  std::string text;
  const std::string unversioned = R"({"event":"recompiles","function":0,"guard":"g"})";
  for (int i = 0; i < 50; ++i) text += unversioned + "\n";
  std::string trace = writeFile("old.jsonl", text);
  Result r = runLogs({trace});
  EXPECT_EQ(r.rc, 1) << "no line of it is a trace event";
  EXPECT_EQ(occurrences(r.err, "no schema version"), 20u) << r.err;
  EXPECT_CONTAINS(r.err, ": line 20: no schema version");
  EXPECT_CONTAINS(r.err, "rcjit logs: " + trace + ": 30 more malformed lines not shown\n");
  EXPECT_CONTAINS(r.err, "'" + trace + "' is not a trace: none of its 50 lines is a trace event");
  EXPECT_EQ(r.out, "");
}

// A file with no trace line at all used to print an empty summary and exit 0.
TEST(LogsCommand, AFileWithNoTraceLineIsAFailure) {
  std::string text = writeFile("not_a_trace.txt", "root:x:0:0:root:/root:/bin/bash\n");
  Result r = runLogs({text});
  EXPECT_EQ(r.rc, 1);
  EXPECT_CONTAINS(r.err, "line 1: not JSON: ");
  EXPECT_CONTAINS(r.err, "is not a trace: none of its 1 line is a trace event of schema 1");
  EXPECT_EQ(r.out, "");
  // one valid event is enough: the other lines are reported and skipped (exit 0)
  std::string mixed =
      writeFile("mixed.jsonl", "garbage\n"
                               R"({"v":1,"event":"recompile","function":0,"entry":1,"guard":"g"})"
                               "\n");
  EXPECT_EQ(runLogs({mixed}).rc, 0);
  // an empty trace is a trace of nothing
  EXPECT_EQ(runLogs({writeFile("empty.jsonl", "")}).rc, 0);
}

TEST(LogsCommand, UnreadableFileIsAFailure) {
  Result r = runLogs({tempPath("no_such_trace.jsonl")});
  EXPECT_EQ(r.rc, 1);
  EXPECT_CONTAINS(r.err, "cannot read trace file");
  EXPECT_CONTAINS(r.err, "No such file or directory");
  EXPECT_EQ(r.out, "");
  r = runLogs({testing::TempDir()});
  EXPECT_EQ(r.rc, 1);
  EXPECT_CONTAINS(r.err, "is a directory");
}

TEST(LogsCommand, UnwritableHtmlIsAFailure) {
  Result r = runLogs({kSample, "--html", tempPath("no_such_dir/report.html")});
  EXPECT_EQ(r.rc, 1);
  EXPECT_CONTAINS(r.err, "cannot write");
}

TEST(LogsCommand, UsageErrors) {
  Result r = runLogs({});
  EXPECT_EQ(r.rc, 2);
  EXPECT_CONTAINS(r.err, "missing the trace FILE");
  r = runLogs({kSample, "--bogus"});
  EXPECT_EQ(r.rc, 2);
  EXPECT_CONTAINS(r.err, "--bogus");
  r = runLogs({kSample, kSample});
  EXPECT_EQ(r.rc, 2);
  r = runLogs({kSample, "--html"});
  EXPECT_EQ(r.rc, 2);
  r = runLogs({"--help"});
  EXPECT_EQ(r.rc, 0);
  EXPECT_CONTAINS(r.out, "--html");
}

TEST(LogsCommand, IsACliCommand) {
  std::ostringstream out, err;
  const char *help[] = {"rcjit", "--help"};
  EXPECT_EQ(rcjit::tools::runCli(2, help, out, err), 0);
  EXPECT_CONTAINS(out.str(), "  logs ");
  std::string file = kSample;
  const char *logs[] = {"rcjit", "logs", file.c_str()};
  EXPECT_EQ(rcjit::tools::runCli(3, logs, out, err), 0) << err.str();
  EXPECT_CONTAINS(out.str(), "cache: 3 disk hits");
  const char *bare[] = {"rcjit", "logs"};
  EXPECT_EQ(rcjit::tools::runCli(2, bare, out, err), 2);
}

} // namespace
