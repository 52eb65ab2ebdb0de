// Sums a Chrome trace by event name and category.
#include "tools/ProfileSummary.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <vector>

#include <rcjit/Error.h>

namespace rcjit::tools {

namespace {

struct ProfileTotal {
  int count = 0;
  double us = 0;
};

struct ProfileEvent {
  std::string name, cat;
  double ts = 0, dur = 0;
  int64_t tid = 0;
};

std::vector<ProfileEvent> readProfileEvents(const std::string &path) {
  std::ifstream in(path);
  if (!in) throw Error("cannot read " + path);
  nlohmann::json j;
  try {
    in >> j;
  } catch (const nlohmann::json::exception &e) {
    throw Error(path + " is not a JSON profile: " + e.what());
  }
  if (!j.is_object() || !j.contains("traceEvents") || !j["traceEvents"].is_array())
    throw Error(path + " has no \"traceEvents\" array");
  std::vector<ProfileEvent> out;
  for (const auto &e : j["traceEvents"]) {
    if (!e.is_object() || e.value("ph", "") != "X") continue;
    try {
      out.push_back({e.at("name").get<std::string>(), e.value("cat", ""), e.at("ts").get<double>(),
                     e.at("dur").get<double>(), e.value("tid", int64_t{0})});
    } catch (const nlohmann::json::exception &ex) {
      throw Error(path + ": a malformed event: " + ex.what());
    }
  }
  return out;
}

void printTopTotals(std::ostream &out, const char *title,
                    const std::map<std::string, ProfileTotal> &m, double callUs, int top) {
  std::vector<std::pair<std::string, ProfileTotal>> rows(m.begin(), m.end());
  std::sort(rows.begin(), rows.end(),
            [](const auto &a, const auto &b) { return a.second.us > b.second.us; });
  out << title << "\n";
  char line[400];
  for (size_t i = 0; i < rows.size() && static_cast<int>(i) < top; ++i) {
    const auto &[name, t] = rows[i];
    std::string shown = name.size() > 70 ? name.substr(0, 67) + "..." : name;
    std::snprintf(line, sizeof line, "  %10.3f ms %6.1f %%  %7d x %9.1f us  %s\n", t.us / 1e3,
                  callUs > 0 ? 100 * t.us / callUs : 0.0, t.count, t.us / t.count, shown.c_str());
    out << line;
  }
  if (rows.size() > static_cast<size_t>(top))
    out << "  (" << rows.size() - static_cast<size_t>(top) << " more)\n";
}

} // namespace

bool isChromeTrace(const std::string &path) {
  std::ifstream in(path);
  char c = 0;
  while (in.get(c) && std::isspace(static_cast<unsigned char>(c))) {
  }
  if (c != '{') return false;
  std::string head(256, '\0');
  in.read(head.data(), static_cast<std::streamsize>(head.size()));
  return head.find("\"traceEvents\"") != std::string::npos ||
         head.find("\"displayTimeUnit\"") != std::string::npos;
}

void summarizeProfile(const std::string &path, std::ostream &out, int top) {
  std::vector<ProfileEvent> events = readProfileEvents(path);
  std::map<std::string, ProfileTotal> byCat, calls, steps, ops;
  std::vector<const ProfileEvent *> callEvents, compileEvents, stepEvents;
  for (const ProfileEvent &e : events) {
    ProfileTotal &c = byCat[e.cat];
    ++c.count;
    c.us += e.dur;
    if (e.cat == "call") callEvents.push_back(&e);
    if (e.cat == "compile") compileEvents.push_back(&e);
    // an eager op inside a call is its work too (Mode::eager, a fallback, a graph break)
    if (e.cat == "kernel" || e.cat == "library" || e.cat == "eager step" || e.cat == "eager op")
      stepEvents.push_back(&e);
    if (e.cat == "eager op") {
      ProfileTotal &t = ops[e.name];
      ++t.count;
      t.us += e.dur;
    }
  }
  auto within = [](const ProfileEvent *inner, const ProfileEvent *outer) {
    return inner->tid == outer->tid && inner->ts >= outer->ts &&
           inner->ts + inner->dur <= outer->ts + outer->dur + 1e-3;
  };
  // steady calls (no compile inside): their time, and the steps they ran
  double callUs = 0, covered = 0;
  int steady = 0;
  for (const ProfileEvent *c : callEvents) {
    ProfileTotal &ct = calls[c->name];
    ++ct.count;
    ct.us += c->dur;
    bool compiled = false;
    for (const ProfileEvent *k : compileEvents) compiled = compiled || within(k, c);
    if (compiled) continue;
    ++steady;
    callUs += c->dur;
    for (const ProfileEvent *st : stepEvents) {
      if (!within(st, c)) continue;
      covered += st->dur;
      ProfileTotal &t = steps[st->name];
      ++t.count;
      t.us += st->dur;
    }
  }
  char line[300];
  std::snprintf(line, sizeof line, "profile %s: %zu events\n", path.c_str(), events.size());
  out << line;
  for (const auto &[cat, t] : byCat) {
    std::snprintf(line, sizeof line, "  %-11s %7d events, %10.3f ms\n", cat.c_str(), t.count,
                  t.us / 1e3);
    out << line;
  }
  if (callUs > 0) {
    std::snprintf(line, sizeof line,
                  "%d compiled calls that did not compile: %.3f ms, of which their steps %.3f "
                  "ms (%.1f %%; the rest is guards, dispatch and output allocation)\n",
                  steady, callUs / 1e3, covered / 1e3, 100 * covered / callUs);
    out << line;
  }
  printTopTotals(out, "calls by total time (first calls include their compile):", calls, 0, top);
  if (!steps.empty())
    printTopTotals(out,
                   "steps and eager ops of those calls by total time (% of their time):", steps,
                   callUs, top);
  if (!ops.empty()) printTopTotals(out, "eager ops by total time:", ops, 0, top);
}

} // namespace rcjit::tools
