// config.json parsing: transformers 5.x class defaults (Qwen3Config, GraniteConfig), both rope forms (5.x
// rope_parameters, 4.x rope_theta + rope_scaling), unknown-key reporting, and one test per input error.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "models/hf_config.h"

using namespace hlm;
using json = nlohmann::json;

namespace {

json qwen3_base() {
  return {{"model_type", "qwen3"},      {"vocab_size", 320},         {"hidden_size", 64},
          {"intermediate_size", 128},   {"num_hidden_layers", 2},    {"num_attention_heads", 4},
          {"num_key_value_heads", 2},   {"head_dim", 16}};
}

json granite_base() {
  return {{"model_type", "granite"},   {"vocab_size", 320},       {"hidden_size", 64},
          {"intermediate_size", 128},  {"num_hidden_layers", 2},  {"num_attention_heads", 4}};
}

ModelConfig parse(const json& j) { return parse_model_config(j, "test/config.json"); }

// Parsing must fail with an input error whose message names the file and contains `needle`.
void expect_input_error(const json& j, const std::string& needle) {
  try {
    parse(j);
    ADD_FAILURE() << "no error, expected one containing '" << needle << "' for " << j.dump();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Input);
    const std::string what = e.what();
    EXPECT_NE(what.find("test/config.json"), std::string::npos) << what;
    EXPECT_NE(what.find(needle), std::string::npos) << what;
  }
}

json with(json j, const std::string& key, const json& value) {
  j[key] = value;
  return j;
}

json without(json j, const std::string& key) {
  j.erase(key);
  return j;
}

}  // namespace

TEST(HfConfig, Qwen3ClassDefaults) {
  // HF's Qwen3Config defaults when the keys are absent: kv heads 32, head_dim 128 (not hidden / heads).
  json j = without(without(qwen3_base(), "num_key_value_heads"), "head_dim");
  j["num_attention_heads"] = 32;
  const ModelConfig c = parse(j);
  EXPECT_EQ(c.architecture, Architecture::Qwen3);
  EXPECT_EQ(c.num_key_value_heads, 32);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.max_position_embeddings, 32768);
  EXPECT_EQ(c.rms_norm_eps, 1e-6);
  EXPECT_EQ(c.hidden_act, "silu");
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_FALSE(c.attention_bias);
  EXPECT_FALSE(c.mlp_bias);
  EXPECT_EQ(c.rope.rope_type, "default");
  EXPECT_EQ(c.rope.rope_theta, 10000.0);
  EXPECT_EQ(c.layer_types, std::vector<std::string>(2, "full_attention"));
  EXPECT_FALSE(c.bos_token_id.has_value());
  EXPECT_FALSE(c.eos_token_id.has_value());
  EXPECT_FALSE(c.attention_multiplier.has_value());
  EXPECT_EQ(c.attention_scale(), static_cast<float>(std::pow(128.0, -0.5)));
  EXPECT_EQ(c.embedding_multiplier, 1.0);
  EXPECT_TRUE(c.unknown_keys.empty());
}

TEST(HfConfig, Qwen3NullKvHeadsMeansAttentionHeads) {
  const ModelConfig c = parse(with(qwen3_base(), "num_key_value_heads", nullptr));
  EXPECT_EQ(c.num_key_value_heads, 4);
}

TEST(HfConfig, GraniteClassDefaults) {
  const ModelConfig c = parse(granite_base());
  EXPECT_EQ(c.architecture, Architecture::Granite);
  EXPECT_EQ(c.num_key_value_heads, 4);  // GraniteConfig: None -> num_attention_heads
  EXPECT_EQ(c.head_dim, 16);            // hidden_size // num_attention_heads
  EXPECT_EQ(c.max_position_embeddings, 2048);
  EXPECT_EQ(c.bos_token_id, 1);
  EXPECT_EQ(c.eos_token_id, 2);
  EXPECT_FALSE(c.mlp_bias);
  EXPECT_EQ(c.embedding_multiplier, 1.0);
  EXPECT_EQ(c.residual_multiplier, 1.0);
  EXPECT_EQ(c.logits_scaling, 1.0);
  // GraniteConfig.attention_multiplier defaults to 1.0, so the softmax scale is 1, not head_dim^-1/2.
  ASSERT_TRUE(c.attention_multiplier.has_value());
  EXPECT_EQ(c.attention_scale(), 1.0f);
}

