// parallel_set_load: plain and zstd JSONL, first-seen language order, pairs(), and the input errors of the contract.
#include <gtest/gtest.h>

#include <fstream>

#include "core/error.h"
#include "data/parallel_set.h"
#include "data/text_io.h"
#include "support/run_binary.h"

namespace hlm {
namespace {

void write_file(const std::filesystem::path& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

const char* kThreeUnits =
    "{\"id\": \"u1\", \"eng_Latn\": \"Hello\", \"fra_Latn\": \"Bonjour\"}\n"
    "\n"
    "{\"id\": \"u2\", \"eng_Latn\": \"Cat\", \"hin_Deva\": \"\xe0\xa4\xac\xe0\xa4\xbf\xe0\xa4\xb2\xe0\xa5\x8d\"}\n"
    "{\"id\": \"u3\", \"fra_Latn\": \"Chat\", \"eng_Latn\": \"Cat\", \"deu_Latn\": \"Katze\"}\n";

TEST(ParallelSet, LoadsPlainJsonl) {
  test::ScratchDir dir("pset");
  write_file(dir.path() / "set.jsonl", kThreeUnits);
  const ParallelSet set = parallel_set_load(dir.path() / "set.jsonl");
  ASSERT_EQ(set.units.size(), 3u);
  EXPECT_EQ(set.units[1].id, "u2");
  EXPECT_EQ(set.units[0].text.at("fra_Latn"), "Bonjour");
  EXPECT_EQ(set.langs, (std::vector<std::string>{"eng_Latn", "fra_Latn", "hin_Deva", "deu_Latn"}));
  const auto ef = set.pairs("eng_Latn", "fra_Latn");
  ASSERT_EQ(ef.size(), 2u);
  EXPECT_EQ(ef[0]->id, "u1");
  EXPECT_EQ(ef[1]->id, "u3");
  EXPECT_TRUE(set.pairs("hin_Deva", "deu_Latn").empty());
  EXPECT_TRUE(set.pairs("eng_Latn", "xxx_Latn").empty());
}

TEST(ParallelSet, LoadsZstdJsonl) {
  test::ScratchDir dir("pset");
  write_file(dir.path() / "set.jsonl.zst", zstd_compress(kThreeUnits));
  const ParallelSet set = parallel_set_load(dir.path() / "set.jsonl.zst");
  ASSERT_EQ(set.units.size(), 3u);
  EXPECT_EQ(set.units[2].text.at("deu_Latn"), "Katze");
}

// Each malformed input gives an input error whose message names the file and the problem (and line when known).
TEST(ParallelSet, InputErrors) {
  test::ScratchDir dir("pset");
  struct Case {
    const char* name;
    std::string content;
    std::string expect;  // substring of the message
  };
  const Case cases[] = {
      {"bad_json", "{\"id\": \"a\", \"eng_Latn\": \"x\"}\n{\"id\": \"b\", \n", "line 2: bad JSON"},
      {"not_object", "[1, 2]\n", "line 1: expected a JSON object"},
      {"missing_id", "{\"eng_Latn\": \"x\"}\n", "line 1: missing \"id\""},
      {"numeric_id", "{\"id\": 3, \"eng_Latn\": \"x\"}\n", "\"id\" must be a string"},
      {"duplicate_id", "{\"id\": \"a\", \"eng_Latn\": \"x\"}\n{\"id\": \"a\", \"eng_Latn\": \"y\"}\n",
       "line 2: duplicate id \"a\""},
      {"non_string_text", "{\"id\": \"a\", \"eng_Latn\": 5}\n", "text of \"eng_Latn\" must be a string"},
      {"invalid_utf8", "{\"id\": \"a\", \"eng_Latn\": \"\xff\xfe\"}\n", "line 1"},
  };
  for (const Case& c : cases) {
    const auto path = dir.path() / (std::string(c.name) + ".jsonl");
    write_file(path, c.content);
    try {
      parallel_set_load(path);
      ADD_FAILURE() << c.name << ": no error";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::Input) << c.name;
      EXPECT_NE(std::string(e.what()).find(c.expect), std::string::npos) << c.name << ": " << e.what();
      EXPECT_NE(std::string(e.what()).find(path.string()), std::string::npos) << c.name << ": " << e.what();
    }
  }
  try {
    parallel_set_load(dir.path() / "absent.jsonl");
    ADD_FAILURE() << "absent file: no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Input);
    EXPECT_NE(std::string(e.what()).find("absent.jsonl"), std::string::npos);
  }
}

}  // namespace
}  // namespace hlm
