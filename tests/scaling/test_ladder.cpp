// The ladder: config validation, the three architectures' model configs, and a tiny CPU ladder end to end
// (3 architectures × 2 sizes × 3 ratios of a few steps each; resumable).
#include <gtest/gtest.h>

#include <fstream>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "scaling/ladder.h"
#include "scaling/scaling_points.h"
#include "support/run_binary.h"
#include "train/test_trainer_fixture.h"

namespace hlm {
namespace {

using json = nlohmann::json;

json tiny_ladder_json(const std::string& corpus) {
  return json::parse(R"({
    "format": "hybridlm-scaling-ladder", "data": ")" + corpus + R"(", "tokenizer": "bytes",
    "architectures": ["transformer", "hybrid", "gdn"],
    "sizes": [
      {"name": "xs", "hidden_size": 8, "num_hidden_layers": 4, "num_attention_heads": 2, "num_key_value_heads": 1,
       "head_dim": 4, "intermediate_size": 16},
      {"name": "s", "hidden_size": 16, "num_hidden_layers": 4, "num_attention_heads": 2, "num_key_value_heads": 1,
       "head_dim": 8, "intermediate_size": 32}],
    "tokens_per_param": [0.05, 0.1, 0.2],
    "train": {"seq_len": 32, "batch_rows": 2, "micro_batch_rows": 2, "lr": 0.003, "min_lr": 0.0003,
              "warmup_steps": 1, "held_out_docs": 20, "eval_tokens": 128, "eval_every_tokens": 0,
              "checkpoint_every_steps": 0, "log_every_steps": 1000},
    "fit": {"grid": "olmo:2", "bounds": "olmo", "bootstrap": 0, "flops": [1e12], "savings_n": [1e4]}
  })");
}

std::string error_of(const json& j) {
  try {
    ladder_config_from_json(j, "ladder.json");
  } catch (const Error& e) {
    EXPECT_EQ(e.exit_code(), 2) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "no error for " << j.dump();
  return "";
}

TEST(Ladder, ConfigValidation) {
  const json good = tiny_ladder_json("corpus");
  const LadderConfig c = ladder_config_from_json(good, "ladder.json");
  EXPECT_EQ(c.sizes.size(), 2u);
  EXPECT_EQ(c.train.lr_rec, 0.003);
  EXPECT_EQ(c.train.lr_rest, 0.003);
  EXPECT_EQ(c.train.job, TrainJob::Pretrain);
  // The resolved config reads back to the same recipe.
  const LadderConfig again = ladder_config_from_json(ladder_config_to_json(c), "resolved");
  EXPECT_EQ(train_config_to_json(again.train), train_config_to_json(c.train));

  json j = good;
  j["colour"] = 1;
  EXPECT_NE(error_of(j).find("unknown key 'colour'"), std::string::npos);
  j = good;
  j["architectures"] = {"transformer", "mamba"};
  EXPECT_NE(error_of(j).find("unknown architecture 'mamba'"), std::string::npos);
  j = good;
  j["sizes"][0]["num_hidden_layers"] = 2;
  EXPECT_NE(error_of(j).find("at least 4 layers"), std::string::npos);
  j = good;
  j["sizes"][1]["name"] = "xs";
  EXPECT_NE(error_of(j).find("used twice"), std::string::npos);
  j = good;
  j["tokens_per_param"] = {10, -1};
  EXPECT_NE(error_of(j).find("tokens_per_param values must be positive"), std::string::npos);
  j = good;
  j["train"]["tokens"] = 1000;
  EXPECT_NE(error_of(j).find("train.tokens is set by the ladder itself"), std::string::npos);
  j = good;
  j["train"]["batch_size"] = 4;
  EXPECT_NE(error_of(j).find("unknown setting 'batch_size'"), std::string::npos);
  j = good;
  j["train"]["micro_batch_rows"] = 3;  // 2 rows are not a multiple of 3
  EXPECT_FALSE(error_of(j).empty());
  j = good;
  j["fit"]["weights"] = "cubic";
  EXPECT_NE(error_of(j).find("--weights"), std::string::npos);
  j = good;
  j.erase("format");
  EXPECT_NE(error_of(j).find("not a ladder config"), std::string::npos);
}

TEST(Ladder, ArchitecturesDifferOnlyInTheirMixers) {
  const LadderConfig c = ladder_config_from_json(tiny_ladder_json("corpus"), "ladder.json");
  const LadderSize& s = c.sizes[1];
  const ModelConfig t = ladder_model_config(c, "transformer", s, 256);
  const ModelConfig h = ladder_model_config(c, "hybrid", s, 256);
  const ModelConfig g = ladder_model_config(c, "gdn", s, 256);
  EXPECT_EQ(t.model_type, "qwen3");
  EXPECT_EQ(h.model_type, "qwen3_hybrid");
  EXPECT_EQ(h.layer_types, (std::vector<std::string>{"linear_attention", "linear_attention", "linear_attention",
                                                     "full_attention"}));  // GDN 3:1
  EXPECT_EQ(g.layer_types, std::vector<std::string>(4, "linear_attention"));
  ASSERT_TRUE(g.linear.has_value());
  EXPECT_TRUE(g.linear->allow_neg_eigval);
  for (const ModelConfig* m : {&t, &h, &g}) {
    EXPECT_FALSE(m->tie_word_embeddings);
    EXPECT_EQ(m->hidden_size, 16);
    EXPECT_EQ(m->intermediate_size, 32);
  }
  // N excludes the embedding and the LM head: a larger vocabulary leaves it unchanged.
  EXPECT_EQ(non_embedding_parameters(t), non_embedding_parameters(ladder_model_config(c, "transformer", s, 1000)));
  EXPECT_GT(non_embedding_parameters(t), 4 * (2 * 16 * 32 + 16 * 32));  // at least the MLPs
  const auto plan = ladder_plan(c, 256);
  ASSERT_EQ(plan.size(), 18u);
  for (const LadderRun& r : plan) {
    EXPECT_EQ(r.tokens % 64, 0);  // whole steps of B·n = 2·32 tokens
    EXPECT_GE(static_cast<double>(r.tokens), r.tokens_per_param * static_cast<double>(r.N));
  }
}

TEST(Ladder, CorpusCoverageOfTheRuns) {
  // Documents of equal length, so the counts do not depend on which ones the split holds out: eng_Latn (anchor)
  // 10 × 100 bytes, fra_Latn (high) 6 × 50; held_out_docs 1 leaves 8 and 4 training documents: 800 and 200 tokens.
  test::ScratchDir dir("ladder-coverage");
  corpus_write(dir.path() / "corpus", {{"eng_Latn", "", "anchor", 0}, {"fra_Latn", "", "high", 0}},
               {std::vector<std::string>(10, std::string(100, 'e')), std::vector<std::string>(6, std::string(50, 'f'))});
  json j = tiny_ladder_json((dir.path() / "corpus").string());
  j["train"]["held_out_docs"] = 1;
  const LadderConfig c = ladder_config_from_json(j, "ladder.json");  // anchor share 0.3 (the default)
  const LadderCorpusCoverage cover = ladder_corpus_coverage(c);
  ASSERT_EQ(cover.languages.size(), 2u);
  EXPECT_EQ(cover.languages[0].train_tokens, 800);
  EXPECT_EQ(cover.languages[1].train_tokens, 200);
  EXPECT_NEAR(cover.languages[0].share, 0.3, 1e-12);
  EXPECT_NEAR(cover.languages[1].share, 0.7, 1e-12);
  EXPECT_EQ(cover.train_tokens, 1000);
  EXPECT_EQ(cover.max_tokens, 285);  // fra_Latn: 200 / 0.7 = 285.7 (eng_Latn would allow 800 / 0.3 = 2666.7)
  EXPECT_EQ(cover.limiting, "fra_Latn");
  EXPECT_EQ(ladder_corpus_shortfall(cover, c, 280), 0);    // quotas 84 + 196
  EXPECT_EQ(ladder_corpus_shortfall(cover, c, 286), 0);    // 86 + 200: the floors' remainder goes to eng_Latn
  EXPECT_EQ(ladder_corpus_shortfall(cover, c, 287), 1);    // 86 + 201
  EXPECT_EQ(ladder_corpus_shortfall(cover, c, 1000), 500);  // 300 + 700
  // A smaller anchor share moves tokens to fra_Latn, which then runs short sooner.
  j["train"]["anchor_share"] = 0.1;
  const LadderConfig low = ladder_config_from_json(j, "ladder.json");
  EXPECT_EQ(ladder_corpus_coverage(low).max_tokens, 222);  // 200 / 0.9
  EXPECT_EQ(ladder_corpus_shortfall(ladder_corpus_coverage(low), low, 1000), 700);
}

TEST(Ladder, TinyCpuLadderRunsResumesAndFits) {
  test::use_one_thread();
  test::ScratchDir dir("ladder");
  test::write_tiny_corpus(dir.path() / "corpus", 200);
  const LadderConfig c = ladder_config_from_json(tiny_ladder_json((dir.path() / "corpus").string()), "ladder.json");
  const auto out = dir.path() / "ladder";
  std::vector<std::string> lines;
  const LadderSummary s = ladder_run(c, out, nullptr, [&](const std::string& l) { lines.push_back(l); });
  EXPECT_EQ(s.trained, 18);
  EXPECT_EQ(s.skipped, 0);
  const std::vector<ScalingPoint> points = read_scaling_points(s.runs_csv);
  ASSERT_EQ(points.size(), 18u);
  EXPECT_EQ(scaling_architectures(points), (std::vector<std::string>{"transformer", "hybrid", "gdn"}));
  for (const ScalingPoint& p : points) EXPECT_LT(p.loss, std::log(256.0) + 0.5) << p.arch;  // a sane CE in nats
  const json fit = json::parse(test::read_text(out / "fit" / "fit.json"));
  for (const char* arch : {"transformer", "hybrid", "gdn"}) EXPECT_TRUE(fit["architectures"][arch]["E"].is_number());

  // Rerun: every run is skipped; a run missing from runs.csv but finished is appended without training.
  std::string csv = test::read_text(s.runs_csv);
  csv.erase(csv.rfind('\n', csv.size() - 2) + 1);  // drop the last row
  std::ofstream(s.runs_csv) << csv;
  const LadderSummary again = ladder_run(c, out, nullptr, {});
  EXPECT_EQ(again.skipped, 17);
  EXPECT_EQ(again.trained, 1);
  EXPECT_EQ(read_scaling_points(again.runs_csv).size(), 18u);

  // Another recipe in the same directory is refused before anything runs.
  json other = tiny_ladder_json((dir.path() / "corpus").string());
  other["train"]["lr"] = 0.01;
  other["sizes"][0]["hidden_size"] = 12;
  try {
    ladder_run(ladder_config_from_json(other, "other.json"), out, nullptr, {});
    FAIL() << "expected an input error";
  } catch (const Error& e) {
    EXPECT_EQ(e.exit_code(), 2);
    EXPECT_NE(std::string(e.what()).find("train.lr_rec, train.lr_rest, sizes.xs"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace hlm
