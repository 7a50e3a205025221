// The bound-constrained L-BFGS on problems with known minima.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "scaling/lbfgsb.h"

namespace hlm {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

double rosenbrock(std::span<const double> x, std::span<double> g) {
  const double a = 1 - x[0], b = x[1] - x[0] * x[0];
  g[0] = -2 * a - 400 * x[0] * b;
  g[1] = 200 * b;
  return a * a + 100 * b * b;
}

TEST(Lbfgsb, RosenbrockUnbounded) {
  const LbfgsbResult r = lbfgsb_minimize(rosenbrock, {-1.2, 1.0}, {}, {});
  EXPECT_TRUE(r.converged);
  // Minimum at (1, 1); gtol 1e-10 on the gradient bounds the distance to ~1e-9 (Hessian eigenvalues ≥ 0.4).
  EXPECT_NEAR(r.x[0], 1.0, 1e-7);
  EXPECT_NEAR(r.x[1], 1.0, 1e-7);
  EXPECT_LT(r.f, 1e-14);
}

TEST(Lbfgsb, ActiveBoundsAreHonoured) {
  // f = (x0 − 3)² + (x1 + 2)² + (x2 − 0.5)², box x0 ≤ 1, x1 ≥ 0, x2 free: minimum (1, 0, 0.5).
  const Objective f = [](std::span<const double> x, std::span<double> g) {
    g[0] = 2 * (x[0] - 3), g[1] = 2 * (x[1] + 2), g[2] = 2 * (x[2] - 0.5);
    return (x[0] - 3) * (x[0] - 3) + (x[1] + 2) * (x[1] + 2) + (x[2] - 0.5) * (x[2] - 0.5);
  };
  const std::vector<double> lo = {-kInf, 0.0, -kInf}, hi = {1.0, kInf, kInf};
  const LbfgsbResult r = lbfgsb_minimize(f, {5.0, 5.0, 5.0}, lo, hi);  // x0 = 5 starts outside: projected
  EXPECT_TRUE(r.converged);
  EXPECT_DOUBLE_EQ(r.x[0], 1.0);
  EXPECT_DOUBLE_EQ(r.x[1], 0.0);
  EXPECT_NEAR(r.x[2], 0.5, 1e-9);
  EXPECT_NEAR(r.f, 4.0 + 4.0, 1e-12);
}

TEST(Lbfgsb, NonFiniteStartIsReported) {
  const Objective f = [](std::span<const double> x, std::span<double> g) {
    g[0] = 1;
    return x[0] < 0 ? std::nan("") : x[0];
  };
  const LbfgsbResult r = lbfgsb_minimize(f, {-1.0}, {}, {});
  EXPECT_FALSE(r.finite);
  EXPECT_FALSE(r.converged);
}

}  // namespace
}  // namespace hlm
