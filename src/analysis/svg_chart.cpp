// SVG drawing for svg_chart.h. Geometry: a fixed canvas with the plot area on the left and the legend in a column
// on the right; data coordinates map linearly into the plot area. Ticks use the 1-2-5 "nice number" rule.
#include "analysis/svg_chart.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "core/error.h"

namespace hlm {
namespace {

constexpr double kWidth = 860, kHeight = 480;
// Plot area inside the canvas; the right margin holds the legend.
constexpr double kLeft = 70, kRight = 640, kTop = 40, kBottom = 420;
constexpr double kLegendX = 655;

// Colour per series (cycled); distinguishable and readable on white.
constexpr const char* kPalette[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b",
                                    "#e377c2", "#7f7f7f", "#bcbd22", "#17becf", "#393b79", "#637939"};
constexpr size_t kPaletteSize = sizeof(kPalette) / sizeof(kPalette[0]);

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", v);
  return buf;
}

std::string tick_label(double v, double step) {
  char buf[32];
  const int decimals = step >= 1 ? 0 : std::min(6, static_cast<int>(std::ceil(-std::log10(step) - 1e-9)));
  std::snprintf(buf, sizeof buf, "%.*f", decimals, std::abs(v) < step * 1e-9 ? 0.0 : v);
  return buf;
}

struct Range {
  double lo, hi;
};

// Widens a degenerate range so the scale is well defined.
Range padded(Range r) {
  if (!(r.hi > r.lo)) {
    const double pad = r.lo == 0 ? 1.0 : std::abs(r.lo) * 0.1;
    return {r.lo - pad, r.hi + pad};
  }
  return r;
}

// Tick step from the 1-2-5 series giving about `target` ticks over the range.
double nice_step(Range r, int target) {
  const double raw = (r.hi - r.lo) / target;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  for (double f : {1.0, 2.0, 5.0, 10.0})
    if (raw <= f * mag) return f * mag;
  return 10 * mag;
}

struct Axis {
  Range data;
  double px_lo, px_hi;  // pixel positions of data.lo and data.hi
  double map(double v) const { return px_lo + (v - data.lo) / (data.hi - data.lo) * (px_hi - px_lo); }
};

void draw_frame(std::ostringstream& os, const std::string& title, const std::string& x_label,
                const std::string& y_label) {
  os << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << kWidth << "\" height=\"" << kHeight
     << "\" viewBox=\"0 0 " << kWidth << ' ' << kHeight << "\" font-family=\"sans-serif\" font-size=\"12\">\n"
     << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
     << "<text x=\"" << num((kLeft + kRight) / 2) << "\" y=\"22\" text-anchor=\"middle\" font-size=\"15\">"
     << xml_escape(title) << "</text>\n"
     << "<text x=\"" << num((kLeft + kRight) / 2) << "\" y=\"" << num(kHeight - 18)
     << "\" text-anchor=\"middle\">" << xml_escape(x_label) << "</text>\n"
     << "<text transform=\"translate(18," << num((kTop + kBottom) / 2)
     << ") rotate(-90)\" text-anchor=\"middle\">" << xml_escape(y_label) << "</text>\n"
     << "<rect x=\"" << kLeft << "\" y=\"" << kTop << "\" width=\"" << kRight - kLeft << "\" height=\""
     << kBottom - kTop << "\" fill=\"none\" stroke=\"black\"/>\n";
}

// Horizontal grid lines and labels of the y axis.
void draw_y_ticks(std::ostringstream& os, const Axis& y) {
  const double step = nice_step(y.data, 6);
  for (double v = std::ceil(y.data.lo / step - 1e-9) * step; v <= y.data.hi + step * 1e-9; v += step) {
    const double py = y.map(v);
    os << "<line x1=\"" << kLeft << "\" x2=\"" << kRight << "\" y1=\"" << num(py) << "\" y2=\"" << num(py)
       << "\" stroke=\"#e0e0e0\"/>\n"
       << "<text x=\"" << kLeft - 6 << "\" y=\"" << num(py + 4) << "\" text-anchor=\"end\">" << tick_label(v, step)
       << "</text>\n";
  }
}

std::string dash_attribute(const ChartSeries& s) {
  return s.dash.empty() ? std::string() : " stroke-dasharray=\"" + xml_escape(s.dash) + "\"";
}

void draw_legend(std::ostringstream& os, const std::vector<ChartSeries>& series, bool as_bars) {
  double py = kTop + 8;
  for (size_t s = 0; s < series.size(); ++s, py += 18) {
    const std::string colour =
        as_bars || series[s].colour.empty() ? kPalette[s % kPaletteSize] : xml_escape(series[s].colour);
    if (as_bars)
      os << "<rect x=\"" << kLegendX << "\" y=\"" << num(py - 5) << "\" width=\"14\" height=\"10\" fill=\"" << colour
         << "\"/>\n";
    else
      os << "<line x1=\"" << kLegendX << "\" x2=\"" << kLegendX + 16 << "\" y1=\"" << num(py) << "\" y2=\"" << num(py)
         << "\" stroke=\"" << colour << "\" stroke-width=\"2\"" << dash_attribute(series[s]) << "/>\n";
    os << "<text x=\"" << kLegendX + 22 << "\" y=\"" << num(py + 4) << "\">" << xml_escape(series[s].label)
       << "</text>\n";
  }
}

Range y_range_of(const std::vector<ChartSeries>& series, std::optional<double> y_min, std::optional<double> y_max,
                 std::optional<double> extra) {
  double lo = INFINITY, hi = -INFINITY;
  for (const ChartSeries& s : series)
    for (double v : s.y)
      if (std::isfinite(v)) lo = std::min(lo, v), hi = std::max(hi, v);
  if (extra) lo = std::min(lo, *extra), hi = std::max(hi, *extra);
  if (!std::isfinite(lo)) lo = 0, hi = 1;  // no data at all: an empty unit frame
  return padded({y_min.value_or(lo), y_max.value_or(hi)});
}

}  // namespace

