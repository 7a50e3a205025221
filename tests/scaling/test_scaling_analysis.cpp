// Bootstrap intervals, pairing and the derived tables on synthetic architectures with a known truth.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>

#include "core/error.h"
#include "scaling/scaling_analysis.h"
#include "scaling/scaling_fixture.h"
#include "scaling/scaling_report.h"

namespace hlm {
namespace {

// Two architectures: "better" has a smaller data term (B), so it needs fewer tokens for the same loss.
std::vector<ScalingPoint> two_architectures(double noise) {
  auto points = test::synthetic_points("transformer", {1.8, 400.0, 0.34, 900.0, 0.30}, {1e6, 3e6, 1e7, 3e7, 1e8},
                                       {1e8, 3e8, 1e9, 3e9}, noise);
  const auto better = test::synthetic_points("better", {1.8, 400.0, 0.34, 600.0, 0.30}, {1e6, 3e6, 1e7, 3e7, 1e8},
                                             {1e8, 3e8, 1e9, 3e9}, noise);
  points.insert(points.end(), better.begin(), better.end());
  return points;
}

ScalingOptions small_options(int bootstrap) {
  ScalingOptions o;
  o.fit.grid = "olmo";
  o.fit.grid_size = 2;  // 32 starts: enough on these well-conditioned points, keeps the test fast
  o.bootstrap = bootstrap;
  o.seed = 3;
  o.flops = {1e16, 1e18};
  o.savings_n = {3e7, 1e8};
  o.target_loss = 4.0;  // reached inside the observed D range at both sizes (no long extrapolation)
  return o;
}

TEST(ScalingAnalysis, PercentileIntervalInterpolatesLikeNumpy) {
  // numpy.percentile([1..5], [2.5, 97.5]) = [1.1, 4.9]; NaN (a failed resample) is dropped.
  const Interval iv = percentile_interval({5, 1, 4, 2, 3, std::nan("")});
  EXPECT_EQ(iv.count, 5);
  EXPECT_NEAR(iv.low, 1.1, 1e-12);
  EXPECT_NEAR(iv.high, 4.9, 1e-12);
  EXPECT_EQ(percentile_interval({}).count, 0);
  // An infinite value (unreachable target) is a value: numpy.percentile([1, 2, 3, inf], 97.5) = inf.
  const Interval with_inf = percentile_interval({3, INFINITY, 1, 2});
  EXPECT_EQ(with_inf.count, 4);
  EXPECT_NEAR(with_inf.low, 1.075, 1e-12);
  EXPECT_TRUE(std::isinf(with_inf.high));
}

TEST(ScalingAnalysis, ResamplesAreDeterministicAndPerArchitecture) {
  const auto points = two_architectures(0.01);
  const std::vector<ScalingPoint> t(points.begin(), points.begin() + 20);
  const auto a = bootstrap_resample(t, 3, 7), b = bootstrap_resample(t, 3, 7), c = bootstrap_resample(t, 3, 8);
  ASSERT_EQ(a.size(), t.size());
  bool same_ab = true, same_ac = true;
  for (size_t i = 0; i < a.size(); ++i) {
    same_ab = same_ab && a[i].N == b[i].N && a[i].D == b[i].D;
    same_ac = same_ac && a[i].N == c[i].N && a[i].D == c[i].D;
  }
  EXPECT_TRUE(same_ab);
  EXPECT_FALSE(same_ac);
}

TEST(ScalingAnalysis, IntervalsTablesAndThreadIndependence) {
  const auto points = two_architectures(0.005);
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  const ScalingAnalysis one = run_scaling_analysis(points, small_options(12));
  omp_set_num_threads(2);
  const ScalingAnalysis two = run_scaling_analysis(points, small_options(12));
  omp_set_num_threads(saved);
  ASSERT_EQ(one.archs.size(), 2u);
  EXPECT_EQ(one.reference, "transformer");
  for (size_t a = 0; a < 2; ++a)
    for (int b = 0; b < 12; ++b) {
      EXPECT_EQ(one.archs[a].free.resamples[b].params.A, two.archs[a].free.resamples[b].params.A);
      EXPECT_EQ(one.archs[a].free.resamples[b].objective, two.archs[a].free.resamples[b].objective);
    }

  const ScalingTables t = scaling_tables(one);
  ASSERT_EQ(t.parameters.size(), 2u);
  for (const ParameterRow& r : t.parameters) {
    EXPECT_EQ(r.resamples_ok, 12);
    EXPECT_EQ(r.alpha.count, 12);
    EXPECT_LE(r.alpha.low, r.alpha.high);
    // 0.5 % noise on 20 points: the true exponents lie inside the 95 % intervals widened by 0.02 (12 resamples
    // give coarse percentiles).
    EXPECT_GT(r.alpha.high + 0.02, 0.34);
    EXPECT_LT(r.alpha.low - 0.02, 0.34);
    EXPECT_GT(r.beta.high + 0.02, 0.30);
    EXPECT_LT(r.beta.low - 0.02, 0.30);
    EXPECT_GT(r.r2, 0.99);
  }
  ASSERT_EQ(t.compute.size(), 4u);  // 2 budgets × 2 architectures
  for (const ComputeRow& r : t.compute) {
    EXPECT_NEAR(6 * r.optimum.N * r.optimum.D / r.flops, 1, 1e-12);
    if (r.arch == "transformer") {
      EXPECT_EQ(r.delta, 0.0);
      EXPECT_EQ(r.delta_ci.low, 0.0);  // paired with itself
    } else {
      EXPECT_LT(r.delta, 0.0);  // smaller B: lower loss at every budget
    }
  }
  ASSERT_EQ(t.savings.size(), 4u);
  for (const SavingsRow& r : t.savings) {
    if (r.arch == "transformer") {
      EXPECT_DOUBLE_EQ(r.savings, 1.0);
      continue;
    }
    // True factor: D ∝ B^{1/β} at equal E, A, α, β: (900/600)^{1/0.3} = 3.86.
    EXPECT_GT(r.savings, 1.0);
    EXPECT_NEAR(r.savings / std::pow(1.5, 1 / 0.3), 1, 0.25) << "N " << r.N;
    EXPECT_LE(r.savings_ci.low, r.savings_ci.high);
  }
}

TEST(ScalingAnalysis, FixedExponentVariantAndUnknownReference) {
  auto o = small_options(4);
  o.fixed_exponent = 0.3;
  const ScalingAnalysis a = run_scaling_analysis(two_architectures(0.005), o);
  ASSERT_TRUE(a.archs[0].fixed.has_value());
  EXPECT_EQ(a.archs[0].fixed->fit.params.alpha, 0.3);
  EXPECT_EQ(a.archs[0].fixed->resamples.size(), 4u);
  const ScalingTables t = scaling_tables(a);
  EXPECT_EQ(t.parameters.size(), 4u);
  EXPECT_DOUBLE_EQ(t.parameters[1].a_opt, 0.5);
  o.reference = "nope";
  EXPECT_THROW(run_scaling_analysis(two_architectures(0.005), o), Error);
}

}  // namespace
}  // namespace hlm
