// Sums a Chrome trace by event name and category, streaming: one pass of a SAX parser that
// aggregates as it reads, then one sort-and-sweep per thread that places steps in calls.
#include "tools/ProfileSummary.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <map>
#include <new>
#include <nlohmann/json.hpp>
#include <numeric>
#include <optional>
#include <unordered_map>
#include <vector>

#include <rcjit/Error.h>

#include "tools/Cli.h"

namespace rcjit::tools {

namespace {

using Json = nlohmann::json;

struct ProfileTotal {
  int count = 0;
  double us = 0;
};

// What the summary needs of a call, a compile or a step: 32 bytes, the name interned.
struct Span {
  double ts = 0, dur = 0;
  int64_t tid = 0;
  uint32_t name = 0;
};

// The totals that need no matching, and the spans that do.
struct ProfileData {
  size_t events = 0; // complete ("X") events
  std::map<std::string, ProfileTotal> byCat, calls, ops;
  std::vector<Span> callSpans, compileSpans, stepSpans; // in file order
  std::vector<std::string> names;                       // Span::name → the event's name
  std::unordered_map<std::string, uint32_t> nameIds;
  std::optional<std::string> malformed; // the first malformed complete event

  uint32_t intern(const std::string &name) {
    auto [it, added] = nameIds.try_emplace(name, static_cast<uint32_t>(names.size()));
    if (added) names.push_back(name);
    return it->second;
  }
};

// One event object's fields, as far as they are read. A required field (name, ts, dur) of
// the wrong JSON type is as good as absent; an optional one (ph, cat, tid) of the wrong type
// makes the event malformed.
struct EventFields {
  std::optional<std::string> name, cat, ph;
  std::optional<double> ts, dur, tid;
  bool phBad = false, catBad = false, tidBad = false;
};

// The SAX handler over {"traceEvents": [ {...}, ... ], ...}: depth 1 is the top object, 2 the
// event array, 3 an event. Values nested inside an event (its "args") are skipped.
class ProfileSax {
public:
  explicit ProfileSax(ProfileData &data) : data_(data) {}

  bool null() { return otherValue(); }
  bool boolean(bool v) { return number(v ? 1.0 : 0.0); } // as json::get<double> reads it
  bool number_integer(int64_t v) { return number(static_cast<double>(v)); }
  bool number_unsigned(uint64_t v) { return number(static_cast<double>(v)); }
  bool number_float(double v, const std::string &) { return number(v); }
  bool string(std::string &v) {
    if (depth_ == 3 && inEvents_ && inEvent_) {
      if (key_ == "name")
        fields_.name = std::move(v);
      else if (key_ == "cat")
        fields_.cat = std::move(v);
      else if (key_ == "ph")
        fields_.ph = std::move(v);
      else if (key_ == "ts" || key_ == "dur" || key_ == "tid")
        wrongType();
    }
    return true;
  }
  bool binary(Json::binary_t &) { return otherValue(); }
  bool start_object(size_t) {
    if (depth_ == 3) otherValue(); // a nested value of an event
    ++depth_;
    if (depth_ == 3 && inEvents_) {
      inEvent_ = true;
      fields_ = EventFields();
      key_.clear();
    }
    return true;
  }
  bool key(std::string &k) {
    if (depth_ == 1) {
      topKey_ = k;
      if (k == "traceEvents") { // the last one counts, as in a JSON object
        data_ = ProfileData();
        sawEvents_ = false;
      }
    }
    if (depth_ == 3) key_ = std::move(k);
    return true;
  }
  bool end_object() {
    if (depth_ == 3 && inEvent_) {
      endEvent();
      inEvent_ = false;
    }
    --depth_;
    return true;
  }
  bool start_array(size_t) {
    if (depth_ == 3) otherValue();
    ++depth_;
    if (depth_ == 2 && topKey_ == "traceEvents") inEvents_ = sawEvents_ = true;
    return true;
  }
  bool end_array() {
    if (depth_ == 2) inEvents_ = false;
    --depth_;
    return true;
  }
  bool parse_error(size_t, const std::string &, const Json::exception &e) {
    error_ = e.what();
    return false;
  }

  const std::string &error() const { return error_; }
  bool sawEvents() const { return sawEvents_; }

private:
  // null, binary, an object or an array: no field the summary reads may be one
  bool otherValue() {
    if (depth_ == 3 && inEvents_ && inEvent_) wrongType();
    return true;
  }
  bool number(double v) {
    if (depth_ != 3 || !inEvents_ || !inEvent_) return true;
    if (key_ == "ts")
      fields_.ts = v;
    else if (key_ == "dur")
      fields_.dur = v;
    else if (key_ == "tid")
      fields_.tid = v;
    else if (key_ == "name" || key_ == "cat" || key_ == "ph")
      wrongType();
    return true;
  }
  // A value of a field the summary reads has the wrong JSON type.
  void wrongType() {
    if (key_ == "name") fields_.name.reset();
    if (key_ == "ts") fields_.ts.reset();
    if (key_ == "dur") fields_.dur.reset();
    fields_.phBad = fields_.phBad || key_ == "ph";
    fields_.catBad = fields_.catBad || key_ == "cat";
    fields_.tidBad = fields_.tidBad || key_ == "tid";
  }