std::string xml_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string svg_line_chart(const LineChart& chart) {
  double x_lo = INFINITY, x_hi = -INFINITY;
  for (const ChartSeries& s : chart.series) {
    HLM_CHECK_INPUT(s.x.size() == s.y.size(), "line chart \"", chart.title, "\": series \"", s.label, "\" has ",
                    s.x.size(), " x values but ", s.y.size(), " y values");
    for (double v : s.x)
      if (std::isfinite(v)) x_lo = std::min(x_lo, v), x_hi = std::max(x_hi, v);
  }
  for (double v : chart.marker_x) x_lo = std::min(x_lo, v), x_hi = std::max(x_hi, v);
  if (!std::isfinite(x_lo)) x_lo = 0, x_hi = 1;
  const Axis x{padded({x_lo, x_hi}), kLeft + 10, kRight - 10};
  const Axis y{y_range_of(chart.series, chart.y_min, chart.y_max, std::nullopt), kBottom - 8, kTop + 8};

  std::ostringstream os;
  draw_frame(os, chart.title, chart.x_label, chart.y_label);
  draw_y_ticks(os, y);
  // Integer x data (layer indices) gets integer ticks.
  bool integer_x = true;
  for (const ChartSeries& s : chart.series)
    for (double v : s.x) integer_x = integer_x && (!std::isfinite(v) || v == std::round(v));
  const double x_step = integer_x ? std::max(1.0, nice_step(x.data, 10)) : nice_step(x.data, 10);
  for (double v = std::ceil(x.data.lo / x_step - 1e-9) * x_step; v <= x.data.hi + x_step * 1e-9; v += x_step)
    os << "<text x=\"" << num(x.map(v)) << "\" y=\"" << kBottom + 16 << "\" text-anchor=\"middle\">"
       << tick_label(v, x_step) << "</text>\n";
  for (double m : chart.marker_x)
    os << "<line x1=\"" << num(x.map(m)) << "\" x2=\"" << num(x.map(m)) << "\" y1=\"" << kTop << "\" y2=\""
       << kBottom << "\" stroke=\"#555\" stroke-dasharray=\"2,3\"/>\n";
  // Clip to the plot area so explicit y_min/y_max may cut lines.
  os << "<clipPath id=\"plot\"><rect x=\"" << kLeft << "\" y=\"" << kTop << "\" width=\"" << kRight - kLeft
     << "\" height=\"" << kBottom - kTop << "\"/></clipPath>\n<g clip-path=\"url(#plot)\">\n";
  for (size_t s = 0; s < chart.series.size(); ++s) {
    const ChartSeries& ser = chart.series[s];
    const std::string colour = ser.colour.empty() ? kPalette[s % kPaletteSize] : xml_escape(ser.colour);
    std::string points;
    auto flush = [&] {
      if (!points.empty())
        os << "<polyline fill=\"none\" stroke=\"" << colour << "\" stroke-width=\"2\"" << dash_attribute(ser)
           << " points=\"" << points << "\"/>\n";
      points.clear();
    };
    for (size_t i = 0; i < ser.x.size(); ++i) {
      if (!std::isfinite(ser.x[i]) || !std::isfinite(ser.y[i])) {
        flush();  // a gap breaks the line
        continue;
      }
      points += num(x.map(ser.x[i])) + "," + num(y.map(ser.y[i])) + " ";
      os << "<circle cx=\"" << num(x.map(ser.x[i])) << "\" cy=\"" << num(y.map(ser.y[i])) << "\" r=\"2.5\" fill=\""
         << colour << "\"/>\n";
    }
    flush();
  }
  os << "</g>\n";
  draw_legend(os, chart.series, /*as_bars=*/false);
  os << "</svg>\n";
  return os.str();
}