TEST(HfConfig, GraniteMultipliers) {
  json j = granite_base();
  j["embedding_multiplier"] = 6.0;
  j["residual_multiplier"] = 0.3;
  j["attention_multiplier"] = 0.1;
  j["logits_scaling"] = 4;  // ints are numbers too
  j["mlp_bias"] = true;
  j["num_key_value_heads"] = 2;
  const ModelConfig c = parse(j);
  EXPECT_EQ(c.embedding_multiplier, 6.0);
  EXPECT_EQ(c.residual_multiplier, 0.3);
  EXPECT_EQ(c.attention_scale(), 0.1f);
  EXPECT_EQ(c.logits_scaling, 4.0);
  EXPECT_TRUE(c.mlp_bias);
  EXPECT_EQ(c.num_key_value_heads, 2);
}

TEST(HfConfig, RopeParametersForm) {
  json j = with(qwen3_base(), "max_position_embeddings", 64);
  j["rope_parameters"] = {{"rope_type", "yarn"}, {"rope_theta", 1e6}, {"factor", 4.0},
                          {"original_max_position_embeddings", 16}, {"beta_fast", 16}, {"truncate", false}};
  const ModelConfig c = parse(j);
  EXPECT_EQ(c.rope.rope_type, "yarn");
  EXPECT_EQ(c.rope.rope_theta, 1e6);
  EXPECT_EQ(c.rope.factor, 4.0);
  EXPECT_EQ(c.rope.original_max_position_embeddings, 16);
  EXPECT_EQ(c.rope.beta_fast, 16.0);
  EXPECT_EQ(c.rope.beta_slow, 1.0);
  EXPECT_FALSE(c.rope.truncate);
  EXPECT_FALSE(c.rope.attention_factor.has_value());
  EXPECT_TRUE(c.unknown_keys.empty());
}

