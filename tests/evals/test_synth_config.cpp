// Synth sweep config (evals/synth/synth_config.h), the five architectures (synth_models.h) and the `synth` CLI's
// input handling: bad configs are clear input errors (exit 2) naming the key.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "evals/synth/synth_models.h"
#include "models/model.h"
#include "support/run_binary.h"

using namespace hlm;

namespace {

std::string error_of(const nlohmann::json& j) {
  try {
    synth_config_parse(j, "cfg.json");
  } catch (const Error& e) {
    EXPECT_EQ(e.exit_code(), 2);
    return e.what();
  }
  return "";
}

}  // namespace

TEST(SynthConfig, DefaultsAreTable14AndRoundTrip) {
  const SynthConfig c = synth_config_parse(nlohmann::json::object(), "cfg.json");
  EXPECT_EQ(c.num_layers, 4);
  EXPECT_EQ(c.hidden_size, 256);
  EXPECT_EQ(c.intermediate_size, 1024);
  EXPECT_EQ(c.num_heads, 4);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.max_positions_recall, 1024);
  EXPECT_EQ(c.max_positions_other, 4096);
  const nlohmann::json resolved = synth_config_to_json(c);
  const SynthConfig back = synth_config_parse(resolved, "resolved");
  EXPECT_EQ(nlohmann::json(synth_config_to_json(back)), resolved);
  EXPECT_NE(synth_config_fields_text().find("eval_difficulties"), std::string::npos);
}

TEST(SynthConfig, BadConfigsNameTheKey) {
  EXPECT_NE(error_of({{"stepz", 10}}).find("unknown key 'stepz'"), std::string::npos);
  EXPECT_NE(error_of({{"steps", "many"}}).find("steps: expected int"), std::string::npos);
  EXPECT_NE(error_of({{"steps", 0}}).find("steps"), std::string::npos);
  EXPECT_NE(error_of({{"tasks", {"parity"}}}).find("unknown task 'parity'"), std::string::npos);
  EXPECT_NE(error_of({{"architectures", {"mamba"}}}).find("unknown architecture 'mamba'"), std::string::npos);
  EXPECT_NE(error_of({{"train_min", 9}, {"train_max", 3}}).find("train_min"), std::string::npos);
  EXPECT_NE(error_of({{"hybrid_layer_types", {"full_attention"}}}).find("hybrid_layer_types"), std::string::npos);
  EXPECT_NE(error_of({{"hybrid_layer_types", {"full_attention", "x", "full_attention", "full_attention"}}})
                .find("'x'"),
            std::string::npos);
  EXPECT_NE(error_of({{"eval_difficulties", {4, 2000}}}).find("max_address"), std::string::npos);
  EXPECT_NE(error_of({{"max_positions_other", 100}}).find("max_positions_other"), std::string::npos);
  EXPECT_NE(error_of(nlohmann::json::array()).find("JSON object"), std::string::npos);
}

TEST(SynthModels, FiveArchitecturesFromOneConfig) {
  SynthConfig c;
  c.hybrid_layer_types = {"full_attention", "linear_attention", "full_attention", "linear_attention"};
  struct Want {
    SynthArch arch;
    int full;  // full-attention layers
    bool neg;
  };
  for (const Want w : {Want{SynthArch::Transformer, 4, false}, Want{SynthArch::GdnNeg, 0, true},
                       Want{SynthArch::GdnPos, 0, false}, Want{SynthArch::HybridNeg, 2, true},
                       Want{SynthArch::HybridPos, 2, false}}) {
    const ModelConfig mc = synth_model_config(c, w.arch, SynthTask::Recall);
    SCOPED_TRACE(synth_arch_spec(w.arch).name);
    EXPECT_EQ(std::count(mc.layer_kinds.begin(), mc.layer_kinds.end(), LayerKind::FullAttention), w.full);
    ASSERT_TRUE(mc.linear.has_value());
    EXPECT_EQ(mc.linear->allow_neg_eigval, w.neg);
    EXPECT_EQ(gdn_dims(mc).neg_eigval, w.neg);
    EXPECT_EQ(mc.vocab_size, 11 + c.max_address);
    EXPECT_EQ(mc.max_position_embeddings, 1024);
    EXPECT_TRUE(mc.unknown_keys.empty());
  }
  EXPECT_EQ(synth_model_config(c, SynthArch::HybridNeg, SynthTask::StateTracking).max_position_embeddings, 4096);
  // Default layout: OLMo Hybrid's (GDN, GDN, GDN, attention).
  const std::vector<std::string> want{"linear_attention", "linear_attention", "linear_attention", "full_attention"};
  EXPECT_EQ(synth_hybrid_layer_types(SynthConfig{}), want);
}

