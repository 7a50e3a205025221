// RoPE tables against values derived by hand from HF transformers 5.x modeling_rope_utils.py (replayed in Python's
// math module with every float32 tensor op rounded through struct.pack('f')), and rope_forward's rotation properties.
// Tolerance for tables: 1 ulp, because HF's float pow may differ from the correctly rounded pow by 1 ulp; all other
// steps round identically.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "ops/rope/rope.h"
#include "support/random.h"

using namespace hlm;

namespace {

int64_t ulp_distance(float a, float b) {
  int32_t ia = 0, ib = 0;
  std::memcpy(&ia, &a, 4);
  std::memcpy(&ib, &b, 4);
  return std::llabs(static_cast<int64_t>(ia) - static_cast<int64_t>(ib));
}

void expect_table(const RopeTable& t, const std::vector<double>& expected) {
  ASSERT_EQ(t.inv_freq.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_LE(ulp_distance(t.inv_freq[i], static_cast<float>(expected[i])), 1)
        << "i=" << i << " got " << t.inv_freq[i] << " want " << expected[i];
  }
}

RopeParams params_of(const std::string& type, double theta) {
  RopeParams p;
  p.rope_type = type;
  p.rope_theta = theta;
  return p;
}

}  // namespace

TEST(Rope, DefaultTable) {
  const RopeTable t = rope_table_build(params_of("default", 10000.0), 16, 4096);
  EXPECT_EQ(t.rotary_dim, 16);
  EXPECT_EQ(t.attention_scaling, 1.0f);
  EXPECT_EQ(t.max_position, 0);
  expect_table(t, {1.0, 0.3162277638912201, 0.10000000149011612, 0.03162277862429619, 0.009999999776482582,
                   0.003162277862429619, 0.0010000000474974513, 0.0003162277862429619});
}

TEST(Rope, LinearDividesDefault) {
  RopeParams p = params_of("linear", 10000.0);
  p.factor = 3.0;
  const RopeTable t = rope_table_build(p, 16, 4096);
  const RopeTable d = rope_table_build(params_of("default", 10000.0), 16, 4096);
  for (size_t i = 0; i < d.inv_freq.size(); ++i) EXPECT_EQ(t.inv_freq[i], d.inv_freq[i] / 3.0f);
}

TEST(Rope, DynamicEqualsDefaultBelowMaxAndRefusesBeyond) {
  RopeParams p = params_of("dynamic", 10000.0);
  p.factor = 2.0;
  const RopeTable t = rope_table_build(p, 16, 32);
  const RopeTable d = rope_table_build(params_of("default", 10000.0), 16, 32);
  EXPECT_EQ(t.inv_freq, d.inv_freq);
  EXPECT_EQ(t.max_position, 32);
  std::vector<float> x(16, 1.0f);
  const int32_t ok = 31, too_far = 32;
  EXPECT_NO_THROW(rope_forward(x.data(), &ok, 1, 1, t));
  EXPECT_THROW(rope_forward(x.data(), &too_far, 1, 1, t), Error);
}

// theta 10, R 16, factor 4, original max 16: correction range [0, 4], so the ramp takes 0, 1/4, 1/2, 3/4, 1.
TEST(Rope, YarnTableWithFractionalRamp) {
  RopeParams p = params_of("yarn", 10.0);
  p.factor = 4.0;
  p.original_max_position_embeddings = 16;
  const RopeTable t = rope_table_build(p, 16, 64);
  EXPECT_EQ(t.attention_scaling, static_cast<float>(0.1 * std::log(4.0) + 1.0));  // get_mscale(4)
  expect_table(t, {1.0, 0.6092890501022339, 0.35146331787109375, 0.18449223041534424, 0.07905694097280502,
                   0.05928434059023857, 0.04445698484778404, 0.0333380363881588});
  // Hand check of the middle: i = 2 sits at ramp 1/2, so it is the mean of 10^-1/4 and 10^-1/4 / 4.
  EXPECT_NEAR(t.inv_freq[2], 0.5 * std::pow(10.0, -0.25) * 1.25, 1e-7);
}

// truncate false keeps the fractional range [0, 0.8119]; mscale/mscale_all_dim set the attention factor.
TEST(Rope, YarnNoTruncateAndMscale) {
  RopeParams p = params_of("yarn", 10000.0);
  p.factor = 4.0;
  p.original_max_position_embeddings = 16;
  p.truncate = false;
  p.mscale = 1.0;
  p.mscale_all_dim = 0.5;
  const RopeTable t = rope_table_build(p, 16, 64);
  // get_mscale(4, 1) / get_mscale(4, 0.5)
  EXPECT_EQ(t.attention_scaling, static_cast<float>((0.1 * std::log(4.0) + 1.0) / (0.05 * std::log(4.0) + 1.0)));
  expect_table(t, {1.0, 0.07905694097280502, 0.02500000037252903, 0.007905694656074047, 0.0024999999441206455,
                   0.0007905694656074047, 0.0002500000118743628, 7.905694656074047e-05});
}

TEST(Rope, YarnAttentionFactorOverrideAndOriginalMaxFallback) {
  RopeParams p = params_of("yarn", 10.0);
  p.factor = 4.0;
  p.attention_factor = 0.75;
  // No original_max_position_embeddings: falls back to the max_position_embeddings argument (16 here).
  const RopeTable t = rope_table_build(p, 16, 16);
  EXPECT_EQ(t.attention_scaling, 0.75f);
  p.original_max_position_embeddings = 16;
  EXPECT_EQ(rope_table_build(p, 16, 64).inv_freq, t.inv_freq);
}

