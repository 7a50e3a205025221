// Reading runs.csv: bad input is one clear input error naming the file, line and column.
#include <gtest/gtest.h>

#include "core/error.h"
#include "scaling/scaling_points.h"

namespace hlm {
namespace {

std::string error_of(const std::string& text) {
  try {
    parse_scaling_points(text, "runs.csv");
  } catch (const Error& e) {
    EXPECT_EQ(e.exit_code(), 2) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "no error for:\n" << text;
  return "";
}

TEST(ScalingPoints, ParsesAnyColumnOrderAndExtraColumns) {
  const auto points = parse_scaling_points("run,loss,D,arch,N\nr1,3.5,1e9,gdn,2e6\n\nr2, 3.25 ,2e9,hybrid,4e6\n", "x");
  ASSERT_EQ(points.size(), 2u);
  EXPECT_EQ(points[0].arch, "gdn");
  EXPECT_EQ(points[0].N, 2e6);
  EXPECT_EQ(points[0].D, 1e9);
  EXPECT_EQ(points[0].loss, 3.5);
  EXPECT_EQ(points[1].loss, 3.25);
  EXPECT_EQ(scaling_architectures(points), (std::vector<std::string>{"gdn", "hybrid"}));
}

TEST(ScalingPoints, BadFilesAreInputErrors) {
  EXPECT_NE(error_of("").find("empty file"), std::string::npos);
  EXPECT_NE(error_of("arch,N,D\nt,1,2\n").find("missing column \"loss\""), std::string::npos);
  EXPECT_NE(error_of("arch,N,loss\nt,1,2\n").find("missing column \"D\""), std::string::npos);
  EXPECT_NE(error_of("arch,N,D,loss\n").find("no data rows"), std::string::npos);
  EXPECT_NE(error_of("arch,N,D,loss\nt,1e6,1e9\n").find("runs.csv:2: 3 columns"), std::string::npos);
  EXPECT_NE(error_of("arch,N,D,loss\nt,1e6,1e9,abc\n").find("column loss: \"abc\" is not a number"), std::string::npos);
  EXPECT_NE(error_of("arch,N,D,loss\nt,1e6,1e9,3\nt,-5,1e9,3\n").find("runs.csv:3: column N must be a finite positive"),
            std::string::npos);
  EXPECT_NE(error_of("arch,N,D,loss\nt,1e6,0,3\n").find("column D must be"), std::string::npos);
  EXPECT_NE(error_of("arch,N,D,loss\nt,1e6,1e9,0\n").find("column loss must be"), std::string::npos);
  EXPECT_NE(error_of("arch,N,D,loss\nt,1e6,1e9,inf\n").find("column loss must be"), std::string::npos);
  EXPECT_NE(error_of("arch,N,D,loss\nt,1e6,1e9,3x\n").find("is not a number"), std::string::npos);
  EXPECT_NE(error_of("arch,N,D,loss\n,1e6,1e9,3\n").find("column arch is empty"), std::string::npos);
}

TEST(ScalingPoints, MissingFileIsAnInputError) {
  try {
    read_scaling_points("/nonexistent/runs.csv");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.exit_code(), 2);
    EXPECT_NE(std::string(e.what()).find("--points: cannot open /nonexistent/runs.csv"), std::string::npos);
  }
}

}  // namespace
}  // namespace hlm
