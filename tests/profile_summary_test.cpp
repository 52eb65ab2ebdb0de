// `rcjit logs PROFILE.json`: the profile summary's figures on a hand-made profile (nested
// calls, compiles, other threads, the end tolerance), a large profile read in bounded
// memory, out of memory as an Error, and a FIFO refused instead of blocking.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>

#include "tools/LogsCommand.h"
#include "tools/ProfileSummary.h"

namespace {

std::string tempPath(const std::string &name) {
  return testing::TempDir() + "rcjit_profile_summary_" + std::to_string(::getpid()) + "_" + name;
}

std::string readText(const std::string &path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

std::string event(const std::string &name, const std::string &cat, double ts, double dur, int tid,
                  const std::string &extra = "") {
  std::ostringstream o;
  o.precision(17);
  o << R"({"name":")" << name << R"(","cat":")" << cat << R"(","ph":"X","ts":)" << ts
    << R"(,"dur":)" << dur << R"(,"pid":1,"tid":)" << tid << extra << "}";
  return o.str();
}

// One row of a "by total time" table, as the summary prints it.
std::string row(double us, double pct, int count, const std::string &name) {
  char line[200];
  std::snprintf(line, sizeof line, "  %10.3f ms %6.1f %%  %7d x %9.1f us  %s\n", us / 1e3, pct,
                count, us / count, name.c_str());
  return line;
}

// Thread 1: call f (steady) holds k1 and m; the second f compiles (not steady); g holds h
// (both steady), h holds k2 (counted for both), g alone holds "add"; k3 and an eager op
// named with terminal escapes lie outside every call; k4 ends 0.5 ns after call t, within
// the tolerance. Thread 2's k1 and its long compile touch no call of thread 1. Events come
// inner first, as the profiler writes them, plus a metadata event and an "args" object.
TEST(ProfileSummary, StepsAreCountedInEverySteadyCallThatHoldsThem) {
  const std::string path = tempPath("hand.json");
  std::ofstream(path) << "{\"traceEvents\":[\n"
                      << event("k1", "kernel", 10, 20, 1) << ",\n"
                      << event("m", "library", 40, 30, 1, R"(,"args":{"ts":"x","n":[1]})") << ",\n"
                      << event("f", "call", 0, 100, 1) << ",\n"
                      << event("compile f", "compile", 210, 50, 1) << ",\n"
                      << event("k1", "kernel", 270, 10, 1) << ",\n"
                      << event("f", "call", 200, 100, 1) << ",\n"
                      << event("k2", "kernel", 420, 12, 1) << ",\n"
                      << event("h", "call", 410, 50, 1) << ",\n"
                      << event("add", "eager op", 470, 5, 1) << ",\n"
                      << event("g", "call", 400, 100, 1) << ",\n"
                      << event("k3", "kernel", 600, 10, 1) << ",\n"
                      << event("esc\\u001b[2J\\u0007", "eager op", 700, 1, 1) << ",\n"
                      << event("k4", "kernel", 900, 100.0005, 1) << ",\n"
                      << event("t", "call", 900, 100, 1) << ",\n"
                      << event("k1", "kernel", 10, 20, 2) << ",\n"
                      << event("compile", "compile", 0, 1000, 2) << ",\n"
                      << R"({"name":"thread_name","ph":"M","pid":1,"tid":1})"
                      << "\n], \"displayTimeUnit\": \"ms\"}\n";
  std::ostringstream out;
  rcjit::tools::summarizeProfile(path, out);
  const std::string text = out.str();
  EXPECT_NE(text.find("profile " + path + ": 16 events\n"), std::string::npos) << text;
  EXPECT_NE(text.find("  call              5 events,      0.450 ms\n"), std::string::npos) << text;
  EXPECT_NE(text.find("  kernel            6 events,      0.172 ms\n"), std::string::npos) << text;
  EXPECT_NE(text.find("4 compiled calls that did not compile: 0.350 ms, of which their steps "
                      "0.179 ms (51.1 %"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find(row(200, 0, 2, "f")), std::string::npos) << text;
  EXPECT_NE(text.find(row(24, 100 * 24 / 350.0, 2, "k2")), std::string::npos) << text;
  EXPECT_NE(text.find(row(20, 100 * 20 / 350.0, 1, "k1")), std::string::npos) << text;
  EXPECT_NE(text.find(row(5, 100 * 5 / 350.0, 1, "add")), std::string::npos) << text;
  EXPECT_NE(text.find(row(100.0005, 100 * 100.0005 / 350.0, 1, "k4")), std::string::npos) << text;
  EXPECT_EQ(text.find("k3"), std::string::npos) << "outside every call: " << text;
  EXPECT_NE(text.find(row(1, 0, 1, "esc\\x1b[2J\\x07")), std::string::npos) << text;
  EXPECT_EQ(text.find('\x1b'), std::string::npos) << "a raw ESC reached the terminal";
}

// N calls of 4 steps each, every tenth one compiling: 1.1 N + 4 N events.
std::string writeLargeProfile(const std::string &name, int calls) {
  const std::string path = tempPath(name);
  std::ofstream o(path);
  o << "{\"traceEvents\":[";
  for (int i = 0; i < calls; ++i) {
    const double ts = i * 100.0;
    for (int j = 0; j < 4; ++j)
      o << event("k" + std::to_string(j), "kernel", ts + 10 + j * 20, 15, 1) << ",\n";
    if (i % 10 == 0) o << event("compile", "compile", ts + 5, 1, 1) << ",\n";
    o << event("step", "call", ts, 90, 1) << (i + 1 < calls ? ",\n" : "\n");
  }
  o << "],\"displayTimeUnit\":\"ms\"}\n";
  return path;
}

struct ChildResult {
  int rc = -1;
  std::string out, err;
};

// `rcjit logs FILE` in a fresh process whose address space is limited to `limit` bytes
// (RLIMIT_AS, as `ulimit -v` sets it).
ChildResult logsWithMemoryLimit(const std::string &file, rlim_t limit) {
  const std::string outPath = tempPath("child_out.txt"), errPath = tempPath("child_err.txt");
  pid_t pid = ::fork();
  if (pid == 0) {
    const int out = ::open(outPath.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    const int err = ::open(errPath.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    ::dup2(out, 1);
    ::dup2(err, 2);
    rlimit l{limit, limit};
    ::setrlimit(RLIMIT_AS, &l);
    ::execl(RCJIT_CLI, "rcjit", "logs", file.c_str(), static_cast<char *>(nullptr));
    ::_exit(127);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  ChildResult r;
  r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = readText(outPath);
  r.err = readText(errPath);
  return r;
}

// The smallest address space (to 1 MiB) in which `rcjit logs` summarizes a 10-event profile:
// what the process needs before the profile's size counts.
rlim_t baseLimit() {
  static rlim_t base = [] {
    const std::string tiny = writeLargeProfile("tiny.json", 2);
    rlim_t lo = rlim_t{8} << 20, hi = rlim_t{16} << 30; // lo fails (or is the answer), hi works
    if (logsWithMemoryLimit(tiny, lo).rc == 0) return lo;
    EXPECT_EQ(logsWithMemoryLimit(tiny, hi).rc, 0);
    while (hi - lo > (rlim_t{1} << 20)) {
      const rlim_t mid = lo + (hi - lo) / 2;
      (logsWithMemoryLimit(tiny, mid).rc == 0 ? hi : lo) = mid;
    }
    return hi;
  }();
  return base;
}

// 306 000 events (31 MB of JSON) in 128 MiB more than a 10-event profile needs: the profile
// is never held as a JSON tree (about nine times its size), and the figures are exact.
TEST(ProfileSummary, ALargeProfileIsSummarizedInBoundedMemory) {
  const int calls = 60000;
  const std::string path = writeLargeProfile("large.json", calls);
  ChildResult r = logsWithMemoryLimit(path, baseLimit() + (rlim_t{128} << 20));
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find(": 306000 events\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("54000 compiled calls that did not compile: 4860.000 ms, of which their "
                       "steps 3240.000 ms (66.7 %"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find(row(54000 * 15.0, 100 * 15 / 90.0, 54000, "k0")), std::string::npos)
      << r.out;
  std::filesystem::remove(path);
}

// Out of memory is an rcjit Error that names the file: exit 1, never an uncaught bad_alloc.
TEST(ProfileSummary, OutOfMemoryIsAnErrorNamingTheFile) {
  const std::string path = writeLargeProfile("oom.json", 60000);
  ChildResult r = logsWithMemoryLimit(path, baseLimit() + (rlim_t{2} << 20));
  EXPECT_EQ(r.rc, 1) << r.out << r.err;
  EXPECT_NE(r.err.find("out of memory while summarizing the profile " + path), std::string::npos)
      << r.err;
  std::filesystem::remove(path);
}

// A FIFO with no writer would block an open for reading forever: refused by what it is.
TEST(ProfileSummary, AFifoIsRefusedWithoutBlocking) {
  const std::string fifo = tempPath("fifo");
  std::filesystem::remove(fifo);
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  std::ostringstream out, err;
  EXPECT_EQ(rcjit::tools::logsCommand({fifo}, out, err), 1);
  EXPECT_NE(err.str().find("cannot read trace file '" + fifo + "': it is a FIFO"),
            std::string::npos)
      << err.str();
  std::filesystem::remove(fifo);
}

} // namespace
