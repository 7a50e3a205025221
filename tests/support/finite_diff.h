// Finite-difference gradient checks in double, shared by every backward test.
// fd_check: central differences (step 1e-6) of loss() with respect to every element of x, against `analytic`.
// Tolerance: |fd − analytic| ≤ tol · max(1, max |analytic|). With a double-precision loss of magnitude ~1, the
// central-difference truncation error is O(eps²·f''') ≈ 1e-12 and the rounding error O(1e-16/eps) ≈ 1e-10, so the
// default tol = 1e-7 leaves three orders of margin while still catching any wrong term.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "support/random.h"

namespace hlm::test {

// Returns the largest |fd − analytic|; each element is also an EXPECT.
inline double fd_check(const std::function<double()>& loss, std::vector<double>& x,
                       const std::vector<double>& analytic, const std::string& name, double tol = 1e-7) {
  EXPECT_EQ(x.size(), analytic.size()) << name;
  if (x.size() != analytic.size()) return INFINITY;
  const double eps = 1e-6;
  double max_grad = 1.0, max_err = 0.0;
  for (double a : analytic) max_grad = std::max(max_grad, std::abs(a));
  for (size_t i = 0; i < x.size(); ++i) {
    const double saved = x[i];
    x[i] = saved + eps;
    const double lp = loss();
    x[i] = saved - eps;
    const double lm = loss();
    x[i] = saved;
    const double fd = (lp - lm) / (2 * eps);
    max_err = std::max(max_err, std::abs(fd - analytic[i]));
    EXPECT_NEAR(analytic[i], fd, tol * max_grad) << name << "[" << i << "]";
  }
  std::printf("  d%-16s max |fd - analytic| = %.2e (max |grad| %.3f)\n", name.c_str(), max_err, max_grad);
  return max_err;
}

// mean + sd · N(0, 1) in double, from the counter-based RNG (stream selects the draw).
inline std::vector<double> random_doubles(size_t n, uint64_t stream, double sd = 1.0, double mean = 0.0,
                                          uint64_t seed = 4242) {
  const auto f = random_vector(n, stream, 1.0f, seed);
  std::vector<double> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = mean + sd * f[i];
  return out;
}

inline double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0.0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

}  // namespace hlm::test
