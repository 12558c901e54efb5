#include "reports/svg_chart.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

namespace attn::svg {
namespace {

constexpr double width = 720, height = 380;
constexpr double left = 78, right = 210, top = 34, bottom = 52;
constexpr double plot_w = width - left - right, plot_h = height - top - bottom;

// Colour-blind-friendly palette (Okabe-Ito, then Tableau).
constexpr const char* palette[] = {"#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#8C564B", "#7F7F7F", "#BCBD22", "#17BECF"};

struct Axis {
  double lo = 0, hi = 1;  // in data units
  bool log = false;
  int base = 10;
  double position(double v) const {  // 0..1
    if (log) return (std::log(v) - std::log(lo)) / (std::log(hi) - std::log(lo));
    return (v - lo) / (hi - lo);
  }
};

double nice_step(double span, int target) {
  const double raw = span / target;
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (m * magnitude >= raw) return m * magnitude;
  return 10 * magnitude;
}

Axis make_axis(double lo, double hi, bool log, int base, bool from_zero) {
  Axis a;
  a.log = log;
  a.base = base;
  if (!(lo <= hi)) lo = hi = log ? 1 : 0;
  if (log) {
    const double b = base;
    double elo = std::floor(std::log(lo) / std::log(b) + 1e-9), ehi = std::ceil(std::log(hi) / std::log(b) - 1e-9);
    if (ehi <= elo) ehi = elo + 1;
    a.lo = std::pow(b, elo);
    a.hi = std::pow(b, ehi);
  } else {
    if (from_zero) lo = std::min(lo, 0.0);
    if (hi <= lo) hi = lo + 1;
    const double step = nice_step(hi - lo, 5);
    a.lo = std::floor(lo / step) * step;
    a.hi = std::ceil(hi * 1.05 / step) * step;
  }
  return a;
}

std::string tick_label(double v) {
  if (v == 0) return "0";
  const double a = std::fabs(v);
  if (a >= 1e5 || a < 1e-3) return fmt::format("{:.0e}", v);
  if (a >= 1 && std::fabs(v - std::round(v)) < 1e-9) return fmt::format("{:.0f}", v);
  return fmt::format("{:g}", v);
}

std::string number(double v) { return fmt::format("{:.1f}", v); }

}  // namespace

std::string escape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  return out;
}

std::vector<double> ticks(double lo, double hi, bool log, int base) {
  std::vector<double> t;
  if (log) {
    const double b = base;
    const int elo = static_cast<int>(std::lround(std::log(lo) / std::log(b))), ehi = static_cast<int>(std::lround(std::log(hi) / std::log(b)));
    const int stride = std::max(1, (ehi - elo + 9) / 10);  // at most about ten labels
    for (int e = elo; e <= ehi; e += stride) t.push_back(std::pow(b, e));
    if (base == 10 && ehi - elo <= 2)
      for (int e = elo; e < ehi; ++e)
        for (double m : {2.0, 5.0}) t.push_back(m * std::pow(10.0, e));
    std::sort(t.begin(), t.end());
    return t;
  }
  const double step = nice_step(hi - lo, 5);
  for (double v = lo; v <= hi + step * 1e-9; v += step) t.push_back(std::fabs(v) < step * 1e-9 ? 0.0 : v);
  return t;
}

