// The 240 Chinchilla points of ../shared/docs/evals.md §4.5 from the 245 of Epoch AI's extraction of Hoffmann et al.
// 2022 Figure 4 (chinchilla_points.inc): N = "Model Size", D = "Training FLOP" / (6N), L = "loss"; the 5 rows with the
// highest loss are dropped (keep L < the 5th-largest loss) -> 240 points.
#pragma once
#include <algorithm>
#include <string>
#include <vector>

#include "scaling/chinchilla_fit.h"

namespace hlm::test {

#include "chinchilla_points.inc"

inline std::vector<ScalingPoint> chinchilla_points() {
  std::vector<ScalingPoint> all;
  for (const auto& row : kChinchillaFigure4) all.push_back({"chinchilla", row[0], row[1] / (6.0 * row[0]), row[2]});
  std::vector<double> losses;
  for (const ScalingPoint& p : all) losses.push_back(p.loss);
  std::sort(losses.rbegin(), losses.rend());
  const double fifth_largest = losses[4];
  std::vector<ScalingPoint> kept;
  for (const ScalingPoint& p : all)
    if (p.loss < fifth_largest) kept.push_back(p);
  return kept;
}

}  // namespace hlm::test