TEST(HfConfig, LegacyRopeScalingFormMatchesNewForm) {
  json legacy = with(qwen3_base(), "max_position_embeddings", 64);
  legacy["rope_theta"] = 1e6;
  legacy["rope_scaling"] = {{"type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 16}};
  json modern = with(qwen3_base(), "max_position_embeddings", 64);
  modern["rope_parameters"] = {{"rope_type", "yarn"}, {"rope_theta", 1e6}, {"factor", 4.0},
                               {"original_max_position_embeddings", 16}};
  const ModelConfig a = parse(legacy), b = parse(modern);
  EXPECT_EQ(a.rope.rope_type, b.rope.rope_type);
  EXPECT_EQ(a.rope.rope_theta, b.rope.rope_theta);
  EXPECT_EQ(a.rope.factor, b.rope.factor);
  EXPECT_EQ(a.rope.original_max_position_embeddings, b.rope.original_max_position_embeddings);
  EXPECT_TRUE(a.unknown_keys.empty());

  // 4.x file without scaling: rope_scaling null, rope_theta at top level.
  json plain = with(qwen3_base(), "rope_theta", 5e5);
  plain["rope_scaling"] = nullptr;
  EXPECT_EQ(parse(plain).rope.rope_type, "default");
  EXPECT_EQ(parse(plain).rope.rope_theta, 5e5);
}

TEST(HfConfig, RopeStandardisationCorners) {
  json j = with(qwen3_base(), "max_position_embeddings", 64);
  // yarn: a null factor is max / original; a missing original max is max_position_embeddings.
  j["rope_parameters"] = {{"rope_type", "yarn"}, {"factor", nullptr}, {"original_max_position_embeddings", 16}};
  EXPECT_EQ(parse(j).rope.factor, 4.0);
  j["rope_parameters"] = {{"rope_type", "yarn"}, {"factor", 2.0}};
  EXPECT_EQ(parse(j).rope.original_max_position_embeddings, 64);
  // A top-level original_max_position_embeddings overrides the dict's (HF's Phi3 rule).
  j["original_max_position_embeddings"] = 32;
  EXPECT_EQ(parse(j).rope.original_max_position_embeddings, 32);
  // Per-layer-type form with only full_attention.
  json k = qwen3_base();
  k["rope_parameters"] = {{"full_attention", {{"rope_type", "linear"}, {"factor", 2.0}, {"rope_theta", 1e4}}}};
  EXPECT_EQ(parse(k).rope.rope_type, "linear");
  EXPECT_EQ(parse(k).rope.factor, 2.0);
  // llama3 with all required keys.
  json l = with(qwen3_base(), "max_position_embeddings", 1024);
  l["rope_parameters"] = {{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0},
                          {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 64}};
  EXPECT_EQ(parse(l).rope.high_freq_factor, 4.0);
  EXPECT_EQ(parse(l).rope.original_max_position_embeddings, 64);
}

TEST(HfConfig, PartialRotaryFactor) {
  // Qwen3/Granite's default rope uses the whole head_dim: HF ignores the factor there.
  json j = qwen3_base();
  j["rope_parameters"] = {{"rope_type", "default"}, {"partial_rotary_factor", 0.5}};
  EXPECT_EQ(parse(j).rope.partial_rotary_factor, 1.0);
  // Elsewhere HF's shapes would not broadcast: refuse.
  j["rope_parameters"] = {{"rope_type", "linear"}, {"factor", 2.0}, {"partial_rotary_factor", 0.5}};
  expect_input_error(j, "partial_rotary_factor");
}

TEST(HfConfig, UnknownKeysAreSortedAndIgnoredKeysSilent) {
  json j = qwen3_base();
  j["zeta_param"] = 1;
  j["alpha_param"] = true;
  j["mlp_bias"] = false;  // Qwen3 has no mlp_bias: HF never reads it
  for (const char* key : {"architectures", "transformers_version", "initializer_range", "use_cache",
                          "pad_token_id", "attention_dropout", "max_window_layers"})
    j[key] = nullptr;
  j["dtype"] = "bfloat16";
  j["sliding_window"] = 4096;  // irrelevant while use_sliding_window is false
  j["use_sliding_window"] = false;
  j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 1e6}, {"factor", 2.0}};
  const ModelConfig c = parse(j);
  EXPECT_EQ(c.unknown_keys,
            (std::vector<std::string>{"alpha_param", "mlp_bias", "rope_parameters.factor", "zeta_param"}));
  EXPECT_EQ(c.dtype, "bfloat16");
}

TEST(HfConfig, TokenIdsAndDtype) {
  json j = qwen3_base();
  j["bos_token_id"] = 7;
  j["eos_token_id"] = json::array({11, 12});
  j["torch_dtype"] = "float32";
  const ModelConfig c = parse(j);
  EXPECT_EQ(c.bos_token_id, 7);
  EXPECT_EQ(c.eos_token_id, 11);
  EXPECT_EQ(c.eos_token_ids, (std::vector<int64_t>{11, 12}));
  EXPECT_EQ(c.dtype, "float32");
  EXPECT_TRUE(c.unknown_keys.empty());
}

TEST(HfConfig, LayerTypes) {
  EXPECT_EQ(parse(with(qwen3_base(), "layer_types", {"full_attention", "full_attention"})).layer_types.size(), 2u);
  expect_input_error(with(qwen3_base(), "layer_types", {"full_attention"}), "num_hidden_layers");
  expect_input_error(with(qwen3_base(), "layer_types", {"full_attention", "sliding_attention"}),
                     "only 'full_attention'");
  expect_input_error(with(granite_base(), "layer_types", {"linear_attention", "full_attention"}),
                     "only 'full_attention'");
}