std::string render(const Chart& c) {
  double xlo = std::numeric_limits<double>::infinity(), xhi = -xlo, ylo = xlo, yhi = -xlo;
  bool floored = false;
  auto y_of = [&](double y) {
    if (c.log_y && !(y > 0)) {
      floored = true;
      return c.log_y_floor > 0 ? c.log_y_floor : 1.0;
    }
    return y;
  };
  for (const auto& s : c.series)
    for (const auto& [x, y0] : s.points) {
      if (!std::isfinite(x) || !std::isfinite(y0) || (c.log_x && x <= 0)) continue;
      const double y = y_of(y0);
      xlo = std::min(xlo, x), xhi = std::max(xhi, x), ylo = std::min(ylo, y), yhi = std::max(yhi, y);
    }
  for (const auto& l : c.lines)
    if (std::isfinite(l.y) && (!c.log_y || l.y > 0)) ylo = std::min(ylo, l.y), yhi = std::max(yhi, l.y);
  const bool empty = !(xlo <= xhi);
  if (empty) xlo = 1, xhi = 2, ylo = 1, yhi = 2;
  const Axis ax = make_axis(xlo, xhi, c.log_x, c.log_x ? c.log_x_base : 10, false);
  const Axis ay = make_axis(ylo, yhi, c.log_y, 10, true);
  auto px = [&](double x) { return left + ax.position(x) * plot_w; };
  auto py = [&](double y) { return top + (1 - ay.position(y)) * plot_h; };

  std::string out = fmt::format(
      "<svg class=\"chart\" width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} {1}\" role=\"img\" "
      "aria-label=\"{2}\">\n<title>{2}</title>\n<rect x=\"0\" y=\"0\" width=\"{0}\" height=\"{1}\" fill=\"#ffffff\"/>\n",
      width, height, escape(c.title));
  out += fmt::format("<text x=\"{}\" y=\"20\" class=\"chart-title\" font-size=\"14\" font-weight=\"bold\">{}</text>\n", number(left),
                     escape(c.title));
  // Grid and ticks.
  for (double t : ticks(ax.lo, ax.hi, ax.log, ax.base)) {
    const double x = px(t);
    out += fmt::format("<line x1=\"{0}\" y1=\"{1}\" x2=\"{0}\" y2=\"{2}\" stroke=\"#e4e4e4\"/>\n", number(x), number(top), number(top + plot_h));
    out += fmt::format("<line x1=\"{0}\" y1=\"{1}\" x2=\"{0}\" y2=\"{2}\" stroke=\"#333\"/>\n", number(x), number(top + plot_h),
                       number(top + plot_h + 5));
    out += fmt::format("<text x=\"{}\" y=\"{}\" font-size=\"11\" text-anchor=\"middle\">{}</text>\n", number(x), number(top + plot_h + 18),
                       escape(tick_label(t)));
  }
  for (double t : ticks(ay.lo, ay.hi, ay.log, 10)) {
    const double y = py(t);
    out += fmt::format("<line x1=\"{0}\" y1=\"{1}\" x2=\"{2}\" y2=\"{1}\" stroke=\"#e4e4e4\"/>\n", number(left), number(y), number(left + plot_w));
    out += fmt::format("<line x1=\"{0}\" y1=\"{1}\" x2=\"{2}\" y2=\"{1}\" stroke=\"#333\"/>\n", number(left - 5), number(y), number(left));
    out += fmt::format("<text x=\"{}\" y=\"{}\" font-size=\"11\" text-anchor=\"end\">{}</text>\n", number(left - 8), number(y + 4),
                       escape(tick_label(t)));
  }
  out += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#333\"/>\n", number(left), number(top),
                     number(plot_w), number(plot_h));
  out += fmt::format("<text x=\"{}\" y=\"{}\" font-size=\"12\" text-anchor=\"middle\">{}{}</text>\n", number(left + plot_w / 2),
                     number(height - 12), escape(c.x_label), c.log_x ? " (log scale)" : "");
  out += fmt::format("<text transform=\"translate(16,{}) rotate(-90)\" font-size=\"12\" text-anchor=\"middle\">{}{}</text>\n",
                     number(top + plot_h / 2), escape(c.y_label), c.log_y ? " (log scale)" : "");
  if (empty)
    out += fmt::format("<text x=\"{}\" y=\"{}\" font-size=\"13\" text-anchor=\"middle\" fill=\"#777\">no data</text>\n",
                       number(left + plot_w / 2), number(top + plot_h / 2));

  // Reference lines (dashed), labelled at their right end inside the plot.
  for (const auto& l : c.lines) {
    if (!std::isfinite(l.y) || (c.log_y && l.y <= 0)) continue;
    const double y = py(l.y);
    out += fmt::format("<line x1=\"{0}\" y1=\"{1}\" x2=\"{2}\" y2=\"{1}\" stroke=\"#B00020\" stroke-width=\"1.5\" stroke-dasharray=\"6 4\"/>\n",
                       number(left), number(y), number(left + plot_w));
    out += fmt::format("<text x=\"{}\" y=\"{}\" font-size=\"11\" text-anchor=\"end\" fill=\"#B00020\">{}</text>\n", number(left + plot_w - 4),
                       number(y - 4), escape(l.label));
  }
  // Series.
  for (std::size_t i = 0; i < c.series.size(); ++i) {
    const auto& s = c.series[i];
    const char* colour = palette[i % std::size(palette)];
    std::vector<std::pair<double, double>> pts;
    for (const auto& [x, y] : s.points)
      if (std::isfinite(x) && std::isfinite(y) && !(c.log_x && x <= 0)) pts.emplace_back(x, y);
    if (s.joined) std::sort(pts.begin(), pts.end());
    if (s.joined && pts.size() > 1) {
      std::string path;
      for (const auto& [x, y] : pts) path += fmt::format("{}{},{}", path.empty() ? "" : " ", number(px(x)), number(py(y_of(y))));
      out += fmt::format("<polyline points=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"1.8\"/>\n", path, colour);
    }
    for (const auto& [x, y] : pts)
      // Unjoined points of several series often coincide (equal errors): earlier series get larger
      // dots, so every series stays visible as a ring around the next.
      out += fmt::format("<circle cx=\"{}\" cy=\"{}\" r=\"{}\" fill=\"{}\"><title>{}: x = {}, y = {}</title></circle>\n", number(px(x)),
                         number(py(y_of(y))), s.joined ? "3.2" : number(3.0 + 2.0 * static_cast<double>(c.series.size() - 1 - i)), colour,
                         escape(s.name), escape(tick_label(x)), escape(fmt::format("{:.4g}", y)));
    // Legend entry.
    const double ly = top + 8 + 16 * static_cast<double>(i);
    out += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"12\" height=\"4\" fill=\"{}\"/>\n", number(left + plot_w + 12), number(ly - 4), colour);
    std::string name = s.name.size() > 34 ? s.name.substr(0, 33) + "…" : s.name;
    out += fmt::format("<text x=\"{}\" y=\"{}\" font-size=\"11\">{}</text>\n", number(left + plot_w + 28), number(ly), escape(name));
  }
  std::string note = c.note;
  if (floored) note += fmt::format("{}values of 0 are drawn at {}", note.empty() ? "" : "; ", tick_label(c.log_y_floor > 0 ? c.log_y_floor : 1.0));
  if (!note.empty())
    out += fmt::format("<text x=\"{}\" y=\"{}\" font-size=\"10\" fill=\"#555\">{}</text>\n", number(left + plot_w + 12), number(top + plot_h),
                       escape(note));
  out += "</svg>\n";
  return out;
}

}  // namespace attn::svg
