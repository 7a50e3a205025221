// Resource limits of config.json and of the study/train configs (issue #19): sizes beyond any real model, negative
// sizes and out-of-range numbers are input errors naming the key, raised while parsing, before anything is sized from
// them. (The fuzz targets replay the inputs that once crashed or exhausted memory: fuzz/regressions, ctest fuzz_replay.)
#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "models/hf_config.h"
#include "models/json_file.h"
#include "support/run_binary.h"
#include "data/tokenizer.h"
#include "study/study_config.h"
#include "support/golden.h"
#include "train/trainer.h"

using namespace hlm;
using json = nlohmann::json;

namespace {

// Runs fn; it must throw an input error whose message holds every needle.
template <typename Fn>
void expect_input_error(Fn fn, const std::vector<std::string>& needles) {
  try {
    fn();
    ADD_FAILURE() << "no error; expected one mentioning " << needles.front();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Input) << e.what();
    for (const std::string& n : needles) EXPECT_NE(std::string(e.what()).find(n), std::string::npos) << e.what();
  }
}

json golden_config(const std::string& name) { return json_file_read(test::golden_dir(name) / "config.json"); }

}  // namespace

TEST(ConfigLimits, AbsurdModelSizesAreRefusedNamingTheKey) {
  const json qwen = golden_config("qwen3_tied");
  struct Case {
    const char* key;
    json value;
    const char* needle;
  };
  const int64_t two40 = int64_t{1} << 40;
  for (const Case& c : {Case{"vocab_size", 1000000000, "above the limit"}, Case{"hidden_size", two40, "above the limit"},
                        Case{"intermediate_size", two40, "above the limit"},
                        Case{"num_hidden_layers", int64_t{1000000000000}, "above the limit"},
                        Case{"num_attention_heads", two40, "above the limit"}, Case{"head_dim", two40, "above the limit"},
                        Case{"max_position_embeddings", int64_t{1} << 62, "above the limit"},
                        Case{"vocab_size", -1, "must be > 0"}, Case{"num_hidden_layers", -3, "must be > 0"},
                        Case{"head_dim", 0, "must be > 0"}}) {
    json j = qwen;
    j[c.key] = c.value;
    if (std::string(c.key) == "num_hidden_layers") j.erase("layer_types");
    SCOPED_TRACE(std::string(c.key) + " = " + c.value.dump());
    expect_input_error([&] { parse_model_config(j, "config.json"); }, {"config.json", c.key, c.needle});
  }
}

TEST(ConfigLimits, OneWeightAbove2To40ElementsIsRefused) {
  // Each size within its own limit, their product (the embedding, vocab x hidden = 2^24 x 2^20) is not.
  json j = golden_config("qwen3_tied");
  j["vocab_size"] = int64_t{1} << 24;
  j["hidden_size"] = int64_t{1} << 20;
  expect_input_error([&] { parse_model_config(j, "config.json"); }, {"model.embed_tokens.weight", "2^40"});
}

TEST(ConfigLimits, HybridSizesAreBounded) {
  const json olmo = golden_config("olmo_hybrid_tiny");
  for (const char* key : {"linear_key_head_dim", "linear_value_head_dim", "linear_num_key_heads",
                          "linear_conv_kernel_dim"}) {
    json j = olmo;
    j[key] = int64_t{1} << 40;
    SCOPED_TRACE(key);
    expect_input_error([&] { parse_model_config(j, "config.json"); }, {key, "above the limit"});
  }
  json j = olmo;  // the default layer_types would be a list of 10^10 names
  j.erase("layer_types");
  j["num_hidden_layers"] = int64_t{10000000000};
  expect_input_error([&] { parse_model_config(j, "config.json"); }, {"num_hidden_layers", "above the limit"});
}

TEST(ConfigLimits, TrainConfigNumbersMustFitTheirFields) {
  const json base = {{"format", "hybridlm-train-config"}, {"version", 1}, {"job", "pretrain"}};
  for (const auto& [key, value] : std::vector<std::pair<std::string, json>>{
           {"tokens", 1e300}, {"data_seed", -1.5e30}, {"data_seed", -1}, {"seq_len", "64"}, {"lr_rec", "fast"}}) {
    json j = base;
    j[key] = value;
    SCOPED_TRACE(key + " = " + value.dump());
    expect_input_error([&] { train_config_from_json(j, "train_config.json"); }, {"train_config.json", key});
  }
  json wrong_format = base;
  wrong_format["format"] = 5;
  expect_input_error([&] { train_config_from_json(wrong_format, "t.json"); }, {"t.json", "not a hybridlm training"});
  json wrong_job = base;
  wrong_job["job"] = json::array({1});
  expect_input_error([&] { train_config_from_json(wrong_job, "t.json"); }, {"t.json", "unknown job"});
}

TEST(ConfigLimits, StudyConfigNumbersMustFitTheirFields) {
  const std::vector<json> bad = {
      {{"pretrain", {{"tokens", 1e300}}}},
      {{"placements", {{"full", 1e300}}}},
      {{"analysis", {{"max_pairs", -1e30}}}},
      {{"analysis", {{"locality_k", {1, 1e300}}}}},
      {{"placements", {{"convert_seed", -1}}}},
  };
  for (const json& j : bad) {
    SCOPED_TRACE(j.dump());
    expect_input_error([&] { study_config_from_json(j, "study.json"); }, {"study.json"});
  }
  // A teacher config asking for 10^10 layers is refused by the config parser, not expanded into a list first.
  json model = golden_config("qwen3_tied");
  model.erase("layer_types");
  model["num_hidden_layers"] = int64_t{10000000000};
  const StudyConfig c = study_config_from_json({{"teacher", {{"model_config", model}}}}, "study.json");
  EXPECT_FALSE(c.teacher_model.contains("layer_types"));
  expect_input_error([&] { study_teacher_layers(c); }, {"num_hidden_layers"});
}

TEST(ConfigLimits, TokenizerIdsAtOrAbove2To24AreRefused) {
  // A vocabulary id of 10^9 would size the id tables at 10^9 entries (tens of GB) before anything else failed.
  test::ScratchDir scratch("limits");
  const json fixture = json_file_read(std::filesystem::path(HLM_GOLDEN_DIR) / "tokenizer/fixtures/tiny_byte_level.json");
  const auto write = [&](const json& j) {
    const std::filesystem::path path = scratch.path() / "tokenizer.json";
    std::ofstream(path) << j.dump();
    return path.string();
  };
  json vocab_id = fixture;
  vocab_id["model"]["vocab"]["zz"] = 1000000000;
  expect_input_error([&] { tokenizer_load(write(vocab_id)); }, {"vocab", "\"zz\"", "below 2^24"});
  json added = fixture;
  added["added_tokens"] = json::array({{{"id", kTokenizerMaxVocab}, {"content", "<x>"}, {"special", true}}});
  expect_input_error([&] { tokenizer_load(write(added)); }, {"added_tokens[0]", "below 2^24"});
  json largest = fixture;  // the last allowed id still loads
  largest["model"]["vocab"]["zz"] = 70000;
  EXPECT_EQ(tokenizer_load(write(largest))->vocab_size(), 70001);
}
