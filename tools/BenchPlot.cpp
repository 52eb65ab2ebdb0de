// The --plot chart of `rcjit bench`, written as SVG text: two bar panels, a legend, a title.
#include "tools/BenchPlot.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <sstream>
#include <stdexcept>

#include <rcjit/rcjit.h>

#include "tools/Cli.h"

namespace rcjit::tools {

namespace {

const char *const kColors[] = {"#4c72b0", "#dd8452", "#55a868", "#c44e52",
                               "#8172b3", "#937860", "#da8bc3", "#8c8c8c"};
constexpr double kBarW = 40, kBarGap = 8, kGroupPad = 24, kAxisW = 64, kPlotH = 300;
// A white outline under a label, so that it stays readable over bars and lines.
const char *const kHalo = " stroke=\"white\" stroke-width=\"3\" paint-order=\"stroke\"";
constexpr double kPanelGap = 40, kMargin = 20, kLegendRow = 18;

// A generous estimate of a text's width in pixels (the chart is sized to fit every text).
double textWidth(const std::string &s, double fontSize) {
  return static_cast<double>(s.size()) * fontSize * 0.62;
}

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

std::string tickText(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

struct Svg {
  std::ostringstream os;
  void text(double x, double y, const std::string &s, double size, const char *anchor = "start",
            const char *extra = "") {
    os << "<text x=\"" << num(x) << "\" y=\"" << num(y) << "\" font-size=\"" << size
       << "\" text-anchor=\"" << anchor << "\"" << extra << ">" << markupEscaped(s) << "</text>\n";
  }
  void rect(double x, double y, double w, double h, const std::string &fill,
            const char *extra = "") {
    os << "<rect x=\"" << num(x) << "\" y=\"" << num(y) << "\" width=\"" << num(w) << "\" height=\""
       << num(std::max(0.0, h)) << "\" fill=\"" << fill << "\"" << extra << "/>\n";
  }
  void line(double x1, double y1, double x2, double y2, const std::string &stroke,
            const char *extra = "") {
    os << "<line x1=\"" << num(x1) << "\" y1=\"" << num(y1) << "\" x2=\"" << num(x2) << "\" y2=\""
       << num(y2) << "\" stroke=\"" << stroke << "\"" << extra << "/>\n";
  }
};

// A round tick step giving about five ticks up to `top`.
double tickStep(double top) {
  double raw = top / 5, p = std::pow(10.0, std::floor(std::log10(raw))), f = raw / p;
  return (f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10) * p;
}

double groupWidth(const PlotGroup &g) {
  double bars = static_cast<double>(std::max<size_t>(1, g.bars.size()));
  return std::max(bars * kBarW + (bars - 1) * kBarGap + 2 * kGroupPad, textWidth(g.label, 11) + 16);
}

double panelWidth(const PlotSpec &spec) {
  double w = kAxisW + 10;
  for (const PlotGroup &g : spec.groups) w += groupWidth(g);
  return w;
}

// One panel at x0: `inference` (per-call spread) or the first call (compile + run stacked).
void drawPanel(Svg &svg, const PlotSpec &spec, const std::vector<std::string> &modes, double x0,
               double y0, bool inference) {
  auto colorOf = [&](const std::string &title) {
    size_t i = std::find(modes.begin(), modes.end(), title) - modes.begin();
    return std::string(kColors[i % std::size(kColors)]);
  };
  double top = 0; // the axis reaches the medians and boxes; whiskers beyond it are clipped
  for (const PlotGroup &g : spec.groups) {
    for (const PlotBar &b : g.bars) {
      top = std::max(top, inference ? b.inference.q3 : b.compileMs + b.firstRunMs);
    }
    if (inference && g.eager) top = std::max(top, g.eager->median);
    if (!inference && g.eagerFirstMs) top = std::max(top, *g.eagerFirstMs);
  }
  if (top <= 0) top = 1;
  const double step = tickStep(top * 1.1);
  top = std::ceil(top * 1.1 / step) * step;
  const double yb = y0 + kPlotH;
  auto yOf = [&](double v) { return yb - std::min(v, top) / top * kPlotH; };
  svg.text(x0 + kAxisW, y0 - 14,
           inference ? "inference: ms per call" : "first call: compile + first run (ms)", 13,
           "start", " font-weight=\"bold\"");
  for (double t = 0; t <= top * 1.0001; t += step) {
    svg.line(x0 + kAxisW, yOf(t), x0 + panelWidth(spec), yOf(t), "#e0e0e0");
    svg.text(x0 + kAxisW - 6, yOf(t) + 4, tickText(t), 11, "end");
  }
  svg.line(x0 + kAxisW, y0, x0 + kAxisW, yb, "#333");
  svg.line(x0 + kAxisW, yb, x0 + panelWidth(spec), yb, "#333");
  double gx = x0 + kAxisW;
  for (const PlotGroup &g : spec.groups) {
    const double gw = groupWidth(g);
    const double barsW = static_cast<double>(g.bars.size()) * (kBarW + kBarGap) - kBarGap;
    double bx = gx + (gw - barsW) / 2;
    for (const PlotBar &b : g.bars) {
      const std::string color = colorOf(b.title);
      const double cx = bx + kBarW / 2;
      double labelY = 0;
      std::string label;
      if (inference) {
        const Spread &s = b.inference;
        svg.rect(bx, yOf(s.median), kBarW, yb - yOf(s.median), color, " fill-opacity=\"0.85\"");
        svg.line(cx, yOf(s.min), cx, yOf(s.max), "#222", " stroke-width=\"1.5\"");
        svg.line(cx - 6, yOf(s.min), cx + 6, yOf(s.min), "#222");
        if (s.max <= top) svg.line(cx - 6, yOf(s.max), cx + 6, yOf(s.max), "#222");
        svg.rect(cx - 6, yOf(s.q3), 12, yOf(s.q1) - yOf(s.q3), "#222", " fill-opacity=\"0.55\"");
        if (s.max > top) {
          svg.text(cx, y0 + 10, "max " + formatMeasured(s.max), 9, "middle", kHalo);
        }
        labelY = std::min(yOf(s.max), yOf(s.q3));
        label = formatMeasured(s.median);
      } else {
        const double total = b.compileMs + b.firstRunMs;
        svg.rect(bx, yOf(b.compileMs), kBarW, yb - yOf(b.compileMs), color);
        svg.rect(bx, yOf(total), kBarW, yOf(b.compileMs) - yOf(total), color,
                 " fill-opacity=\"0.35\"");
        labelY = yOf(total);
        label = formatMeasured(total);
      }
      svg.text(cx, std::max(y0 + 22, labelY - 4), label, 10, "middle", kHalo);
      bx += kBarW + kBarGap;
    }
    std::optional<double> base =
        inference ? (g.eager ? std::optional(g.eager->median) : std::nullopt) : g.eagerFirstMs;
    if (base) {
      svg.line(gx + 4, yOf(*base), gx + gw - 4, yOf(*base), "#111",
               " stroke-width=\"1.5\" stroke-dasharray=\"6 4\"");
      svg.text(gx + 4, yOf(*base) - 4, "eager " + formatMeasured(*base), 10, "start", kHalo);
    }
    svg.text(gx + gw / 2, yb + 16, g.label, 11, "middle");
    gx += gw;
  }
}

} // namespace

std::string plotSvg(const PlotSpec &spec) {
  std::vector<std::string> modes; // legend order: first appearance
  for (const PlotGroup &g : spec.groups) {
    for (const PlotBar &b : g.bars) {
      if (std::find(modes.begin(), modes.end(), b.title) == modes.end()) modes.push_back(b.title);
    }
  }
  const std::vector<std::string> keys = {
      "dashed line: eager, the baseline (left: its median; right: its first call)",
      "left: bar = median, dark box = IQR (the middle half of the calls), whisker = min to max",
      "right: solid = compile (tracing + compiling), pale = the rest of the first call"};
  const double panelW = panelWidth(spec);
  double width = 2 * kMargin + 2 * panelW + kPanelGap;
  width = std::max(width, 2 * kMargin + textWidth(spec.title, 16));
  for (const std::string &s : spec.subtitle)
    width = std::max(width, 2 * kMargin + textWidth(s, 12));
  for (const std::string &k : keys) width = std::max(width, 2 * kMargin + 24 + textWidth(k, 11));
  for (const std::string &m : modes) width = std::max(width, 2 * kMargin + 24 + textWidth(m, 11));
  const double titleH = 30 + 17 * static_cast<double>(spec.subtitle.size());
  const double y0 = titleH + 40;
  const double legendY = y0 + kPlotH + 40;
  const double height = legendY + kLegendRow * static_cast<double>(modes.size() + keys.size()) + 10;

  Svg svg;
  svg.os << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
         << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << num(width) << "\" height=\""
         << num(height) << "\" viewBox=\"0 0 " << num(width) << " " << num(height)
         << "\" font-family=\"sans-serif\">\n";
  svg.rect(0, 0, width, height, "white");
  svg.text(kMargin, 26, spec.title, 16, "start", " font-weight=\"bold\"");
  for (size_t i = 0; i < spec.subtitle.size(); ++i) {
    svg.text(kMargin, 26 + 17 * static_cast<double>(i + 1), spec.subtitle[i], 12, "start",
             " fill=\"#444\"");
  }
  drawPanel(svg, spec, modes, kMargin, y0, true);
  drawPanel(svg, spec, modes, kMargin + panelW + kPanelGap, y0, false);
  double ly = legendY;
  for (size_t i = 0; i < modes.size(); ++i, ly += kLegendRow) {
    svg.rect(kMargin, ly - 10, 14, 12, kColors[i % std::size(kColors)]);
    svg.text(kMargin + 22, ly, modes[i], 11);
  }
  for (const std::string &k : keys) {
    svg.text(kMargin + 22, ly, k, 11, "start", " fill=\"#444\"");
    ly += kLegendRow;
  }
  svg.os << "</svg>\n";
  return svg.os.str();
}

std::ofstream openPlotOutput(const std::string &path) {
  std::ofstream out;
  if (path.empty()) return out;
  const std::string ext = ".svg";
  if (path.size() <= ext.size() || path.compare(path.size() - ext.size(), ext.size(), ext) != 0) {
    throw std::invalid_argument("--plot: '" + path +
                                "' does not end in .svg (the chart is written as SVG)");
  }
  out.open(path);
  if (!out) {
    throw Error("--plot: cannot write " + path + " (" + std::strerror(errno) +
                "; checked before running)");
  }
  return out;
}

} // namespace rcjit::tools
