// `hybridlm niah gen|score` and the run mode's input errors, through the binary (fixture corpus from niah_fixture.h;
// bytes tokenizer). The run mode itself: test_niah_run.cpp.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <sstream>

#include "niah_fixture.h"
#include "support/run_binary.h"

using hlm::test::run_hybridlm;
using hlm::test::ScratchDir;

namespace {

std::vector<nlohmann::json> json_lines(const std::string& text) {
  std::vector<nlohmann::json> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) out.push_back(nlohmann::json::parse(line));
  return out;
}

}  // namespace

TEST(NiahCli, GenJsonLines) {
  ScratchDir dir("niah-cli");
  hlm::test::write_niah_fixture_corpus(dir.path());
  const std::string common = "niah gen --tokenizer bytes --corpus " + dir.path().string() +
                             " --held-out-docs 6 --lang eng_Latn --task multiquery --length 1k --count 3 --seed 5";
  const auto r = run_hybridlm(common + " --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("niah gen: corpus"), std::string::npos) << "the resolved settings go to stderr";
  const std::vector<nlohmann::json> rows = json_lines(r.out);
  ASSERT_EQ(rows.size(), 3u);
  for (size_t i = 0; i < rows.size(); ++i) {
    const nlohmann::json& j = rows[i];
    EXPECT_EQ(j["index"], static_cast<int>(i));
    EXPECT_EQ(j["keys"].size(), 2u);
    EXPECT_EQ(j["values"].size(), 2u);
    EXPECT_EQ(j["query"].size(), 2u);
    EXPECT_EQ(j["expected"].size(), 2u);
    EXPECT_EQ(j["length"], 1000);
    EXPECT_LE(j["haystack_tokens"].get<int>(), 1000);
    EXPECT_GE(j["haystack_tokens"].get<int>(), 980);
    EXPECT_EQ(j["prompt_tokens"].get<size_t>(), j["prompt"].get<std::string>().size()) << "bytes: one token a byte";
  }
  EXPECT_EQ(run_hybridlm(common + " --json").out, r.out) << "same seed, same output";

  const auto readable = run_hybridlm(common);
  ASSERT_EQ(readable.exit_code, 0) << readable.err;
  EXPECT_NE(readable.out.find("### sample 0: eng_Latn multiquery"), std::string::npos);
  EXPECT_NE(readable.out.find("<Question>"), std::string::npos);
}

TEST(NiahCli, GenErrors) {
  ScratchDir dir("niah-cli");
  hlm::test::write_niah_fixture_corpus(dir.path());
  const std::string base = "niah gen --tokenizer bytes --corpus " + dir.path().string() + " --held-out-docs 6";
  auto r = run_hybridlm(base + " --lang tam_Taml --task single --length 1k");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("no NIAH templates for language 'tam_Taml'"), std::string::npos) << r.err;
  r = run_hybridlm(base + " --lang eng_Latn --task cwe --length 1k");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("unknown NIAH task 'cwe'"), std::string::npos) << r.err;
  r = run_hybridlm(base + " --lang eng_Latn --task single --length 1.5k");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--length 1.5k"), std::string::npos) << r.err;
  r = run_hybridlm(base + " --lang ell_Grek --task single --length 1k");  // templates, but not in this corpus
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("ell_Grek"), std::string::npos) << r.err;
  r = run_hybridlm("niah gen --tokenizer bytes --corpus " + (dir.path() / "nope").string() +
                   " --lang eng_Latn --task single --length 1k");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("not a corpus directory"), std::string::npos) << r.err;
}

TEST(NiahCli, Score) {
  auto r = run_hybridlm("niah score --task multivalue --lang eng_Latn --expected 1111111,2222222,3333333,4444444 "
                        "--response '<Answer> 4444444, 3333333, 2222222, 1111111 </Answer>'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "correct\n");
  r = run_hybridlm("niah score --task single --lang eng_Latn --expected 1234567 --response '1234567 or 7654321'");
  EXPECT_EQ(r.out, "wrong\n");
  r = run_hybridlm("niah score --task none --lang cmn_Hani --response '无'");
  EXPECT_EQ(r.out, "correct\n");
  r = run_hybridlm("niah score --task single --lang eng_Latn --response '1234567'");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--expected"), std::string::npos) << r.err;
}

TEST(NiahCli, RunModeInputErrors) {
  auto r = run_hybridlm("niah --model /nonexistent --tokenizer bytes --langs eng_Latn --tasks single "
                        "--lengths 1k --n 2 --out /tmp/unused");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--model /nonexistent: not a model directory"), std::string::npos) << r.err;
  r = run_hybridlm("niah --model " + std::string(HLM_GOLDEN_DIR) + "/qwen3_untied --langs eng_Latn --tasks single "
                   "--lengths 1k --out /tmp/unused");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--tokenizer is required"), std::string::npos) << r.err;
  r = run_hybridlm("niah --model " + std::string(HLM_GOLDEN_DIR) + "/qwen3_untied --tokenizer bytes --langs xx_Yyyy "
                   "--tasks single --lengths 1k --out /tmp/unused");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("no NIAH templates for language 'xx_Yyyy'"), std::string::npos) << r.err;
  // Precision: bf16 is the CUDA engine's (the CPU engine runs fp32 only); other names are refused. Before any load.
  r = run_hybridlm("niah --model " + std::string(HLM_GOLDEN_DIR) + "/qwen3_untied --tokenizer bytes --langs eng_Latn "
                   "--tasks single --lengths 1k --out /tmp/unused --precision bf16");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--precision bf16 needs --device cuda"), std::string::npos) << r.err;
  r = run_hybridlm("niah --model " + std::string(HLM_GOLDEN_DIR) + "/qwen3_untied --tokenizer bytes --langs eng_Latn "
                   "--tasks single --lengths 1k --out /tmp/unused --precision fp16");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--precision must be fp32 or bf16, got 'fp16'"), std::string::npos) << r.err;
  r = run_hybridlm("niah --model " + std::string(HLM_GOLDEN_DIR) + "/qwen3_untied --tokenizer bytes --langs eng_Latn "
                   "--tasks single --lengths 1k --out /tmp/unused --prefill-chunk 0");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--prefill-chunk must be positive"), std::string::npos) << r.err;
  const auto bare = run_hybridlm("niah");
  EXPECT_EQ(bare.exit_code, 2);
  EXPECT_NE(bare.err.find("give a subcommand"), std::string::npos) << bare.err;
}