  // A complete event ("ph": "X") is summed; any other is skipped.
  void endEvent() {
    const EventFields &f = fields_;
    const char *bad = f.phBad                    ? "\"ph\" is not a string"
                      : f.ph.value_or("") != "X" ? nullptr
                      : !f.name                  ? "no \"name\" string"
                      : f.catBad                 ? "\"cat\" is not a string"
                      : !f.ts || !f.dur          ? "no \"ts\" and \"dur\" numbers"
                      : f.tidBad                 ? "\"tid\" is not a number"
                                                 : nullptr;
    if (bad) {
      if (!data_.malformed) data_.malformed = bad;
      return;
    }
    if (f.ph.value_or("") != "X") return;
    addEvent(*f.name, f.cat.value_or(""), *f.ts, *f.dur, static_cast<int64_t>(f.tid.value_or(0)));
  }

  void addEvent(const std::string &name, const std::string &cat, double ts, double dur,
                int64_t tid) {
    ++data_.events;
    ProfileTotal &c = data_.byCat[cat];
    ++c.count;
    c.us += dur;
    if (cat == "call") {
      ProfileTotal &t = data_.calls[name];
      ++t.count;
      t.us += dur;
      data_.callSpans.push_back({ts, dur, tid, data_.intern(name)});
    }
    if (cat == "compile") data_.compileSpans.push_back({ts, dur, tid, 0});
    // an eager op inside a call is its work too (Mode::eager, a fallback, a graph break)
    if (cat == "kernel" || cat == "library" || cat == "eager step" || cat == "eager op")
      data_.stepSpans.push_back({ts, dur, tid, data_.intern(name)});
    if (cat == "eager op") {
      ProfileTotal &t = data_.ops[name];
      ++t.count;
      t.us += dur;
    }
  }

  ProfileData &data_;
  int depth_ = 0;
  bool inEvents_ = false, inEvent_ = false, sawEvents_ = false;
  std::string topKey_, key_;
  EventFields fields_;
  std::string error_;
};

ProfileData readProfile(const std::string &path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode))
    throw Error("cannot read " + path + ": not a regular file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("cannot read " + path);
  ProfileData data;
  ProfileSax sax(data);
  // not strict: text after the object is ignored, as `in >> json` does
  const bool ok =
      Json::sax_parse(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>(), &sax,
                      Json::input_format_t::json, false);
  if (!ok) throw Error(path + " is not a JSON profile: " + sax.error());
  if (!sax.sawEvents()) throw Error(path + " has no \"traceEvents\" array");
  if (data.malformed) throw Error(path + ": a malformed event: " + *data.malformed);
  return data;
}

// A step or a compile lies in a call of its thread when it starts at or after the call and
// ends by the call's end (within 1 ns: the two ends are rounded apart).
double endOf(const Span &s) { return s.ts + s.dur; }
double limitOf(const Span &s) { return s.ts + s.dur + 1e-3; }

// Fenwick tree of counts.
struct Counter {
  std::vector<int64_t> tree;
  explicit Counter(size_t n) : tree(n + 1, 0) {}
  void add(size_t i) {
    for (++i; i < tree.size(); i += i & (~i + 1)) ++tree[i];
  }
  int64_t below(size_t i) const { // entries at positions < i
    int64_t n = 0;
    for (; i > 0; i -= i & (~i + 1)) n += tree[i];
    return n;
  }
};

// The spans of one thread, in ts order (index lists into the file-order vectors).
struct ThreadSpans {
  std::vector<uint32_t> calls, compiles, steps;
};

std::map<int64_t, ThreadSpans> byThread(const ProfileData &d) {
  std::map<int64_t, ThreadSpans> out;
  auto place = [&out](const std::vector<Span> &spans, std::vector<uint32_t> ThreadSpans::*list) {
    for (uint32_t i = 0; i < spans.size(); ++i) (out[spans[i].tid].*list).push_back(i);
    for (auto &[tid, t] : out) {
      // by start, ties in recorded order (std::stable_sort would do, but libstdc++ 12's
      // trips clang 19's deprecation warning in the sanitizer and fuzz builds)
      std::sort((t.*list).begin(), (t.*list).end(), [&spans](uint32_t a, uint32_t b) {
        return spans[a].ts < spans[b].ts || (spans[a].ts == spans[b].ts && a < b);
      });
    }
  };
  place(d.callSpans, &ThreadSpans::calls);
  place(d.compileSpans, &ThreadSpans::compiles);
  place(d.stepSpans, &ThreadSpans::steps);
  return out;
}

// Steady calls: no compile event inside. A compile lies in call c when it starts at or after
// c and ends by c's end: the earliest end among the compiles starting at or after c decides.
void markSteady(const ProfileData &d, const ThreadSpans &t, std::vector<char> &steady) {
  std::vector<double> minEnd(t.compiles.size() + 1, HUGE_VAL);
  for (size_t i = t.compiles.size(); i-- > 0;)
    minEnd[i] = std::min(minEnd[i + 1], endOf(d.compileSpans[t.compiles[i]]));
  for (uint32_t c : t.calls) {
    const Span &call = d.callSpans[c];
    auto first =
        std::lower_bound(t.compiles.begin(), t.compiles.end(), call.ts,
                         [&d](uint32_t k, double ts) { return d.compileSpans[k].ts < ts; });
    steady[c] = !(minEnd[static_cast<size_t>(first - t.compiles.begin())] <= limitOf(call));
  }
}

// For each step of the thread, how many steady calls hold it: the calls starting at or before
// it (swept in ts order) whose end limit is at or after its end.
void countHolders(const ProfileData &d, const ThreadSpans &t, const std::vector<char> &steady,
                  std::vector<int64_t> &holders) {
  std::vector<double> limits;
  for (uint32_t c : t.calls)
    if (steady[c]) limits.push_back(limitOf(d.callSpans[c]));
  std::sort(limits.begin(), limits.end());
  Counter inserted(limits.size());
  int64_t n = 0;
  size_t next = 0;
  for (uint32_t s : t.steps) {
    const Span &step = d.stepSpans[s];
    for (; next < t.calls.size() && d.callSpans[t.calls[next]].ts <= step.ts; ++next) {
      const uint32_t c = t.calls[next];
      if (!steady[c]) continue;
      const double lim = limitOf(d.callSpans[c]);
      inserted.add(static_cast<size_t>(std::lower_bound(limits.begin(), limits.end(), lim) -
                                       limits.begin()));
      ++n;
    }
    const size_t before = static_cast<size_t>(
        std::lower_bound(limits.begin(), limits.end(), endOf(step)) - limits.begin());
    holders[s] = n - inserted.below(before);
  }
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
                  callUs > 0 ? 100 * t.us / callUs : 0.0, t.count, t.us / t.count,
                  controlEscaped(shown).c_str());
    out << line;
  }
  if (rows.size() > static_cast<size_t>(top))
    out << "  (" << rows.size() - static_cast<size_t>(top) << " more)\n";
}

