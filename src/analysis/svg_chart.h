// Self-contained SVG charts for analysis reports (no scripts, no external fonts or styles): a line chart (one
// polyline with point markers per series, optional dotted vertical markers) and a grouped bar chart (one bar per
// series per category, optional dashed reference line). Both draw axes with "nice" ticks, axis labels, a title and a
// legend. Non-finite y values are skipped (a line is broken there). Input errors: a line series whose x and y sizes
// differ, a bar series whose y size differs from the number of categories.
#pragma once
#include <optional>
#include <string>
#include <vector>

namespace hlm {

struct ChartSeries {
  std::string label;
  std::vector<double> x;  // line charts only
  std::vector<double> y;  // line: y[i] at x[i]; bar: y[c] for category c
  std::string dash;       // line charts: SVG stroke-dasharray ("6,4"), "" = solid; keeps coinciding lines apart
  std::string colour;     // line charts: SVG colour ("#1f77b4"); "" = the palette's colour of the series' index
};

struct LineChart {
  std::string title, x_label, y_label;
  std::vector<ChartSeries> series;
  std::vector<double> marker_x;        // dotted vertical lines (e.g. full-attention layers)
  std::optional<double> y_min, y_max;  // default: from the data
};

struct BarChart {
  std::string title, y_label;
  std::vector<std::string> categories;  // x groups (e.g. languages)
  std::vector<ChartSeries> series;      // one bar per series per category; y.size() == categories.size()
  std::optional<double> reference_y;    // dashed horizontal line (e.g. 1.0 = English)
};

// Text escaped for XML/HTML text and attribute values (&, <, >, ").
std::string xml_escape(const std::string& text);

std::string svg_line_chart(const LineChart& chart);  // self-contained SVG text, with a legend
std::string svg_bar_chart(const BarChart& chart);

}  // namespace hlm
