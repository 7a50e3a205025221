// Synthetic scaling points for the tests: L = E + A/N^α + B/D^β over a grid of N and D, times exp(σ·z) with z a
// counter-based standard normal (deterministic), so fits have a known truth.
#pragma once
#include <cmath>
#include <string>
#include <vector>

#include "core/rng.h"
#include "scaling/chinchilla_fit.h"

namespace hlm::test {

inline std::vector<ScalingPoint> synthetic_points(const std::string& arch, const ChinchillaParams& truth,
                                                  const std::vector<double>& ns, const std::vector<double>& ds,
                                                  double noise, uint64_t seed = 1) {
  std::vector<ScalingPoint> points;
  uint64_t k = 0;
  for (double n : ns)
    for (double d : ds) {
      const double z = rng_normal(seed, rng_stream_id(arch.c_str()), k++);
      points.push_back({arch, n, d, truth.predict(n, d) * std::exp(noise * z)});
    }
  return points;
}

// OLMo-core's recovery case (src/test/model_ladder/analysis/scaling_laws_test.py; evals.md §4.5).
inline ChinchillaParams olmo_truth() { return {1.0, 100.0, 0.5, 200.0, 0.3}; }
inline std::vector<double> olmo_sizes() { return {1e6, 2e6, 5e6, 10e6, 20e6, 50e6}; }
inline std::vector<double> olmo_tokens() { return {1e9, 2e9, 5e9, 10e9, 20e9, 50e9}; }

}  // namespace hlm::test
