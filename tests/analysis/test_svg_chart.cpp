// svg_chart: well-formed self-contained SVG with title, legend, markers and bars; size mismatches are input errors.
#include <gtest/gtest.h>

#include <cmath>

#include "analysis/svg_chart.h"
#include "core/error.h"

namespace hlm {
namespace {

size_t count_of(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t p = text.find(what); p != std::string::npos; p = text.find(what, p + 1)) ++n;
  return n;
}

TEST(SvgChart, LineChartHasSeriesLegendAndMarkers) {
  LineChart c;
  c.title = "SoftCKA <attn_out> & more";
  c.x_label = "layer";
  c.y_label = "SoftCKA";
  c.series = {{"fra_Latn", {0, 1, 2, 3}, {0.1, 0.5, 0.7, 0.9}}, {"mean", {0, 1, 2, 3}, {0.2, NAN, 0.6, 0.8}}};
  c.marker_x = {1, 3};
  const std::string svg = svg_line_chart(c);
  EXPECT_EQ(svg.rfind("<svg xmlns=\"http://www.w3.org/2000/svg\"", 0), 0u);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
  EXPECT_NE(svg.find("SoftCKA &lt;attn_out&gt; &amp; more"), std::string::npos);  // escaped title
  EXPECT_NE(svg.find(">fra_Latn</text>"), std::string::npos);                      // legend entries
  EXPECT_NE(svg.find(">mean</text>"), std::string::npos);
  EXPECT_EQ(count_of(svg, "stroke-dasharray=\"2,3\""), 2u);  // one dotted line per marker
  // The NaN breaks the second series into two polylines: 1 + 2 in all.
  EXPECT_EQ(count_of(svg, "<polyline"), 3u);
  EXPECT_EQ(count_of(svg, "<circle"), 7u);
  EXPECT_EQ(svg.find("nan"), std::string::npos);
}

TEST(SvgChart, LineChartHonoursExplicitRangeAndEmptyInput) {
  LineChart c;
  c.series = {{"a", {0, 1}, {0.5, 0.5}}};  // flat data: the range must still be usable
  c.y_min = 0.0;
  c.y_max = 1.0;
  const std::string svg = svg_line_chart(c);
  EXPECT_NE(svg.find(">1.0</text>"), std::string::npos);  // a tick at y_max
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
  EXPECT_NE(svg_line_chart(LineChart{}).find("</svg>"), std::string::npos);
}

TEST(SvgChart, BarChartDrawsOneBarPerSeriesPerCategory) {
  BarChart c;
  c.title = "inflation";
  c.y_label = "tokens / English tokens";
  c.categories = {"eng_Latn", "fra_Latn", "hin_Deva"};
  c.series = {{"bytes", {}, {1.0, 1.2, 2.9}}, {"bpe", {}, {1.0, 1.3, 4.1}}};
  c.reference_y = 1.0;
  const std::string svg = svg_bar_chart(c);
  EXPECT_EQ(count_of(svg, "<title>"), 6u);                  // one tooltip per bar
  EXPECT_EQ(count_of(svg, "stroke-dasharray=\"6,4\""), 1u);  // the reference line
  EXPECT_NE(svg.find(">hin_Deva</text>"), std::string::npos);
}

TEST(SvgChart, SizeMismatchesAreInputErrors) {
  LineChart line;
  line.series = {{"a", {0, 1, 2}, {1, 2}}};
  EXPECT_THROW(svg_line_chart(line), Error);
  BarChart bar;
  bar.categories = {"x", "y"};
  bar.series = {{"a", {}, {1}}};
  EXPECT_THROW(svg_bar_chart(bar), Error);
}

}  // namespace
}  // namespace hlm
