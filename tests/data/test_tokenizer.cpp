// The built-in bytes tokenizer and tokenizer_load's errors.
#include <gtest/gtest.h>

#include "data/tokenizer.h"
#include "data_test_util.h"

using namespace hlm;

TEST(Tokenizer, BytesRoundTrip) {
  const auto tok = tokenizer_load("bytes");
  EXPECT_EQ(tok->vocab_size(), 256);
  EXPECT_EQ(tok->name(), "bytes");
  const std::string text = "Aé数🙂\n";
  const std::vector<int32_t> ids = tok->encode(text);
  EXPECT_EQ(ids, (std::vector<int32_t>{0x41, 0xC3, 0xA9, 0xE6, 0x95, 0xB0, 0xF0, 0x9F, 0x99, 0x82, 0x0A}));
  EXPECT_EQ(tok->decode(ids), text);
  EXPECT_TRUE(tok->encode("").empty());
  test::expect_input_error([&] { tok->decode({65, 256}); }, {"id 256", "position 1"});
  test::expect_input_error([&] { tok->decode({-1}); }, {"id -1"});
}

TEST(Tokenizer, LoadErrors) {
  test::expect_input_error([] { tokenizer_load("/nonexistent/tokenizer.json"); }, {"no such file"});
  test::ScratchDir scratch("tok");
  std::ofstream(scratch.path() / "tokenizer.json") << "{}";
  test::expect_input_error([&] { tokenizer_load((scratch.path() / "tokenizer.json").string()); },
                           {"missing field \"model\""});
}
