// tokstats (analysis/tokstats.h and `hybridlm tokstats`) with the bytes tokenizer on a tiny parallel set the test
// writes: byte counts are easy to check by hand, NFD input must be counted after NFC, and bad input exits 2.
#include <gtest/gtest.h>

#include "analysis/tokstats.h"
#include "data_test_util.h"
#include "support/help_examples.h"

using namespace hlm;
using test::expect_input_error;
using test::run_hybridlm;
namespace fs = std::filesystem;

namespace {

// Bytes per side: unit a: eng 4, fra 6, hin 6 ("हि" = 2 code points x 3 bytes); unit b: eng 2, fra 3, and vie
// "é" written decomposed (e + U+0301, 3 bytes) which NFC makes 2 bytes.
const char* kSet =
    "{\"id\": \"a\", \"eng_Latn\": \"abcd\", \"fra_Latn\": \"abcdef\", \"hin_Deva\": \"\xe0\xa4\xb9\xe0\xa4\xbf\"}\n"
    "{\"id\": \"b\", \"eng_Latn\": \"xy\", \"fra_Latn\": \"xyz\", \"vie_Latn\": \"e\xcc\x81\"}\n"
    "{\"id\": \"c\", \"fra_Latn\": \"no English here\"}\n";

fs::path write_set(const fs::path& dir, const std::string& name, const std::string& text) {
  const fs::path p = dir / name;
  std::ofstream(p, std::ios::binary) << text;
  return p;
}

}  // namespace

TEST(TokStats, BytesRatiosByHand) {
  test::ScratchDir scratch("tokstats");
  const ParallelSet set = parallel_set_load(write_set(scratch.path(), "tiny.jsonl", kSet));
  const auto bytes = tokenizer_load("bytes");
  const auto rows = tokstats_compute(set, {{"bytes", bytes.get()}}, {});
  ASSERT_EQ(rows.size(), 3u);  // fra, hin, vie in first-seen order
  EXPECT_EQ(rows[0].lang, "fra_Latn");
  EXPECT_EQ(rows[0].units, 2);  // unit c has no English
  EXPECT_EQ(rows[0].tokens, 9);
  EXPECT_EQ(rows[0].eng_tokens, 6);
  EXPECT_DOUBLE_EQ(rows[0].ratio, 1.5);
  EXPECT_EQ(rows[1].lang, "hin_Deva");
  EXPECT_EQ(rows[1].tokens, 6);
  EXPECT_EQ(rows[1].eng_tokens, 4);
  EXPECT_EQ(rows[2].lang, "vie_Latn");
  EXPECT_EQ(rows[2].tokens, 2) << "NFC before counting";
  EXPECT_DOUBLE_EQ(rows[2].ratio, 1.0);

  const auto two = tokstats_compute(set, {{"a", bytes.get()}, {"b", bytes.get()}}, {"hin_Deva"});
  ASSERT_EQ(two.size(), 2u);
  EXPECT_EQ(two[1].tokenizer, "b");
  EXPECT_EQ(tokstats_csv(two), "tokenizer,lang,units,tokens,eng_tokens,ratio\na,hin_Deva,1,6,4,1.5000\n"
                               "b,hin_Deva,1,6,4,1.5000\n");
  EXPECT_NE(tokstats_markdown(two).find("| hin_Deva | 1 | 1.50 | 1.50 |"), std::string::npos)
      << tokstats_markdown(two);
  const BarChart chart = tokstats_chart(two, "tiny");
  EXPECT_EQ(chart.categories, std::vector<std::string>{"hin_Deva"});
  ASSERT_EQ(chart.series.size(), 2u);
  EXPECT_EQ(chart.reference_y, 1.0);
}

TEST(TokStats, Labels) {
  EXPECT_EQ(tokstats_label("bytes"), "bytes");
  EXPECT_EQ(tokstats_label("data/tokenizers/qwen3/tokenizer.json"), "qwen3");
  EXPECT_EQ(tokstats_label("x/gemma.json"), "gemma");
}