void printSummary(const std::string &path, const ProfileData &d, std::ostream &out, int top) {
  std::vector<char> steady(d.callSpans.size(), 0);
  std::vector<int64_t> holders(d.stepSpans.size(), 0);
  for (const auto &[tid, t] : byThread(d)) {
    markSteady(d, t, steady);
    countHolders(d, t, steady, holders);
  }
  // steady calls (no compile inside): their time, and the steps they ran
  double callUs = 0, covered = 0;
  int steadyCalls = 0;
  for (size_t c = 0; c < d.callSpans.size(); ++c) {
    if (!steady[c]) continue;
    ++steadyCalls;
    callUs += d.callSpans[c].dur;
  }
  std::map<std::string, ProfileTotal> steps;
  for (size_t s = 0; s < d.stepSpans.size(); ++s) {
    if (holders[s] == 0) continue;
    const Span &step = d.stepSpans[s];
    ProfileTotal &t = steps[d.names[step.name]];
    t.count += static_cast<int>(holders[s]);
    t.us += static_cast<double>(holders[s]) * step.dur;
    covered += static_cast<double>(holders[s]) * step.dur;
  }
  char line[300];
  std::snprintf(line, sizeof line, "profile %s: %zu events\n", path.c_str(), d.events);
  out << line;
  for (const auto &[cat, t] : d.byCat) {
    std::snprintf(line, sizeof line, "  %-11s %7d events, %10.3f ms\n", controlEscaped(cat).c_str(),
                  t.count, t.us / 1e3);
    out << line;
  }
  if (callUs > 0) {
    std::snprintf(line, sizeof line,
                  "%d compiled calls that did not compile: %.3f ms, of which their steps %.3f "
                  "ms (%.1f %%; the rest is guards, dispatch and output allocation)\n",
                  steadyCalls, callUs / 1e3, covered / 1e3, 100 * covered / callUs);
    out << line;
  }
  printTopTotals(out, "calls by total time (first calls include their compile):", d.calls, 0, top);
  if (!steps.empty())
    printTopTotals(out,
                   "steps and eager ops of those calls by total time (% of their time):", steps,
                   callUs, top);
  if (!d.ops.empty()) printTopTotals(out, "eager ops by total time:", d.ops, 0, top);
}

} // namespace

bool isChromeTrace(const std::string &path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) return false; // never blocks
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
  try {
    printSummary(path, readProfile(path), out, top);
  } catch (const std::bad_alloc &) {
    throw Error("out of memory while summarizing the profile " + path);
  }
}

} // namespace rcjit::tools
