// Test helpers: deterministic random vectors (counter-based, see core/rng.h) and error measures.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "core/rng.h"

namespace hlm::test {

inline std::vector<float> random_vector(size_t n, uint64_t stream, float scale = 1.0f, uint64_t seed = 1234) {
  std::vector<float> v(n);
  rng_fill_normal(v.data(), n, 0.0f, scale, seed, stream);
  return v;
}

// max |a - b| / max(max |b|, tiny): relative to the reference's scale.
inline double max_rel_error(const float* a, const float* b, size_t n) {
  double max_diff = 0.0, max_ref = 1e-30;
  for (size_t i = 0; i < n; ++i) {
    max_diff = std::max(max_diff, std::abs(static_cast<double>(a[i]) - b[i]));
    max_ref = std::max(max_ref, std::abs(static_cast<double>(b[i])));
  }
  return max_diff / max_ref;
}

}  // namespace hlm::test
