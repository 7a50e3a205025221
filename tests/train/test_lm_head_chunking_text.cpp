// parse_lm_head_chunking / lm_head_chunking_text (train/lm_head_chunking_text.h): the accepted forms, the round
// trip, and every malformed text refused as an input error that quotes it.
#include <gtest/gtest.h>

#include <climits>
#include <string>

#include "core/error.h"
#include "train/lm_head_chunking_text.h"

namespace hlm {
namespace {

TEST(LmHeadChunkingText, ParsesRowsTimesColumnsAndFull) {
  const LmHeadChunking a = parse_lm_head_chunking("4096x1024");
  EXPECT_EQ(a.row_block, 4096);
  EXPECT_EQ(a.vocab_chunk, 1024);
  const LmHeadChunking f = parse_lm_head_chunking("2048xfull");
  EXPECT_EQ(f.row_block, 2048);
  EXPECT_EQ(f.vocab_chunk, INT32_MAX);
  const LmHeadChunking one = parse_lm_head_chunking("1x1");
  EXPECT_EQ(one.row_block, 1);
  EXPECT_EQ(one.vocab_chunk, 1);
  EXPECT_EQ(parse_lm_head_chunking("2147483647x7").row_block, INT32_MAX);
}

TEST(LmHeadChunkingText, RoundTrips) {
  for (const std::string t : {"4096x4096", "2048xfull", "1x7", "16384x2048"})
    EXPECT_EQ(lm_head_chunking_text(parse_lm_head_chunking(t)), t);
  EXPECT_EQ(lm_head_chunking_text(LmHeadChunking{.vocab_chunk = 4096, .row_block = 1024}), "1024x4096");
}

TEST(LmHeadChunkingText, MalformedTextIsAnInputErrorQuotingIt) {
  for (const std::string t : {"", "4096", "x4096", "4096x", "0x4096", "4096x0", "-1x4096", "4096x-5", "4096 x 4096",
                              "4096x4096x2", "4096xFULL", "4096xfull1", "2147483648x1", "1x99999999999", "4k x 4k",
                              "+4x4", "4096X4096"}) {
    try {
      parse_lm_head_chunking(t);
      ADD_FAILURE() << "accepted '" << t << "'";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::Input) << e.what();
      EXPECT_NE(std::string(e.what()).find("'" + t + "'"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace hlm