TEST(TokStats, BadInput) {
  test::ScratchDir scratch("tokstats");
  const auto bytes = tokenizer_load("bytes");
  const ParallelSet set = parallel_set_load(write_set(scratch.path(), "tiny.jsonl", kSet));
  expect_input_error([&] { tokstats_compute(set, {{"bytes", bytes.get()}}, {"deu_Latn"}); },
                     {"no language 'deu_Latn'"});
  const ParallelSet no_en =
      parallel_set_load(write_set(scratch.path(), "noen.jsonl", "{\"id\": \"a\", \"fra_Latn\": \"x\"}\n"));
  expect_input_error([&] { tokstats_compute(no_en, {{"bytes", bytes.get()}}, {}); }, {"no eng_Latn"});
  const ParallelSet apart = parallel_set_load(write_set(
      scratch.path(), "apart.jsonl", "{\"id\": \"a\", \"eng_Latn\": \"x\"}\n{\"id\": \"b\", \"fra_Latn\": \"y\"}\n"));
  expect_input_error([&] { tokstats_compute(apart, {{"bytes", bytes.get()}}, {}); },
                     {"no unit holds both fra_Latn and eng_Latn"});
}

TEST(TokStatsCli, WritesCsvMarkdownSvg) {
  test::ScratchDir scratch("tokstats");
  const fs::path set = write_set(scratch.path(), "tiny.jsonl", kSet);
  const fs::path out = scratch.path() / "out";
  auto r = run_hybridlm("tokstats --tokenizer bytes --parallel " + set.string() + " --out " + out.string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("| fra_Latn | 2 | 1.50 |"), std::string::npos) << r.out;
  EXPECT_EQ(test::read_text(out / "tokstats.csv").substr(0, 45), "tokenizer,lang,units,tokens,eng_tokens,ratio\n");
  EXPECT_NE(test::read_text(out / "tokstats.csv").find("bytes,vie_Latn,1,2,2,1.0000"), std::string::npos);
  EXPECT_NE(test::read_text(out / "tokstats.md").find("| lang | units | bytes |"), std::string::npos);
  EXPECT_NE(test::read_text(out / "tokstats.svg").find("<svg"), std::string::npos);
  EXPECT_NE(test::read_text(out / "tokstats.svg").find("fra_Latn"), std::string::npos);

  const std::vector<std::pair<std::string, std::string>> bad = {
      {"tokstats --tokenizer bytes --parallel " + (scratch.path() / "missing.jsonl").string(), "missing.jsonl"},
      {"tokstats --tokenizer bytes --parallel " + set.string() + " --langs deu_Latn", "no language 'deu_Latn'"},
      {"tokstats --tokenizer bytes --tokenizer bytes --parallel " + set.string(), "already used"},
      {"tokstats --tokenizer " + (scratch.path() / "nope.json").string() + " --parallel " + set.string(), "nope.json"},
      {"tokstats --parallel " + set.string(), "--tokenizer"},
  };
  for (const auto& [args, needle] : bad) {
    const auto b = run_hybridlm(args);
    EXPECT_EQ(b.exit_code, 2) << args << "\n" << b.err;
    EXPECT_NE((b.err + b.out).find(needle), std::string::npos) << args << "\n" << b.err;
  }
  r = run_hybridlm("tokstats --help");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.out.find("--langs"), std::string::npos) << r.out;
  // Its first example, on the set written here instead of data/parallel/udhr.jsonl.
  const std::vector<std::string> examples = test::help_examples(r.out);
  ASSERT_FALSE(examples.empty()) << r.out;
  const std::string example = test::replace_all(examples[0], "data/parallel/udhr.jsonl", set.string());
  ASSERT_NE(example, examples[0]) << "the first example no longer reads data/parallel/udhr.jsonl: " << examples[0];
  const auto ran = run_hybridlm(example);
  EXPECT_EQ(ran.exit_code, 0) << example << "\n" << ran.err;
  EXPECT_NE(ran.out.find("| fra_Latn | 2 | 1.50 |"), std::string::npos) << ran.out;
}
