// `rcjit bench --plot`: the benchmark as a self-contained SVG bar chart (no gnuplot needed).
#pragma once
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "tools/BenchStats.h"

namespace rcjit::tools {

/// One compiled mode at one batch size: its inference calls and its first call, split into
/// compile (tracing + compiling) and the rest of the call.
struct PlotBar {
  std::string title; // "Full compilation"
  Spread inference;
  double compileMs = 0, firstRunMs = 0;
};

/// One batch size: a bar per compiled mode, and eager's times as the baseline when eager ran.
struct PlotGroup {
  std::string label; // "b=4x128"
  std::vector<PlotBar> bars;
  std::optional<Spread> eager;
  std::optional<double> eagerFirstMs;
};

struct PlotSpec {
  std::string title;                 // "toy64 inference - f32, batch 1,4 x seq 128, cpu"
  std::vector<std::string> subtitle; // lines under the title: machine, what the marks mean
  std::vector<PlotGroup> groups;
};

/// The chart: two panels (inference per call; the first call as compile + run), a bar per
/// mode with its median, IQR box and min-max whisker, eager's median as a dashed baseline,
/// a legend. Every text lies inside the picture (its width is sized to the longest text).
std::string plotSvg(const PlotSpec &spec);

/// Opens `path` for --plot before the work starts: std::invalid_argument (a usage error)
/// unless it ends in ".svg", an rcjit::Error naming it when it cannot be written. An empty
/// path gives a closed stream (no --plot).
std::ofstream openPlotOutput(const std::string &path);

} // namespace rcjit::tools