std::string svg_bar_chart(const BarChart& chart) {
  for (const ChartSeries& s : chart.series)
    HLM_CHECK_INPUT(s.y.size() == chart.categories.size(), "bar chart \"", chart.title, "\": series \"", s.label,
                    "\" has ", s.y.size(), " values for ", chart.categories.size(), " categories");
  // Bars grow from 0, so 0 is always inside the range.
  Range yr = y_range_of(chart.series, std::nullopt, std::nullopt, chart.reference_y);
  yr = padded({std::min(yr.lo, 0.0), std::max(yr.hi, 0.0)});
  const Axis y{yr, kBottom, kTop + 8};

  std::ostringstream os;
  draw_frame(os, chart.title, "", chart.y_label);
  draw_y_ticks(os, y);
  const size_t n_cat = std::max<size_t>(chart.categories.size(), 1);
  const size_t n_ser = std::max<size_t>(chart.series.size(), 1);
  const double group_w = (kRight - kLeft) / static_cast<double>(n_cat);
  const double bar_w = group_w * 0.8 / static_cast<double>(n_ser);
  for (size_t c = 0; c < chart.categories.size(); ++c) {
    const double gx = kLeft + group_w * static_cast<double>(c) + group_w * 0.1;
    for (size_t s = 0; s < chart.series.size(); ++s) {
      const double v = chart.series[s].y[c];
      if (!std::isfinite(v)) continue;
      const double top = std::min(y.map(v), y.map(0)), h = std::abs(y.map(v) - y.map(0));
      os << "<rect x=\"" << num(gx + bar_w * static_cast<double>(s)) << "\" y=\"" << num(top) << "\" width=\""
         << num(bar_w) << "\" height=\"" << num(h) << "\" fill=\"" << kPalette[s % kPaletteSize] << "\"><title>"
         << xml_escape(chart.series[s].label + " / " + chart.categories[c]) << ": " << v << "</title></rect>\n";
    }
    os << "<text x=\"" << num(gx + group_w * 0.4) << "\" y=\"" << kBottom + 16 << "\" text-anchor=\"middle\">"
       << xml_escape(chart.categories[c]) << "</text>\n";
  }
  if (chart.reference_y)
    os << "<line x1=\"" << kLeft << "\" x2=\"" << kRight << "\" y1=\"" << num(y.map(*chart.reference_y))
       << "\" y2=\"" << num(y.map(*chart.reference_y)) << "\" stroke=\"black\" stroke-dasharray=\"6,4\"/>\n";
  draw_legend(os, chart.series, /*as_bars=*/true);
  os << "</svg>\n";
  return os.str();
}

}  // namespace hlm
