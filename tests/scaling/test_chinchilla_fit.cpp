// The Chinchilla fit: analytic gradient, synthetic recovery, and the refits of ../shared/docs/evals.md §4.5 on the
// 240 Chinchilla points (unweighted, √(6ND)- and 6ND-weighted).
#include <gtest/gtest.h>

#include <cmath>

#include "core/error.h"
#include "scaling/allocation.h"
#include "scaling/chinchilla_data.h"
#include "scaling/chinchilla_fit.h"
#include "scaling/scaling_fixture.h"

namespace hlm {
namespace {

// The 240 points, which must all be there (a missing point would make the refits below fit other data).
#define REQUIRE_CHINCHILLA(points)                                  \
  const std::vector<ScalingPoint> points = test::chinchilla_points(); \
  ASSERT_EQ(points.size(), 240u);

// Central differences of J against the analytic gradient, at θ where some residuals fall inside the Huber
// quadratic zone and others on its linear arms (δ is widened so both occur on these points).
void check_gradient(const std::vector<ScalingPoint>& points, FitWeights weights, std::vector<double> theta,
                    std::optional<double> fixed, double delta) {
  const FitData data = fit_data(points, weights);
  std::vector<double> grad(theta.size());
  fit_objective(data, theta, fixed, delta, grad);
  int inside = 0;
  {
    const ChinchillaParams p = fixed ? ChinchillaParams{std::exp(theta[0]), std::exp(theta[1]), *fixed,
                                                        std::exp(theta[2]), *fixed}
                                     : ChinchillaParams{std::exp(theta[0]), std::exp(theta[1]), theta[2],
                                                        std::exp(theta[3]), theta[4]};
    for (const ScalingPoint& q : points) inside += std::abs(std::log(p.predict(q.N, q.D) / q.loss)) <= delta;
  }
  ASSERT_GT(inside, 0) << "no residual inside the quadratic zone";
  ASSERT_LT(inside, static_cast<int>(points.size())) << "no residual on the linear arms";
  for (size_t k = 0; k < theta.size(); ++k) {
    const double h = 1e-6;
    std::vector<double> up = theta, dn = theta;
    up[k] += h, dn[k] -= h;
    const double fd = (fit_objective(data, up, fixed, delta, {}) - fit_objective(data, dn, fixed, delta, {})) / (2 * h);
    // Central differences: O(h²) truncation plus rounding ~1e-16·J/h; the Huber kink adds O(h) only if a residual
    // crosses ±δ within ±h (none does at these θ with probability ~1): 1e-6 relative + 1e-9 absolute.
    EXPECT_NEAR(grad[k], fd, 1e-6 * std::abs(fd) + 1e-9) << "component " << k;
  }
}

TEST(ChinchillaFit, GradientMatchesFiniteDifferences) {
  const auto points = test::synthetic_points("g", test::olmo_truth(), test::olmo_sizes(), test::olmo_tokens(), 0.05);
  // θ = (e, a, α, b, β) near, not at, the truth.
  const std::vector<double> theta = {std::log(1.1), std::log(80.0), 0.48, std::log(230.0), 0.31};
  for (FitWeights w : {FitWeights::None, FitWeights::SqrtFlops, FitWeights::Flops})
    check_gradient(points, w, theta, std::nullopt, 0.05);
  check_gradient(points, FitWeights::SqrtFlops, {std::log(1.1), std::log(80.0), std::log(230.0)}, 0.4, 0.05);
}

TEST(ChinchillaFit, RecoversSyntheticTruth) {
  // OLMo-core's test: 1% multiplicative noise, fitted predictions within 10% of the truth. Here also the tighter
  // bound the noise allows: with 36 points and 5 parameters the fit averages the noise, so every prediction is within
  // 2% (3 σ of a single point's noise, well above the fit's own error).
  const ChinchillaParams truth = test::olmo_truth();
  const auto points = test::synthetic_points("s", truth, test::olmo_sizes(), test::olmo_tokens(), 0.01);
  for (const char* bounds : {"none", "olmo"}) {
    FitOptions o;
    o.grid = "olmo";
    o.bounds = bounds;
    const ChinchillaFit fit = fit_chinchilla(points, o);
    ASSERT_TRUE(fit.ok);
    for (double n : test::olmo_sizes())
      for (double d : test::olmo_tokens()) {
        const double rel = std::abs(fit.params.predict(n, d) / truth.predict(n, d) - 1);
        EXPECT_LT(rel, 0.10) << bounds;
        EXPECT_LT(rel, 0.02) << bounds << " N " << n << " D " << d;
      }
    // R² on the loss: the noise leaves part of the variance unexplained even for the truth itself (0.98 here); the
    // fit must explain as much as the truth does, up to 0.005.
    EXPECT_GT(fit.r2, fit_r2(points, truth) - 0.005) << bounds;
  }
}

TEST(ChinchillaFit, FixedExponentRefitsOnlyEAB) {
  // Noise-free points with α = β = 0.3: the fixed-exponent fit at 0.3 recovers E, A, B (to the optimiser's
  // tolerance; 1e-4 relative is far above it and far below any other optimum's distance).
  const ChinchillaParams truth{1.5, 300.0, 0.3, 500.0, 0.3};
  const auto points = test::synthetic_points("f", truth, test::olmo_sizes(), test::olmo_tokens(), 0.0);
  FitOptions o;
  o.fixed_exponent = 0.3;
  const ChinchillaFit fit = fit_chinchilla(points, o);
  ASSERT_TRUE(fit.ok);
  EXPECT_EQ(fit.starts, 180);  // epoch grid over (e, a, b): 5 × 6 × 6
  EXPECT_DOUBLE_EQ(fit.params.alpha, 0.3);
  EXPECT_DOUBLE_EQ(fit.params.beta, 0.3);
  EXPECT_NEAR(fit.params.E / truth.E, 1, 1e-4);
  EXPECT_NEAR(fit.params.A / truth.A, 1, 1e-4);
  EXPECT_NEAR(fit.params.B / truth.B, 1, 1e-4);
}

TEST(ChinchillaFit, TooFewPointsIsAnInputError) {
  const auto points = test::synthetic_points("t", test::olmo_truth(), {1e6, 2e6}, {1e9, 2e9}, 0.0);
  try {
    fit_chinchilla(points, FitOptions{});
    FAIL() << "expected an input error";
  } catch (const Error& e) {
    EXPECT_EQ(e.exit_code(), 2);
    EXPECT_NE(std::string(e.what()).find("fewer than the 5 parameters"), std::string::npos) << e.what();
  }
  FitOptions fixed;
  fixed.fixed_exponent = 0.3;
  EXPECT_TRUE(fit_chinchilla(points, fixed).ok);  // 4 points ≥ 3 parameters
}

// Tolerances of the refits below: J's valley along (A, B) is flat, so the two published refits of the same optimum
// (Epoch-style log-space vs OLMo-core-style direct) differ by 0.2 % in A and B and 3e-4 in α, β at objectives equal
// to 1e-9 relative. Our optimum must match to that level: A, B within 1 %, E, α, β within 1e-3, J within 1e-5 relative.
TEST(ChinchillaFit, HoffmannStyleRefitOf240Points) {
  REQUIRE_CHINCHILLA(points);
  ASSERT_EQ(points.size(), 240u);
  const ChinchillaFit fit = fit_chinchilla(points, FitOptions{});  // epoch grid (4500 starts), unbounded, unweighted
  ASSERT_TRUE(fit.ok);
  EXPECT_EQ(fit.starts, 4500);
  EXPECT_NEAR(fit.params.A / 477.84, 1, 0.01);
  EXPECT_NEAR(fit.params.B / 2143.9, 1, 0.01);
  EXPECT_NEAR(fit.params.E, 1.81723, 1e-3);
  EXPECT_NEAR(fit.params.alpha, 0.347312, 1e-3);
  EXPECT_NEAR(fit.params.beta, 0.367184, 1e-3);
  EXPECT_NEAR(fit.objective / 1.018274e-3, 1, 1e-5);
  EXPECT_NEAR(alloc_a_opt(fit.params), 0.51391, 1e-3);
}

TEST(ChinchillaFit, OlmoStyleRefitsOf240PointsUnweightedAndWeighted) {
  REQUIRE_CHINCHILLA(points);
  struct Case {
    FitWeights weights;
    double E, A, alpha, B, beta, a_opt;  // evals.md §4.5 (recomputed with OLMo-core's fit: bounds, 4^5 starts)
    double e_tol, ab_tol, exp_tol;       // E absolute, A and B relative, α / β / a_opt absolute
  };
  // Unweighted and √(6ND): the tolerances of the Hoffmann-style test above. 6ND weighting: a few heavy points
  // dominate and the valley is flatter still; our optimum has a LOWER objective than the published parameters
  // (checked below: 7.99805e-4 vs 7.99891e-4), i.e. the published refit stopped short of it (scipy's L-BFGS-B stops at
  // an absolute decrease of 2.2e-9 when J < 1). The distance we see: E 0.0033, A 2.2 %, α 0.0012, β 0.0005; so
  // 0.005, 3 %, 2e-3.
  const Case cases[] = {
      {FitWeights::None, 1.81733, 478.86, 0.34744, 2139.5, 0.36709, 0.51391, 1e-3, 0.01, 1e-3},
      {FitWeights::SqrtFlops, 1.6756, 741.0, 0.37229, 207.29, 0.25178, 0.4035, 1e-3, 0.01, 1e-3},
      {FitWeights::Flops, 1.1745, 934.6, 0.38339, 17.19, 0.11850, 0.236, 5e-3, 0.03, 2e-3},
  };
  for (const Case& c : cases) {
    FitOptions o;
    o.weights = c.weights;
    o.grid = "olmo";
    o.bounds = "olmo";
    const ChinchillaFit fit = fit_chinchilla(points, o);
    ASSERT_TRUE(fit.ok);
    EXPECT_EQ(fit.starts, 1024);
    const char* name = fit_weights_name(c.weights);
    EXPECT_NEAR(fit.params.E, c.E, c.e_tol) << name;
    EXPECT_NEAR(fit.params.A / c.A, 1, c.ab_tol) << name;
    EXPECT_NEAR(fit.params.alpha, c.alpha, c.exp_tol) << name;
    EXPECT_NEAR(fit.params.B / c.B, 1, c.ab_tol) << name;
    EXPECT_NEAR(fit.params.beta, c.beta, c.exp_tol) << name;
    EXPECT_NEAR(alloc_a_opt(fit.params), c.a_opt, c.exp_tol) << name;
    // Never worse than the published parameters on the same objective (1e-9 relative: rounding of the 5 digits).
    const std::vector<double> published = {std::log(c.E), std::log(c.A), c.alpha, std::log(c.B), c.beta};
    const double j_published = fit_objective(fit_data(points, c.weights), published, std::nullopt, 1e-3, {});
    EXPECT_LE(fit.objective, j_published * (1 + 1e-9)) << name;
  }
}

}  // namespace
}  // namespace hlm
