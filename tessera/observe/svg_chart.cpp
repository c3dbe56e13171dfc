#include "tessera/observe/svg_chart.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

namespace tessera::observe {

namespace {

std::string fmt(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

// A tick label: short, and without trailing zeros ("0.25", "1.5k", "2M").
std::string label(double v) {
  char buf[32];
  const double a = std::fabs(v);
  if (a >= 1e9) std::snprintf(buf, sizeof buf, "%gG", v / 1e9);
  else if (a >= 1e6) std::snprintf(buf, sizeof buf, "%gM", v / 1e6);
  else if (a >= 1e4) std::snprintf(buf, sizeof buf, "%gk", v / 1e3);
  else std::snprintf(buf, sizeof buf, "%g", std::fabs(v) < 1e-12 ? 0.0 : v);
  return buf;
}

}  // namespace

std::string escape_xml(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '<') out += "&lt;";
    else if (c == '>') out += "&gt;";
    else if (c == '&') out += "&amp;";
    else if (c == '"') out += "&quot;";
    else out += c;
  }
  return out;
}

std::vector<double> nice_ticks(double lo, double hi, int count) {
  if (!(hi > lo)) return {lo};
  const double raw = (hi - lo) / std::max(count, 1);
  const double power = std::pow(10.0, std::floor(std::log10(raw)));
  double step = power;
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (m * power >= raw) {
      step = m * power;
      break;
    }
  std::vector<double> ticks;
  for (double t = std::ceil(lo / step) * step; t <= hi + step * 1e-9 && ticks.size() < 50; t += step) ticks.push_back(t);
  return ticks;
}

std::string render_svg(const Chart& c) {
  const double left = 64, right = 16, top = 32, bottom = 44;
  const double pw = c.width - left - right, ph = c.height - top - bottom;
  double x0 = std::numeric_limits<double>::infinity(), x1 = -x0, y0 = x0, y1 = -x0;
  for (const auto& s : c.series)
    for (const auto& [x, y] : s.points) {
      if (!std::isfinite(x) || !std::isfinite(y)) continue;
      x0 = std::min(x0, x), x1 = std::max(x1, x), y0 = std::min(y0, y), y1 = std::max(y1, y);
    }
  std::string svg = "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"chart\" font-family=\"sans-serif\" width=\"" + std::to_string(c.width) +
                    "\" height=\"" + std::to_string(c.height) + "\" viewBox=\"0 0 " + std::to_string(c.width) + " " +
                    std::to_string(c.height) + "\" role=\"img\" aria-label=\"" + escape_xml(c.title) + "\">\n";
  svg += "<rect width=\"100%\" height=\"100%\" fill=\"#ffffff\"/>\n";
  svg += "<text x=\"" + fmt(left) + "\" y=\"20\" font-size=\"14\" font-weight=\"bold\" fill=\"#222\">" + escape_xml(c.title) +
         "</text>\n";
  if (!std::isfinite(x0)) return svg + "<text x=\"" + fmt(left) + "\" y=\"" + fmt(top + ph / 2) +
                                 "\" font-size=\"12\" fill=\"#888\">no data</text>\n</svg>\n";
  if (c.y_from_zero) y0 = std::min(y0, 0.0);
  if (x1 == x0) x0 -= 0.5, x1 += 0.5;
  if (y1 == y0) y0 -= std::max(std::fabs(y0) * 0.05, 0.5), y1 += std::max(std::fabs(y1) * 0.05, 0.5);
  const double pad = (y1 - y0) * 0.05;
  y1 += pad;
  if (!c.y_from_zero || y0 < 0) y0 -= pad;
  auto sx = [&](double x) { return left + (x - x0) / (x1 - x0) * pw; };
  auto sy = [&](double y) { return top + (1 - (y - y0) / (y1 - y0)) * ph; };
  // Grid and ticks.
  for (double t : nice_ticks(y0, y1, 5)) {
    svg += "<line x1=\"" + fmt(left) + "\" x2=\"" + fmt(left + pw) + "\" y1=\"" + fmt(sy(t)) + "\" y2=\"" + fmt(sy(t)) +
           "\" stroke=\"#e4e4e4\"/>\n";
    svg += "<text x=\"" + fmt(left - 6) + "\" y=\"" + fmt(sy(t) + 4) + "\" font-size=\"11\" text-anchor=\"end\" fill=\"#555\">" +
           label(t) + "</text>\n";
  }
  for (double t : nice_ticks(x0, x1, 8)) {
    svg += "<line x1=\"" + fmt(sx(t)) + "\" x2=\"" + fmt(sx(t)) + "\" y1=\"" + fmt(top + ph) + "\" y2=\"" + fmt(top + ph + 4) +
           "\" stroke=\"#555\"/>\n";
    svg += "<text x=\"" + fmt(sx(t)) + "\" y=\"" + fmt(top + ph + 17) + "\" font-size=\"11\" text-anchor=\"middle\" fill=\"#555\">" +
           label(t) + "</text>\n";
  }
  svg += "<rect x=\"" + fmt(left) + "\" y=\"" + fmt(top) + "\" width=\"" + fmt(pw) + "\" height=\"" + fmt(ph) +
         "\" fill=\"none\" stroke=\"#999\"/>\n";
  svg += "<text x=\"" + fmt(left + pw / 2) + "\" y=\"" + fmt(c.height - 6) + "\" font-size=\"12\" text-anchor=\"middle\" fill=\"#333\">" +
         escape_xml(c.x_label) + "</text>\n";
  svg += "<text transform=\"translate(14," + fmt(top + ph / 2) + ") rotate(-90)\" font-size=\"12\" text-anchor=\"middle\" fill=\"#333\">" +
         escape_xml(c.y_label) + "</text>\n";
  // Series, and the legend at the top right.
  double legend_x = left + pw;
  for (auto it = c.series.rbegin(); it != c.series.rend(); ++it) {
    const Series& s = *it;
    if (s.points.empty()) continue;
    std::string points;
    for (const auto& [x, y] : s.points)
      if (std::isfinite(x) && std::isfinite(y)) points += fmt(sx(x)) + "," + fmt(sy(y)) + " ";
    if (!s.markers)
      svg += "<polyline class=\"series\" data-name=\"" + escape_xml(s.name) + "\" fill=\"none\" stroke=\"" + s.color +
             "\" stroke-width=\"" + fmt(s.width) + "\" points=\"" + points + "\"/>\n";
    else
      for (const auto& [x, y] : s.points)
        if (std::isfinite(x) && std::isfinite(y))
          svg += "<circle class=\"marker\" data-name=\"" + escape_xml(s.name) + "\" cx=\"" + fmt(sx(x)) + "\" cy=\"" + fmt(sy(y)) +
                 "\" r=\"3.5\" fill=\"" + s.color + "\"/>\n";
    const double w = 18 + 7.0 * static_cast<double>(s.name.size());
    legend_x -= w + 10;
    svg += "<rect x=\"" + fmt(legend_x) + "\" y=\"10\" width=\"12\" height=\"4\" fill=\"" + s.color + "\"/>\n";
    svg += "<text x=\"" + fmt(legend_x + 16) + "\" y=\"16\" font-size=\"11\" fill=\"#333\">" + escape_xml(s.name) + "</text>\n";
  }
  return svg + "</svg>\n";
}

}  // namespace tessera::observe