TEST(SynthCli, GenPrintsJsonLinesAndBadInputExitsTwo) {
  const auto r = test::run_hybridlm("synth gen --task state_based_recall --n 4 --m 8 --count 3 --seed 1");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::istringstream lines(r.out);
  std::string line;
  int count = 0;
  while (std::getline(lines, line)) {
    const auto j = nlohmann::json::parse(line);
    EXPECT_EQ(j["bits"].size(), 8u);
    EXPECT_EQ(j["swaps"].size(), 4u);
    ++count;
  }
  EXPECT_EQ(count, 3);
  EXPECT_EQ(test::run_hybridlm("synth gen --task parity --n 4").exit_code, 2);
  EXPECT_EQ(test::run_hybridlm("synth gen --task recall --m 0").exit_code, 2);

  test::ScratchDir dir("synth-cli");
  const auto cfg = dir.path() / "bad.json";
  std::ofstream(cfg) << R"({"steps": -3})";
  const auto bad = test::run_hybridlm("synth --config " + cfg.string() + " --out " + (dir.path() / "o").string());
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("steps"), std::string::npos) << bad.err;
  const auto missing = test::run_hybridlm("synth --config " + (dir.path() / "nope.json").string() + " --out x");
  EXPECT_EQ(missing.exit_code, 2);
  const auto good = dir.path() / "good.json";
  std::ofstream(good) << R"({"steps": 1})";
  const auto device =
      test::run_hybridlm("synth --config " + good.string() + " --out " + (dir.path() / "o").string() + " --device tpu");
  EXPECT_EQ(device.exit_code, 2);
  EXPECT_NE(device.err.find("--device"), std::string::npos) << device.err;
}

// configs/synth/table14.json (the full sweep, the --help example) spells out exactly the defaults.
TEST(SynthConfig, ShippedTable14ConfigIsTheDefaults) {
  const SynthConfig shipped = synth_config_load(std::string(HLM_GOLDEN_DIR) + "/../../configs/synth/table14.json");
  EXPECT_EQ(nlohmann::json(synth_config_to_json(shipped)), nlohmann::json(synth_config_to_json(SynthConfig{})));
}

// The curriculum's largest training difficulty: from train_min up to train_max over the first share of the steps,
// then train_max; off (0) means train_max from the first step. Out-of-range shares are input errors.
TEST(SynthConfig, CurriculumRampsTheLargestDifficulty) {
  SynthConfig c = synth_config_parse(
      nlohmann::json::parse(R"({"train_min": 2, "train_max": 32, "steps": 1000, "curriculum": 0.5})"), "cfg.json");
  EXPECT_EQ(synth_train_difficulty_max(c, 1), 3);    // 2 + ⌈30 · 1 / 500⌉
  EXPECT_EQ(synth_train_difficulty_max(c, 250), 17); // halfway up the ramp
  EXPECT_EQ(synth_train_difficulty_max(c, 499), 32);
  EXPECT_EQ(synth_train_difficulty_max(c, 500), 32);
  EXPECT_EQ(synth_train_difficulty_max(c, 1000), 32);
  for (int64_t s = 2; s <= 1000; ++s)
    EXPECT_GE(synth_train_difficulty_max(c, s), synth_train_difficulty_max(c, s - 1)) << s;
  c.curriculum = 0.0;
  EXPECT_EQ(synth_train_difficulty_max(c, 1), 32);
  EXPECT_NE(error_of({{"curriculum", 1.5}}).find("curriculum"), std::string::npos);
  EXPECT_NE(error_of({{"curriculum", -0.1}}).find("curriculum"), std::string::npos);
  EXPECT_NE(error_of({{"swap_delimiter", 1}}).find("swap_delimiter"), std::string::npos);
}
