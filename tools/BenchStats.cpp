// Quartiles and spread warnings of timed samples.
#include "tools/BenchStats.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

#include <rcjit/rcjit.h>

namespace rcjit::tools {

namespace {

// The q-quantile of sorted `v` (0 <= q <= 1), interpolated between its neighbours.
double quantile(const std::vector<double> &v, double q) {
  double at = q * static_cast<double>(v.size() - 1);
  size_t lo = static_cast<size_t>(std::floor(at));
  size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (at - static_cast<double>(lo)) * (v[hi] - v[lo]);
}

} // namespace

Spread summarize(std::vector<double> samples) {
  if (samples.empty()) throw Error("no timings to summarize");
  std::sort(samples.begin(), samples.end());
  Spread s;
  s.n = static_cast<int>(samples.size());
  s.min = samples.front();
  s.max = samples.back();
  s.q1 = quantile(samples, 0.25);
  s.median = quantile(samples, 0.5);
  s.q3 = quantile(samples, 0.75);
  return s;
}

std::string spreadProblem(const Spread &s) {
  if (s.median <= 0) return "";
  std::string why;
  char buf[96];
  if (s.iqr() > 0.10 * s.median) {
    std::snprintf(buf, sizeof buf, "IQR %.0f %% of the median", 100 * s.iqr() / s.median);
    why = buf;
  }
  if (s.max > 3 * s.median) {
    std::snprintf(buf, sizeof buf, "max %.1fx the median", s.max / s.median);
    why += (why.empty() ? "" : ", ") + std::string(buf);
  }
  return why;
}

std::string spreadWarning(const std::string &row, const Spread &s) {
  const std::string why = spreadProblem(s);
  if (why.empty()) return "";
  return "warning: " + row + ": the calls' times spread widely (" + why +
         "): the median may not be typical; a busy machine? rerun with more --reps\n";
}

std::string packedWarning(const std::string &row, int64_t packed, int64_t jobs,
                          const std::string &during) {
  if (packed <= 0) return "";
  return "warning: " + row + ": the work pool packed its threads onto fewer CPUs for " +
         std::to_string(packed) + " of its " + std::to_string(jobs) + " jobs " + during +
         " (other tasks kept every CPU busy): a busy machine's times (RCJIT_LOGS=perf_hints "
         "says when)\n";
}

nlohmann::json spreadJson(const Spread &s) {
  return {{"n", s.n},       {"median", s.median}, {"q1", s.q1},  {"q3", s.q3},
          {"iqr", s.iqr()}, {"min", s.min},       {"max", s.max}};
}

} // namespace rcjit::tools