TEST(HfConfig, ToJsonRoundTrips) {
  json j = granite_base();
  j["embedding_multiplier"] = 6.0;
  j["attention_multiplier"] = 0.1;
  j["eos_token_id"] = json::array({2, 3});
  j["max_position_embeddings"] = 64;
  j["rope_parameters"] = {{"rope_type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 16},
                          {"mscale", 1.0}, {"mscale_all_dim", 0.5}};
  const ModelConfig a = parse(j);
  const json out = model_config_to_json(a);
  EXPECT_EQ(out["architectures"][0], "GraniteForCausalLM");
  const ModelConfig b = parse(out);
  EXPECT_TRUE(b.unknown_keys.empty()) << out.dump();
  EXPECT_EQ(model_config_to_json(b), out);
  EXPECT_EQ(b.rope.mscale_all_dim, 0.5);
  EXPECT_EQ(b.eos_token_ids, a.eos_token_ids);
  EXPECT_EQ(b.attention_scale(), 0.1f);
}

TEST(HfConfig, LoadFromDirectoryAndMalformedJson) {
  const auto dir = std::filesystem::temp_directory_path() / ("hlm_hf_config_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  {
    std::ofstream(dir / "config.json") << qwen3_base().dump();
  }
  EXPECT_EQ(load_model_config(dir).hidden_size, 64);
  {
    std::ofstream(dir / "config.json") << "{\"model_type\": \"qwen3\", ";
  }
  try {
    load_model_config(dir / "config.json");
    ADD_FAILURE() << "malformed JSON accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Input);
    EXPECT_NE(std::string(e.what()).find("config.json: malformed JSON"), std::string::npos) << e.what();
  }
  EXPECT_THROW(load_model_config(dir / "absent.json"), Error);
  std::filesystem::remove_all(dir);
}

TEST(HfConfig, InputErrors) {
  expect_input_error(json::array(), "JSON object");
  expect_input_error(without(qwen3_base(), "hidden_size"), "missing required key 'hidden_size'");
  expect_input_error(without(qwen3_base(), "model_type"), "missing required key 'model_type'");
  expect_input_error(with(qwen3_base(), "hidden_size", "64"), "'hidden_size' must be an integer");
  expect_input_error(with(qwen3_base(), "hidden_size", 64.0), "'hidden_size' must be an integer");
  expect_input_error(with(qwen3_base(), "head_dim", nullptr), "'head_dim' must be an integer");
  expect_input_error(with(qwen3_base(), "tie_word_embeddings", "true"), "must be true or false");
  expect_input_error(with(qwen3_base(), "rms_norm_eps", "1e-6"), "must be a number");
  expect_input_error(with(qwen3_base(), "num_hidden_layers", 0), "'num_hidden_layers' must be > 0");
  expect_input_error(with(qwen3_base(), "vocab_size", -5), "'vocab_size' must be > 0");
  expect_input_error(with(qwen3_base(), "num_key_value_heads", 3), "not a multiple");
  expect_input_error(without(qwen3_base(), "num_key_value_heads"), "not a multiple");  // class default 32 vs 4 heads
  expect_input_error(with(qwen3_base(), "model_type", "llama"), "supported: qwen3, granite");
  expect_input_error(with(qwen3_base(), "hidden_act", "gelu"), "hidden_act 'gelu'");
  expect_input_error(with(qwen3_base(), "use_sliding_window", true), "use_sliding_window");
  expect_input_error(with(qwen3_base(), "rope_parameters", {{"rope_type", "longrope"}}), "unsupported rope type");
  expect_input_error(with(qwen3_base(), "rope_scaling", {{"type", "su"}, {"factor", 2.0}}), "unsupported rope type");
  expect_input_error(with(qwen3_base(), "rope_parameters", {{"rope_type", "linear"}}), "'rope_parameters.factor'");
  expect_input_error(with(qwen3_base(), "rope_parameters", {{"rope_type", "llama3"}, {"factor", 8.0}}),
                     "low_freq_factor");
  expect_input_error(with(qwen3_base(), "rope_parameters", 3), "'rope_parameters' must be an object");
  expect_input_error(with(qwen3_base(), "rope_parameters", {{"rope_theta", -1.0}}), "rope_theta must be > 0");
  expect_input_error(with(granite_base(), "logits_scaling", 0), "logits_scaling");
  expect_input_error(with(qwen3_base(), "eos_token_id", "x"), "'eos_token_id' must be an integer");
}
