// Line charts as inline SVG, for the self-contained HTML report of a run (run_report.h): no script,
// no external file, so the page renders the same in any browser and offline.
#pragma once
#include <string>
#include <utility>
#include <vector>

namespace tessera::observe {

struct Series {
  std::string name;
  std::string color;                              // any SVG colour
  std::vector<std::pair<double, double>> points;  // (x, y), x ascending for a line
  bool markers = false;                           // dots at the points (few points: epoch evaluations)
  double width = 1.5;
};

struct Chart {
  std::string title, x_label, y_label;
  std::vector<Series> series;
  int width = 720, height = 300;
  bool y_from_zero = false;  // else the axis fits the data
};

// The <svg> element: axes with rounded ticks, a line (and markers) per series, a legend. Series without
// points are left out; a chart without any point says "no data". Non-finite values are skipped.
std::string render_svg(const Chart& chart);

// Text made safe inside XML and HTML (&, <, >, ").
std::string escape_xml(const std::string& text);

// "nice" tick values covering [lo, hi] (1, 2 or 5 times a power of ten apart), about `count` of them.
std::vector<double> nice_ticks(double lo, double hi, int count);

}  // namespace tessera::observe
