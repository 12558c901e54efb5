#pragma once
// Charts as inline SVG text, for the self-contained HTML report: axes with ticks and labels, a
// legend, log or linear scales, points with native tooltips (<title>), lines joining a series'
// points, and horizontal reference lines (a measured peak). No script, no external resource.
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace attn::svg {

struct Series {
  std::string name;                             // the legend entry
  std::vector<std::pair<double, double>> points;  // (x, y); sorted by x when joined
  bool joined = true;                           // a line through the points, else points only
};

struct ReferenceLine {
  double y = 0;
  std::string label;
};

struct Chart {
  std::string title;
  std::string x_label, y_label;
  bool log_x = true, log_y = true;
  int log_x_base = 2;    // ticks at powers of this base on a log x axis (2 for sequence lengths)
  // On a log y axis, values <= 0 (e.g. 0 ulps) are drawn at this floor and the note says so.
  double log_y_floor = 0;
  std::string note;      // a line under the chart
  std::vector<Series> series;
  std::vector<ReferenceLine> lines;
};

// The <svg> element (width 720, height 380, viewBox): inline-ready.
std::string render(const Chart& chart);
// Escapes &, <, >, " and ' for XML and HTML text and attributes.
std::string escape(std::string_view text);
// The tick positions of an axis (for tests): log axes at powers of the base (decades get 2 and 5
// added when they span at most two decades), linear axes at 1-2-5 steps from 0 or the minimum.
std::vector<double> ticks(double lo, double hi, bool log, int base);

}  // namespace attn::svg
