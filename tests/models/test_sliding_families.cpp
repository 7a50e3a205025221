// The sliding-window families of issue #23 item 3 below the HF goldens (test_golden_parity.cpp has those):
// OLMo-3 (`olmo3`) and Cohere2 (`cohere2`, Tiny Aya's architecture) config.json as transformers 5.17's
// Olmo3Config / Cohere2Config read them (class defaults, RoPE per layer type, forced head_dim, LayerNorm eps,
// logit_scale), the state-size accounting of window layers (a window layer's KV is bounded by the window), and the
// window's reach through the model: with only sliding layers of window W, a token influences positions at most
// L·(W−1) after it, and one more position must see it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "models/hf_config.h"
#include "models/model.h"
#include "models/state_size.h"

using namespace hlm;
using json = nlohmann::json;

namespace {

json olmo3_base() {
  return {{"model_type", "olmo3"},    {"vocab_size", 64},         {"hidden_size", 32},
          {"intermediate_size", 48},  {"num_hidden_layers", 8},   {"num_attention_heads", 4},
          {"num_key_value_heads", 2}};
}

json cohere2_base() {
  return {{"model_type", "cohere2"},  {"vocab_size", 64},         {"hidden_size", 32},
          {"intermediate_size", 48},  {"num_hidden_layers", 4},   {"num_attention_heads", 4},
          {"num_key_value_heads", 2}};
}

ModelConfig parse(const json& j) { return parse_model_config(j, "test/config.json"); }

void expect_input_error(const json& j, const std::string& needle) {
  try {
    parse(j);
    ADD_FAILURE() << "no error, expected one containing '" << needle << "' for " << j.dump();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Input);
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(Olmo3Config, ClassDefaults) {
  const ModelConfig c = parse(olmo3_base());
  EXPECT_EQ(c.architecture, Architecture::Olmo3);
  ASSERT_EQ(c.layer_types.size(), 8u);
  for (int64_t i = 0; i < 8; ++i) {  // full iff (i + 1) % 4 == 0: three sliding layers per full one
    EXPECT_EQ(c.layer_types[static_cast<size_t>(i)], (i + 1) % 4 == 0 ? "full_attention" : "sliding_attention");
    EXPECT_EQ(c.layer_kinds[static_cast<size_t>(i)], LayerKind::FullAttention);  // softmax attention either way
    EXPECT_EQ(c.attention_window(i), (i + 1) % 4 == 0 ? 0 : 4096);
  }
  EXPECT_EQ(c.sliding_window, 4096);
  EXPECT_EQ(c.head_dim, 8);  // hidden // heads
  EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-5);
  EXPECT_DOUBLE_EQ(c.rope.rope_theta, 500000.0);  // Olmo3Config.default_theta
  ASSERT_TRUE(c.sliding_rope.has_value());
  EXPECT_DOUBLE_EQ(c.sliding_rope->rope_theta, 500000.0);
  EXPECT_EQ(c.eos_token_ids, std::vector<int64_t>{50279});
  EXPECT_TRUE(c.unknown_keys.empty());
}

TEST(Olmo3Config, RopePerLayerTypeAndLegacyScalingOnFullLayersOnly) {
  json j = olmo3_base();
  j["max_position_embeddings"] = 64;
  j["rope_parameters"] = {{"full_attention", {{"rope_type", "yarn"}, {"rope_theta", 10.0}, {"factor", 4.0},
                                              {"original_max_position_embeddings", 16}}},
                          {"sliding_attention", {{"rope_type", "default"}, {"rope_theta", 500.0}}}};
  ModelConfig c = parse(j);
  EXPECT_EQ(c.rope.rope_type, "yarn");
  ASSERT_TRUE(c.sliding_rope.has_value());
  EXPECT_EQ(c.sliding_rope->rope_type, "default");
  EXPECT_DOUBLE_EQ(c.sliding_rope->rope_theta, 500.0);
  EXPECT_TRUE(c.unknown_keys.empty());
  // Written and read back: the same per-layer-type parameters.
  const ModelConfig back = parse(model_config_to_json(c));
  EXPECT_EQ(back.rope.rope_type, "yarn");
  EXPECT_DOUBLE_EQ(back.sliding_rope->rope_theta, 500.0);
  EXPECT_EQ(back.sliding_window, c.sliding_window);
  EXPECT_EQ(back.layer_types, c.layer_types);

  // 4.x form: rope_theta + rope_scaling; the scaling is merged into full_attention only.
  json legacy = olmo3_base();
  legacy["max_position_embeddings"] = 64;
  legacy["rope_theta"] = 1000.0;
  legacy["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 16}};
  c = parse(legacy);
  EXPECT_EQ(c.rope.rope_type, "yarn");
  EXPECT_DOUBLE_EQ(c.rope.rope_theta, 1000.0);
  EXPECT_EQ(c.sliding_rope->rope_type, "default");
  EXPECT_DOUBLE_EQ(c.sliding_rope->rope_theta, 1000.0);
}

TEST(Olmo3Config, InputErrors) {
  json j = olmo3_base();
  j["sliding_window"] = nullptr;
  expect_input_error(j, "sliding_window");
  j = olmo3_base();
  j["layer_types"] = json::array({"sliding_attention", "linear_attention", "full_attention", "full_attention",
                                  "full_attention", "full_attention", "full_attention", "full_attention"});
  expect_input_error(j, "expected 'full_attention' or 'sliding_attention'");
  j = olmo3_base();  // sliding_window null is fine when no layer slides
  j["sliding_window"] = nullptr;
  j["layer_types"] = json::array();
  for (int i = 0; i < 8; ++i) j["layer_types"].push_back("full_attention");
  EXPECT_EQ(parse(j).attention_window(0), 0);
}

TEST(Cohere2Config, ClassDefaultsAndForcedHeadDim) {
  json j = cohere2_base();
  j["head_dim"] = 12;  // Cohere2Config.__post_init__ overrides it with hidden // heads
  j["layer_norm_eps"] = 1e-4;
  j["sliding_window_pattern"] = 2;
  j["sliding_window"] = 7;
  const ModelConfig c = parse(j);
  EXPECT_EQ(c.architecture, Architecture::Cohere2);
  EXPECT_EQ(c.head_dim, 8);
  EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-4);  // the norm eps, whatever the key
  EXPECT_DOUBLE_EQ(c.logit_scale, 0.0625);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_TRUE(c.rope.interleaved);
  EXPECT_TRUE(c.nope_full_layers);
  EXPECT_FALSE(c.sliding_rope.has_value());
  EXPECT_EQ(c.layer_types, (std::vector<std::string>{"sliding_attention", "full_attention", "sliding_attention",
                                                     "full_attention"}));
  EXPECT_EQ(c.attention_window(0), 7);
  EXPECT_EQ(c.attention_window(1), 0);
  EXPECT_TRUE(c.unknown_keys.empty()) << c.unknown_keys.front();
  const ModelConfig back = parse(model_config_to_json(c));
  EXPECT_DOUBLE_EQ(back.rms_norm_eps, 1e-4);
  EXPECT_DOUBLE_EQ(back.logit_scale, 0.0625);
  EXPECT_EQ(back.layer_types, c.layer_types);
  j["use_qk_norm"] = true;
  expect_input_error(j, "use_qk_norm");
}

TEST(SlidingStateSizes, WindowLayersAreBoundedByTheWindow) {
  json j = olmo3_base();
  j["sliding_window"] = 1024;
  const ModelConfig c = parse(j);
  const StateSizes s = state_sizes(c, 10000, 2);
  EXPECT_EQ(s.full_attention_layers, 2);
  EXPECT_EQ(s.sliding_attention_layers, 6);
  EXPECT_EQ(s.sliding_window, 1024);
  EXPECT_EQ(s.kv_elements_per_token, 2 * 2 * 8);
  EXPECT_EQ(s.kv_elements_at_context, 32 * 10000);
  EXPECT_EQ(s.kv_elements_at_window, 32 * 1024);
  EXPECT_EQ(s.model_elements_at_context, 2 * 32 * 10000 + 6 * 32 * 1024);
  EXPECT_EQ(state_sizes(c, 100, 2).kv_elements_at_window, 32 * 100);  // shorter contexts: the whole context
}

// Logits of every position for `ids` (one sequence).
Tensor all_logits(Model& m, const std::vector<int32_t>& ids) {
  TokenBatch batch;
  batch.add_sequence(ids);
  return m.forward(batch, {.all_logits = true}).clone();
}

TEST(SlidingWindowReach, ATokenReachesExactlyLayersTimesWindowMinusOnePositions) {
  for (const char* type : {"olmo3", "cohere2"}) {
    json j = std::string(type) == "olmo3" ? olmo3_base() : cohere2_base();
    const int64_t L = 3, W = 3;
    j["num_hidden_layers"] = L;
    j["sliding_window"] = W;
    j["layer_types"] = json::array({"sliding_attention", "sliding_attention", "sliding_attention"});
    Model m = Model::create(parse(j), 5);
    std::vector<int32_t> ids(14);
    for (size_t t = 0; t < ids.size(); ++t) ids[t] = static_cast<int32_t>((7 * t + 3) % 64);
    const Tensor a = all_logits(m, ids);
    ids[0] = (ids[0] + 11) % 64;  // change the first token
    const Tensor b = all_logits(m, ids);
    const int64_t V = 64, reach = L * (W - 1);  // positions 0 .. reach can see token 0 (through L windows)
    for (int64_t t = 0; t < static_cast<int64_t>(ids.size()); ++t) {
      double diff = 0.0;
      for (int64_t v = 0; v < V; ++v)
        diff = std::max(diff, static_cast<double>(std::fabs(a.f32()[t * V + v] - b.f32()[t * V + v])));
      if (t <= reach)
        EXPECT_GT(diff, 0.0) << type << " position " << t << " should see token 0";
      else
        EXPECT_EQ(diff, 0.0) << type << " position " << t << " is beyond the windows' reach";
    }
  }
}

}  // namespace
