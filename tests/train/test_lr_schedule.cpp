// Eq. 3 of the seed (train/lr_schedule.h) at its boundaries, with the Table C.3 constants. Values are compared with
// the formula evaluated independently here; exact equality where the formula is exact (s = 0 → ε·η̂ up to one
// rounding, s = s_w → η̂, s = S → η_min since cos(π) = −1 exactly in IEEE double), 1e-15 relative elsewhere
// (a few ulps of double).
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>

#include "core/error.h"
#include "train/adamw.h"
#include "train/lr_schedule.h"

using namespace hlm;

namespace {

const LrSchedule kSeed{10172, 305, 1e-3, 1e-5};  // Table C.3

TEST(LrSchedule, SeedStepCounts) {
  EXPECT_EQ(lr_schedule_total_steps(1'000'000'000, 96 * 1024), 10172);  // S = ⌊N / (B·n)⌋
  EXPECT_EQ(lr_schedule_warmup_steps(10172, 0.03), 305);                // 3%
  EXPECT_EQ(lr_schedule_warmup_steps(100, 0.29), 29);                   // 0.29·100 is 28.999… in binary
}

TEST(LrSchedule, WarmupBoundaries) {
  const double peak = 7e-5;
  EXPECT_DOUBLE_EQ(lr_schedule_at(kSeed, peak, 0), 7e-8);  // s = 0: ε·η̂
  EXPECT_DOUBLE_EQ(lr_schedule_at(kSeed, peak, 1), peak * (1e-3 + (1 - 1e-3) / 305.0));
  EXPECT_EQ(lr_schedule_at(kSeed, peak, 305), peak);  // s = s_w: exactly η̂
  for (int64_t s = 1; s <= 305; ++s) EXPECT_GT(lr_schedule_at(kSeed, peak, s), lr_schedule_at(kSeed, peak, s - 1));
}

TEST(LrSchedule, CosineBoundaries) {
  const double peak = 2e-5, eta_min = 1e-5;
  const double s306 = eta_min + (peak - eta_min) / 2 * (1 + std::cos(std::numbers::pi / (10172 - 305)));
  EXPECT_NEAR(lr_schedule_at(kSeed, peak, 306), s306, 1e-15 * peak);
  EXPECT_LT(lr_schedule_at(kSeed, peak, 306), peak);                               // first decay step
  EXPECT_NEAR(lr_schedule_at(kSeed, peak, 306), peak, 1e-6 * peak);                // continuous at s_w
  EXPECT_EQ(lr_schedule_at(kSeed, peak, 10172), eta_min);                          // s = S: exactly η_min
  for (int64_t s = 306; s <= 10172; s += 97)
    EXPECT_LT(lr_schedule_at(kSeed, peak, s + 1), lr_schedule_at(kSeed, peak, s));  // decreasing
  const LrSchedule even{110, 10, 1e-3, 1e-5};  // midpoint of the cosine at s = 60: (η̂ + η_min)/2
  EXPECT_NEAR(lr_schedule_at(even, 7e-5, 60), 4e-5, 1e-15);
}

TEST(LrSchedule, EdgeCases) {
  const LrSchedule no_warmup{100, 0, 1e-3, 1e-5};
  EXPECT_EQ(lr_schedule_at(no_warmup, 7e-5, 0), 7e-5);  // s_w = 0: starts at η̂
  EXPECT_EQ(lr_schedule_at(no_warmup, 7e-5, 100), 1e-5);
  const LrSchedule all_warmup{50, 50, 1e-3, 1e-5};
  EXPECT_EQ(lr_schedule_at(all_warmup, 7e-5, 50), 7e-5);  // S = s_w: ends at η̂
  EXPECT_THROW(lr_schedule_at(kSeed, 7e-5, -1), Error);
  EXPECT_THROW(lr_schedule_at(kSeed, 7e-5, 10173), Error);  // past S
  EXPECT_THROW(lr_schedule_at(LrSchedule{10, 11, 1e-3, 1e-5}, 7e-5, 0), Error);
}

TEST(LrSchedule, AppliesPerGroupPeak) {
  Tensor p = Tensor::zeros({2}), g = Tensor::zeros({2}), q = Tensor::zeros({3}), gq = Tensor::zeros({3});
  AdamW opt({{"rec", 7e-5, 0.01, 0.0}, {"rest", 2e-5, 0.01, 0.0}}, {{"a", p, g, 0}, {"b", q, gq, 1}});
  lr_schedule_apply(opt, kSeed, 305);
  EXPECT_EQ(opt.groups()[0].lr, 7e-5);
  EXPECT_EQ(opt.groups()[1].lr, 2e-5);
  lr_schedule_apply(opt, kSeed, 0);
  EXPECT_DOUBLE_EQ(opt.groups()[0].lr, 7e-8);
  EXPECT_DOUBLE_EQ(opt.groups()[1].lr, 2e-8);
}

}  // namespace
