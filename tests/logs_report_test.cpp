// `rcjit logs --html` on a real trace: a GPT-2 compiled in full and regional mode, with a
// recompile, a graph break and a failed compile; every section of the report is there, and
// a headless browser (where installed) renders it with those sections.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <sstream>
#include <unistd.h>

#include <rcjit/rcjit.h>

#include "models/Models.h"
#include "support/Log.h"
#include "tools/LogsCommand.h"

using namespace rcjit;

namespace {

std::string slurp(const std::string &path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

std::string scratch(const std::string &name) {
  return testing::TempDir() + "rcjit_report_" + std::to_string(getpid()) + "_" + name;
}

// Every value of `attr`="..." in `html`, in order.
std::vector<std::string> attributeValues(const std::string &html, const std::string &attr) {
  std::vector<std::string> out;
  const std::string key = attr + "=\"";
  for (size_t at = html.find(key); at != std::string::npos; at = html.find(key, at + 1)) {
    size_t start = at + key.size();
    out.push_back(html.substr(start, html.find('"', start) - start));
  }
  return out;
}

// The <section> element whose id is `id` (entries hold no nested sections).
std::string sectionById(const std::string &html, const std::string &id) {
  size_t at = html.find("id=\"" + id + "\"");
  if (at == std::string::npos) return "";
  size_t start = html.rfind("<section", at);
  return html.substr(start, html.find("</section>", at) - start);
}

std::set<std::string> partsOf(const std::string &section) {
  std::vector<std::string> v = attributeValues(section, "data-part");
  return {v.begin(), v.end()};
}

// The id of the entry section of the function named `name` with entry number `entry`.
std::string entryId(const std::string &html, const std::string &name, int entry,
                    bool failed = false) {
  const std::string head = "(" + name + ", logs_report_test.cpp:";
  for (const std::string &id : attributeValues(html, "id")) {
    std::string s = sectionById(html, id);
    if (s.rfind("<section class=\"entry", 0) != 0) continue;
    std::string h3 = s.substr(s.find("<h3>"), s.find("</h3>") - s.find("<h3>"));
    if (h3.find(head) != std::string::npos &&
        h3.find(" entry " + std::to_string(entry)) != std::string::npos &&
        (s.find("class=\"entry failed\"") != std::string::npos) == failed)
      return id;
  }
  return "";
}

struct Recorded {
  std::string trace, html, page;
  int breakLine = 0, compileLine = 0;
};

// Records the trace of a 2-layer GPT-2 program, then writes its report.
Recorded recordGpt2Report() {
  Recorded r;
  r.trace = scratch("gpt2.jsonl");
  r.html = scratch("gpt2.html");
  std::filesystem::remove(r.trace);
  // Cold: regional stages that an earlier test in this process compiled would be reused from
  // the process-wide stage table, and the report would show no code for them.
  cache::clear();
  logging::setTraceFile(r.trace);
  {
    tools::ModelConfig c{.batch = 1, .seq = 8, .layers = 2};
    std::unique_ptr<tools::Model> m = tools::findModel("gpt2").build(c);
    Tensor ids = m->makeInputs(c).at(0);
    tools::ModelConfig longer = c;
    longer.seq = 12;
    Tensor longerIds = m->makeInputs(longer).at(0);
    NoGradGuard noGrad;
    auto forward = [&m](const Tensor &x) { return m->forward({x}); };
    // untiered: the entries' code and LLVM phases are in the compile (tiered_test covers
    // the fast tier and the switch)
    auto full = compile(forward, CompileOptions{.name = "gpt2 full", .tiered = false});
    r.compileLine = __LINE__ - 1;
    full(ids);
    full(ids);
    full(longerIds); // a recompile: dim 1 is 12, not 8
    auto regional = compile(
        forward, CompileOptions{.mode = Mode::regional, .name = "gpt2 regional", .tiered = false});
    regional(ids);
    regional(ids);
    auto readsLogits = [&m](const Tensor &x) {
      Tensor logits = m->forward({x});
      const float first = logits.to_vector<float>()[0]; // a graph break
      return logits * static_cast<double>(first);
    };
    r.breakLine = __LINE__ - 3;
    auto breaking = compile(readsLogits, CompileOptions{.name = "gpt2 break"});
    breaking(ids);
    auto strict = compile(readsLogits, CompileOptions{.fullgraph = true, .name = "gpt2 strict"});
    EXPECT_THROW(strict(ids), Error); // a failed compile: fullgraph and a host read
  }
  logging::setTraceFile("");
  std::ostringstream out, err;
  EXPECT_EQ(tools::logsCommand({r.trace, "--html", r.html}, out, err), 0) << err.str();
  r.page = slurp(r.html);
  return r;
}

const Recorded &gpt2Report() {
  static const Recorded r = recordGpt2Report();
  return r;
}

#define EXPECT_HAS(text, what)                                                                     \
  EXPECT_NE((text).find(what), std::string::npos) << "no '" << (what) << "' in:\n"                 \
                                                  << (text).substr(0, 3000)

TEST(LogsReport, Gpt2ReportHasEveryTopLevelSection) {
  const std::string &page = gpt2Report().page;
  ASSERT_FALSE(page.empty());
  for (const char *id : {"index", "timeline", "failures", "compiles", "recompiles", "dynamic",
                         "graph-breaks", "hints", "sources", "cache", "entries"}) {
    EXPECT_FALSE(sectionById(page, id).empty()) << id;
  }
  // the index links every entry's section
  for (const std::string &href : attributeValues(page, "href")) {
    ASSERT_EQ(href.rfind("#", 0), 0u) << href; // nothing external
    EXPECT_FALSE(sectionById(page, href.substr(1)).empty()) << href;
  }
  std::string timeline = sectionById(page, "timeline");
  EXPECT_HAS(timeline, "<svg class=\"timeline\"");
  EXPECT_HAS(timeline, "fill=\"#d33\""); // the failed compile's bar
  EXPECT_HAS(timeline, "call 2: ");      // a call's tick
  EXPECT_HAS(sectionById(page, "recompiles"), "arg 0 dim 1: expected 8, got 12");
  std::string failures = sectionById(page, "failures");
  EXPECT_HAS(failures, "gpt2 strict");
  EXPECT_HAS(failures, "graph break in a fullgraph compile");
  std::string sources = sectionById(page, "sources");
  EXPECT_HAS(sources, "logs_report_test.cpp");
  EXPECT_HAS(sources, "line " + std::to_string(gpt2Report().compileLine) + "<ul><li>compile() of");
  EXPECT_HAS(sources, "line " + std::to_string(gpt2Report().breakLine) + "<ul><li>graph break");
  for (const char *external : {"<script", "<link", "src=", "http"})
    EXPECT_EQ(page.find(external), std::string::npos) << external;
}

TEST(LogsReport, FullModeEntryShowsGuardsGraphsFusionCodePhasesAndCalls) {
  const std::string &page = gpt2Report().page;
  std::string id = entryId(page, "gpt2 full", 0);
  ASSERT_FALSE(id.empty()) << page.substr(0, 3000);
  std::string entry = sectionById(page, id);
  std::set<std::string> parts = partsOf(entry);
  for (const char *p :
       {"phases", "steps", "guards", "traced", "fusion", "graph", "code", "cache", "calls"}) {
    EXPECT_TRUE(parts.count(p)) << p << " missing from\n" << entry.substr(0, 3000);
  }
  for (const char *phase :
       {"<td>trace</td>", "<td>passes</td>", "<td>lower</td>", "<td>llvm</td>", "<td>load</td>"})
    EXPECT_HAS(entry, phase);
  EXPECT_HAS(entry, "<th>input</th><th>dtype</th><th>device</th><th>sizes</th><th>strides</th>");
  EXPECT_HAS(entry, "<tr><td>arg 0</td><td>i64</td><td>cpu</td><td>[1, 8]</td>");
  EXPECT_HAS(entry, "define "); // LLVM IR
  EXPECT_HAS(entry, "fusion");
  EXPECT_HAS(entry, "<tr><td>2</td>"); // call 2 of the calls table
  // the recompile's entry says why
  std::string second = sectionById(page, entryId(page, "gpt2 full", 1));
  EXPECT_HAS(second, "why: arg 0 dim 1: expected 8, got 12");
  EXPECT_HAS(second, "<td>[1, s0 in [2, inf]]</td>"); // automatic dynamic: symbolic now
  EXPECT_TRUE(partsOf(second).count("dynamic"));
}

TEST(LogsReport, RegionalBreakAndFailedEntriesHaveTheirSections) {
  const std::string &page = gpt2Report().page;
  std::string regional = sectionById(page, entryId(page, "gpt2 regional", 0));
  ASSERT_FALSE(regional.empty());
  for (const char *p : {"phases", "guards", "traced", "graph", "code"})
    EXPECT_TRUE(partsOf(regional).count(p)) << p;
  EXPECT_HAS(regional, "; stage 0 (");
  EXPECT_HAS(regional, "regions"); // its plan: regions compiled and reused

  std::string broken = sectionById(page, entryId(page, "gpt2 break", 0));
  ASSERT_TRUE(partsOf(broken).count("breaks")) << broken.substr(0, 3000);
  EXPECT_HAS(broken, "<td>to_vector() on the result of ");
  EXPECT_HAS(broken,
             "<td>logs_report_test.cpp:" + std::to_string(gpt2Report().breakLine) + "</td>");
  EXPECT_HAS(broken, "(rcjit::"); // the module the logits were computed in

  std::string failed = sectionById(page, entryId(page, "gpt2 strict", 0, true));
  ASSERT_TRUE(partsOf(failed).count("failure")) << failed.substr(0, 3000);
  EXPECT_HAS(failed, "graph break in a fullgraph compile of function ");
  EXPECT_HAS(failed, "read at logs_report_test.cpp:" + std::to_string(gpt2Report().breakLine));
}

// The report as a browser sees it: chromium --headless --dump-dom prints the DOM it built.
TEST(LogsReport, AHeadlessBrowserRendersTheSections) {
  const char *browsers[] = {"/usr/bin/chromium", "/usr/bin/chromium-browser",
                            "/usr/bin/google-chrome"};
  std::string browser;
  for (const char *b : browsers)
    if (std::filesystem::exists(b)) browser = b;
  if (browser.empty()) GTEST_SKIP() << "no headless browser installed (apt-get install chromium)";
  const std::string dom = scratch("dom.html");
  std::string cmd = "timeout 120 " + browser +
                    " --headless --no-sandbox --disable-gpu --dump-dom file://" +
                    gpt2Report().html + " > " + dom + " 2>/dev/null";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::string rendered = slurp(dom);
  for (const char *id : {"index", "timeline", "failures", "recompiles", "sources", "entries"})
    EXPECT_FALSE(sectionById(rendered, id).empty()) << id;
  EXPECT_HAS(rendered, "data-part=\"guards\"");
  EXPECT_HAS(rendered, "<svg class=\"timeline\"");
}

// Graph breaks on stderr name the read's file:line and the module the value came from.
TEST(LogsReport, GraphBreakLogNamesFileLineAndModule) {
  struct Inner : nn::Module<Inner> {
    nn::Linear fc{4, 4};
    Inner() { register_module("fc", fc); }
    Tensor forward(const Tensor &x) {
      Tensor y = fc(x);
      return y * sum(y).item(); // read inside the module
    }
  };
  struct Outer : nn::Module<Outer> {
    Inner block;
    Outer() { register_module("block", block); }
    Tensor forward(const Tensor &x) { return block(x); }
  };
  const int readLine = __LINE__ - 8; // the item() line above
  Outer net;
  auto f = compile(net);
  set_logs("graph_breaks");
  testing::internal::CaptureStderr();
  f(Tensor::ones({2, 4}));
  std::string err = testing::internal::GetCapturedStderr();
  set_logs("");
  EXPECT_HAS(err, "[rcjit:graph_breaks] ");
  EXPECT_HAS(err, "item() on the result of sum");
  EXPECT_HAS(err, "read at logs_report_test.cpp:" + std::to_string(readLine));
  EXPECT_HAS(err, "in module block");
}

} // namespace
