#include "scaling/scaling_points.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

#include "core/error.h"

namespace hlm {
namespace {

std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t\r") - b + 1);
}

std::vector<std::string> split_csv_line(const std::string& line) {
  std::vector<std::string> cells;
  std::string cell;
  std::istringstream in(line);
  while (std::getline(in, cell, ',')) cells.push_back(trim(cell));
  if (!line.empty() && line.back() == ',') cells.push_back("");
  return cells;
}

}  // namespace

std::vector<ScalingPoint> parse_scaling_points(const std::string& text, const std::string& source) {
  std::istringstream in(text);
  std::string line;
  int64_t line_no = 0;
  // Header: the first non-empty line.
  std::vector<std::string> header;
  while (std::getline(in, line)) {
    ++line_no;
    if (!trim(line).empty()) {
      header = split_csv_line(line);
      break;
    }
  }
  HLM_CHECK_INPUT(!header.empty(), source, ": empty file (expected a header with columns arch,N,D,loss)");
  const auto column = [&](const std::string& name) {
    const auto it = std::find(header.begin(), header.end(), name);
    HLM_CHECK_INPUT(it != header.end(), source, ": missing column \"", name,
                    "\" (the header must name arch, N, D and loss)");
    return static_cast<size_t>(it - header.begin());
  };
  const size_t c_arch = column("arch"), c_n = column("N"), c_d = column("D"), c_loss = column("loss");
  const size_t needed = std::max({c_arch, c_n, c_d, c_loss}) + 1;

  std::vector<ScalingPoint> points;
  while (std::getline(in, line)) {
    ++line_no;
    if (trim(line).empty()) continue;
    const std::vector<std::string> cells = split_csv_line(line);
    HLM_CHECK_INPUT(cells.size() >= needed, source, ":", line_no, ": ", cells.size(), " columns, expected at least ",
                    needed);
    const auto number = [&](size_t c, const char* name) {
      const std::string& s = cells[c];
      size_t used = 0;
      double v = 0;
      try {
        v = std::stod(s, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      HLM_CHECK_INPUT(!s.empty() && used == s.size(), source, ":", line_no, ": column ", name, ": \"", s,
                      "\" is not a number");
      HLM_CHECK_INPUT(std::isfinite(v) && v > 0, source, ":", line_no, ": column ", name,
                      " must be a finite positive number, got ", s);
      return v;
    };
    ScalingPoint p;
    p.arch = cells[c_arch];
    HLM_CHECK_INPUT(!p.arch.empty(), source, ":", line_no, ": column arch is empty");
    p.N = number(c_n, "N");
    p.D = number(c_d, "D");
    p.loss = number(c_loss, "loss");
    points.push_back(std::move(p));
  }
  HLM_CHECK_INPUT(!points.empty(), source, ": no data rows after the header");
  return points;
}

std::vector<ScalingPoint> read_scaling_points(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  HLM_CHECK_INPUT(in.good(), "--points: cannot open ", path.string());
  std::ostringstream text;
  text << in.rdbuf();
  return parse_scaling_points(text.str(), path.string());
}

std::vector<std::string> scaling_architectures(const std::vector<ScalingPoint>& points) {
  std::vector<std::string> archs;
  for (const ScalingPoint& p : points)
    if (std::find(archs.begin(), archs.end(), p.arch) == archs.end()) archs.push_back(p.arch);
  return archs;
}

std::vector<ScalingPoint> scaling_points_of(const std::vector<ScalingPoint>& points, const std::string& arch) {
  std::vector<ScalingPoint> out;
  for (const ScalingPoint& p : points)
    if (p.arch == arch) out.push_back(p);
  return out;
}

}  // namespace hlm
