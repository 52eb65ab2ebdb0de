// rcjit_multihost_compare DIST.json ONE.json RTOL: every loss of every mode in DIST (a
// `rcjit train --dist ... --json` run across the namespace hosts) against the same mode's
// loss in ONE (the same training in one process) within RTOL relative; prints the largest
// difference. Exit 0 when all match, 1 when one does not, 2 for bad files.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

int main(int argc, char **argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: rcjit_multihost_compare DIST.json ONE.json RTOL\n");
    return 2;
  }
  nlohmann::json dist, one;
  try {
    dist = nlohmann::json::parse(std::ifstream(argv[1]));
    one = nlohmann::json::parse(std::ifstream(argv[2]));
  } catch (const std::exception &e) {
    std::fprintf(stderr, "compare: cannot read the JSON files: %s\n", e.what());
    return 2;
  }
  const double rtol = std::atof(argv[3]);
  const auto &d = dist["results"], &o = one["results"];
  if (!d.is_array() || d.size() != o.size() || d.empty()) {
    std::fprintf(stderr, "compare: %s and %s have different or no results\n", argv[1], argv[2]);
    return 1;
  }
  double worst = 0;
  bool ok = true;
  for (size_t m = 0; m < d.size(); ++m) {
    const auto &dl = d[m]["losses"], &ol = o[m]["losses"];
    if (d[m]["mode"] != o[m]["mode"] || dl.size() != ol.size() || dl.empty()) {
      std::fprintf(stderr, "compare: result %zu: other mode or number of steps\n", m);
      return 1;
    }
    for (size_t i = 0; i < dl.size(); ++i) {
      const double a = dl[i], b = ol[i];
      const double rel = std::abs(a - b) / std::abs(b);
      worst = std::max(worst, rel);
      if (!(rel <= rtol)) {
        ok = false;
        std::printf("%s step %zu: loss %.9g, one process %.9g (relative %.3g)\n",
                    d[m]["mode"].get<std::string>().c_str(), i + 1, a, b, rel);
      }
    }
  }
  std::printf("compare: %zu modes, largest relative loss difference %.3g (limit %g)\n", d.size(),
              worst, rtol);
  return ok ? 0 : 1;
}
