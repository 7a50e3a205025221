// Self-test of the GoogleTest stand-in (gtest/gtest.h here): every macro passes on a true condition (MustPass.*) and
// fails on a false one (MustFail.*, one failing macro per test (SCOPED_TRACE's test fails once), each followed by a marker that a fatal ASSERT must
// not reach). ctest runs the two halves (tests/cuda/CMakeLists.txt): MustPass.* must exit 0 with every test OK;
// MustFail.* must report exactly kMustFail failed tests and never print the marker after a fatal assertion.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <stdexcept>

namespace {
void after_fatal() { std::printf("REACHED-AFTER-FATAL\n"); }
const double kNaN = std::numeric_limits<double>::quiet_NaN();
const double kInf = std::numeric_limits<double>::infinity();
}  // namespace

TEST(MustPass, Comparisons) {
  EXPECT_TRUE(1 < 2);
  EXPECT_FALSE(2 < 1);
  EXPECT_EQ(3, 3);
  EXPECT_NE(3, 4);
  EXPECT_LT(3, 4);
  EXPECT_LE(4, 4);
  EXPECT_GT(5, 4);
  EXPECT_GE(5, 5);
  ASSERT_EQ(1, 1);
  ASSERT_NE(1, 2);
  ASSERT_FALSE(false);
  ASSERT_TRUE(true);
}

TEST(MustPass, Near) {
  SCOPED_TRACE("near cases");
  EXPECT_NEAR(1.0, 1.0 + 1e-7, 1e-6);
  EXPECT_NEAR(-2.5f, -2.5f, 0.0);
  EXPECT_NEAR(kInf, kInf, 1e-6);  // equal values pass, as in GoogleTest
  ASSERT_NEAR(10.0, 10.5, 0.5);
}

TEST(MustPass, Exceptions) {
  EXPECT_THROW(throw std::runtime_error("x"), std::runtime_error);
  EXPECT_NO_THROW((void)0);
  EXPECT_TRUE(::testing::AssertionSuccess());
}

TEST(MustPass, SkipIsNotAFailure) { GTEST_SKIP() << "skipped on purpose"; }

// Each MustFail test must be reported failed.
constexpr int kMustFail = 13;
TEST(MustFail, ExpectTrue) { EXPECT_TRUE(1 > 2); }
TEST(MustFail, ExpectEq) { EXPECT_EQ(1, 2); }
TEST(MustFail, ExpectLe) { EXPECT_LE(3, 2); }
TEST(MustFail, ExpectNearOutside) { EXPECT_NEAR(1.0, 1.1, 0.05); }
TEST(MustFail, ExpectNearNaN) { EXPECT_NEAR(kNaN, kNaN, 1.0); }
TEST(MustFail, ExpectNearInfVsFinite) { EXPECT_NEAR(kInf, 1.0, 1e300); }
TEST(MustFail, AssertNearStops) {
  ASSERT_NEAR(0.0, 1.0, 0.5);
  after_fatal();
}
TEST(MustFail, AssertEqStops) {
  ASSERT_EQ(1, 2);
  after_fatal();
}
TEST(MustFail, ExpectThrowWrongType) { EXPECT_THROW(throw std::logic_error("x"), std::runtime_error); }
TEST(MustFail, ExpectNoThrow) { EXPECT_NO_THROW(throw std::runtime_error("x")); }
TEST(MustFail, AssertionFailureResult) { EXPECT_TRUE(::testing::AssertionFailure() << "because"); }
TEST(MustFail, FailMacro) {
  FAIL() << "explicit";
  after_fatal();
}
TEST(MustFail, FailureInsideScopedTrace) {
  for (int i = 0; i < 2; ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(i, 1);
  }
}
static_assert(kMustFail == 13, "update kMustFail and the ctest regex together");