// theta 5e5, R 16, factor 8, low/high 1/4, original max 64: i = 0 high-frequency (kept), i = 1 medium (smoothed),
// i >= 2 low-frequency (divided by 8).
TEST(Rope, Llama3Table) {
  RopeParams p = params_of("llama3", 500000.0);
  p.factor = 8.0;
  p.low_freq_factor = 1.0;
  p.high_freq_factor = 4.0;
  p.original_max_position_embeddings = 64;
  const RopeTable t = rope_table_build(p, 16, 1024);
  EXPECT_EQ(t.attention_scaling, 1.0f);
  expect_table(t, {1.0, 0.07940301299095154, 0.004700753837823868, 0.0009115831344388425, 0.00017677668074611574,
                   3.428102354519069e-05, 6.647869668086059e-06, 1.289173155782919e-06});
}

TEST(Rope, UnknownTypeAndBadValuesAreInputErrors) {
  auto expect_input_error = [](const RopeParams& p, int64_t head_dim) {
    try {
      rope_table_build(p, head_dim, 64);
      ADD_FAILURE() << "no error for rope_type " << p.rope_type;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::Input) << e.what();
    }
  };
  expect_input_error(params_of("longrope", 10000.0), 16);
  expect_input_error(params_of("su", 10000.0), 16);
  expect_input_error(params_of("default", -1.0), 16);
  expect_input_error(params_of("default", 10000.0), 15);  // odd rotary dimension
  RopeParams llama = params_of("llama3", 10000.0);
  llama.low_freq_factor = 4.0;
  llama.high_freq_factor = 4.0;
  expect_input_error(llama, 16);
}

TEST(Rope, RotateHalfPairsIWithIPlusHalf) {
  RopeTable t;
  t.head_dim = 4;
  t.rotary_dim = 4;
  t.inv_freq = {1.0f, 0.5f};
  std::vector<float> x = {1.0f, 2.0f, 3.0f, 4.0f};
  const int32_t pos = 1;
  rope_forward(x.data(), &pos, 1, 1, t);
  const double c0 = std::cos(1.0), s0 = std::sin(1.0), c1 = std::cos(0.5), s1 = std::sin(0.5);
  EXPECT_NEAR(x[0], 1.0 * c0 - 3.0 * s0, 1e-6);
  EXPECT_NEAR(x[1], 2.0 * c1 - 4.0 * s1, 1e-6);
  EXPECT_NEAR(x[2], 3.0 * c0 + 1.0 * s0, 1e-6);
  EXPECT_NEAR(x[3], 4.0 * c1 + 2.0 * s1, 1e-6);
}

TEST(Rope, PositionZeroIsIdentity) {
  const RopeTable t = rope_table_build(params_of("default", 10000.0), 16, 64);
  const auto x0 = hlm::test::random_vector(3 * 16, 1);
  auto x = x0;
  const int32_t pos[1] = {0};
  rope_forward(x.data(), pos, 1, 3, t);
  EXPECT_EQ(x, x0);  // cos 0 = 1 and sin 0 = 0 exactly
}

// Each (i, i + R/2) pair is rotated, so pair norms are preserved up to f32 rounding (~1e-7 relative per op);
// with a yarn table the norms scale by attention_scaling.
TEST(Rope, RotationPreservesPairNorms) {
  for (const bool yarn : {false, true}) {
    RopeParams p = params_of(yarn ? "yarn" : "default", 10000.0);
    p.factor = 4.0;
    const RopeTable t = rope_table_build(p, 16, 64);
    const int64_t T = 5, H = 2, D = 16;
    const auto x0 = hlm::test::random_vector(static_cast<size_t>(T * H * D), 2);
    auto x = x0;
    const int32_t pos[T] = {0, 1, 7, 100, 4095};
    rope_forward(x.data(), pos, T, H, t);
    for (int64_t r = 0; r < T * H; ++r) {
      for (int64_t i = 0; i < D / 2; ++i) {
        const double a0 = x0[r * D + i], b0 = x0[r * D + i + D / 2];
        const double a1 = x[r * D + i], b1 = x[r * D + i + D / 2];
        const double n0 = std::hypot(a0, b0) * t.attention_scaling, n1 = std::hypot(a1, b1);
        EXPECT_NEAR(n1, n0, 1e-6 * (1.0 + n0)) << "row " << r << " pair " << i;
      }
    }
  }
}

// partial_rotary_factor 0.5: R = 8 of D = 16, the table is the default one for R = 8 and dims >= 8 pass through.
TEST(Rope, PartialRotaryLeavesTailUntouched) {
  RopeParams p = params_of("default", 10000.0);
  p.partial_rotary_factor = 0.5;
  const RopeTable t = rope_table_build(p, 16, 64);
  EXPECT_EQ(t.rotary_dim, 8);
  EXPECT_EQ(t.inv_freq, rope_table_build(params_of("default", 10000.0), 8, 64).inv_freq);
  const auto x0 = hlm::test::random_vector(2 * 3 * 16, 3);
  auto x = x0;
  const int32_t pos[2] = {3, 11};
  rope_forward(x.data(), pos, 2, 3, t);
  for (int64_t r = 0; r < 6; ++r) {
    for (int64_t d = 8; d < 16; ++d) EXPECT_EQ(x[r * 16 + d], x0[r * 16 + d]);
    bool changed = false;
    for (int64_t d = 0; d < 8; ++d) changed |= x[r * 16 + d] != x0[r * 16 + d];
    EXPECT_TRUE(changed);
  }
}
