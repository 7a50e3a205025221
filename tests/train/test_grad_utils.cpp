// Gradient zero / scale / global-norm clipping (train/grad_utils.h). Norms of small exact inputs are compared exactly
// (3-4-12-13: every square and sum is exact in double); the large random case checks the parallel double reduction
// against a serial double sum to 1e-12 relative (summation-order rounding of 1e6 terms is ≤ 1e6·1e-16).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "support/random.h"
#include "train/grad_utils.h"

using namespace hlm;

namespace {

Tensor make_tensor(const std::vector<float>& values) {
  Tensor t = Tensor::zeros({static_cast<int64_t>(values.size())});
  std::memcpy(t.f32(), values.data(), values.size() * sizeof(float));
  return t;
}

TEST(GradUtils, ClipScalesToMaxNorm) {
  std::vector<Tensor> g = {make_tensor({3.0f, 4.0f}), make_tensor({12.0f})};
  EXPECT_EQ(grad_global_norm(g), 13.0);
  EXPECT_EQ(clip_grad_norm(g, 6.5), 13.0);  // returns the norm before clipping
  EXPECT_EQ(g[0].f32()[0], 1.5f);
  EXPECT_EQ(g[0].f32()[1], 2.0f);
  EXPECT_EQ(g[1].f32()[0], 6.0f);
  EXPECT_EQ(grad_global_norm(g), 6.5);
  EXPECT_EQ(clip_grad_norm(g, 100.0), 6.5);  // below the limit: untouched
  EXPECT_EQ(g[1].f32()[0], 6.0f);
}

TEST(GradUtils, NonFiniteNormLeavesGradientsAlone) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  std::vector<Tensor> g = {make_tensor({3.0f, 4.0f}), make_tensor({nan})};
  EXPECT_TRUE(std::isnan(clip_grad_norm(g, 1.0)));
  EXPECT_EQ(g[0].f32()[0], 3.0f);
  std::vector<Tensor> h = {make_tensor({3.0f, -inf}), make_tensor({4.0f})};
  EXPECT_EQ(clip_grad_norm(h, 1.0), std::numeric_limits<double>::infinity());
  EXPECT_EQ(h[0].f32()[0], 3.0f);
  EXPECT_EQ(h[1].f32()[0], 4.0f);
  std::vector<Tensor> both = {make_tensor({inf, nan})};
  EXPECT_TRUE(std::isnan(clip_grad_norm(both, 1.0)));
}

TEST(GradUtils, ZeroScaleAndLargeNorm) {
  const int64_t n = 1 << 20;
  const auto values = test::random_vector(n, 70);
  std::vector<Tensor> g = {make_tensor(values), make_tensor({2.0f})};
  double serial = 4.0;
  for (float x : values) serial += static_cast<double>(x) * x;
  EXPECT_NEAR(grad_global_norm(g), std::sqrt(serial), 1e-12 * std::sqrt(serial));
  grad_scale(g, 0.5);
  EXPECT_EQ(g[1].f32()[0], 1.0f);
  EXPECT_EQ(g[0].f32()[123], values[123] * 0.5f);
  grad_zero(g);
  EXPECT_EQ(grad_global_norm(g), 0.0);
  EXPECT_EQ(clip_grad_norm(g, 1.0), 0.0);  // zero gradient: nothing to clip, no division by zero
}

}  // namespace
