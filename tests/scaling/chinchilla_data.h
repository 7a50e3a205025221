// The 240 Chinchilla points of ../shared/docs/evals.md §4.5: Epoch AI's extraction of Hoffmann et al. 2022 Figure 4
// (epoch-research/analyzing-chinchilla data/svg_extracted_data.csv @ 9225883), kept outside this repository at
// ../shared/data/chinchilla/svg_extracted_data.csv (fetched data files stay under shared/). The path can be
// overridden with HLM_CHINCHILLA_CSV. N = "Model Size", D = "Training FLOP" / (6N), L = "loss"; the 5 rows with the
// highest loss are dropped (keep L < the 5th-largest loss) -> 240 points. Tests that need them skip, saying so, when
// the file is absent.
#pragma once
#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "scaling/chinchilla_fit.h"

namespace hlm::test {

inline std::filesystem::path chinchilla_csv_path() {
  if (const char* env = std::getenv("HLM_CHINCHILLA_CSV")) return env;
  // HLM_GOLDEN_DIR is <repo>/tests/golden (absolute; __FILE__ may be relative under ccache's base_dir).
  return std::filesystem::path(HLM_GOLDEN_DIR) / "../../../shared/data/chinchilla/svg_extracted_data.csv";
}

// Empty when the file is absent.
inline std::vector<ScalingPoint> chinchilla_points() {
  std::ifstream in(chinchilla_csv_path());
  if (!in) return {};
  std::string line;
  std::getline(in, line);  // x,y,color,Model Size,Training FLOP,hex_color,loss
  std::vector<ScalingPoint> all;
  while (std::getline(in, line)) {
    std::vector<std::string> cells;
    std::stringstream ss(line);
    for (std::string c; std::getline(ss, c, ',');) cells.push_back(c);
    if (cells.size() < 7) continue;
    const double n = std::stod(cells[3]), flops = std::stod(cells[4]), loss = std::stod(cells[6]);
    all.push_back({"chinchilla", n, flops / (6.0 * n), loss});
  }
  std::vector<double> losses;
  for (const ScalingPoint& p : all) losses.push_back(p.loss);
  std::sort(losses.rbegin(), losses.rend());
  if (losses.size() < 5) return {};
  const double fifth_largest = losses[4];
  std::vector<ScalingPoint> kept;
  for (const ScalingPoint& p : all)
    if (p.loss < fifth_largest) kept.push_back(p);
  return kept;
}

}  // namespace hlm::test
