// Summary statistics of timed samples (`rcjit bench`, `rcjit train`): median, quartiles, min, max,
// and when their spread is too large to trust the median.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace rcjit::tools {

/// The order statistics of a set of timings. Quartiles (and the median) interpolate linearly
/// between order statistics, as numpy's default percentile does.
struct Spread {
  int n = 0;
  double median = 0, q1 = 0, q3 = 0, min = 0, max = 0;
  double iqr() const { return q3 - q1; }
};

/// The Spread of `samples`; an rcjit::Error when there are none.
Spread summarize(std::vector<double> samples);

/// Why the median of `s` should not be trusted, or "" when the spread is small: the IQR is
/// more than 10 % of the median ("IQR 15 % of the median"), and/or the slowest sample is more
/// than 3x the median ("max 4.1x the median"), joined by ", ".
std::string spreadProblem(const Spread &s);

/// The warning line (with its "\n") that names `row` ("Full compilation b=1x128") when its
/// spread is a problem, or "".
std::string spreadWarning(const std::string &row, const Spread &s);

/// The warning line (with its "\n") that names `row` when the work pool packed its threads
/// for `packed` of its `jobs` jobs `during` ("in the timed calls"), or "" when packed is 0.
std::string packedWarning(const std::string &row, int64_t packed, int64_t jobs,
                          const std::string &during);

/// `s` as the --json files hold it: {"n", "median", "q1", "q3", "iqr", "min", "max"}.
nlohmann::json spreadJson(const Spread &s);

} // namespace rcjit::tools
