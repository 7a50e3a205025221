// The hybrid student (qwen3_hybrid): config with layer_types and linear_* keys, random creation, save/load round trip,
// capture points of both layer kinds, and the inference-memory arithmetic of `inspect` (Olmo Hybrid Table 1).
#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>

#include "models/model.h"
#include "models/state_size.h"
#include "support/run_binary.h"

using namespace hlm;

namespace {

nlohmann::json student_config_json() {
  return {{"model_type", "qwen3_hybrid"},
          {"vocab_size", 300},
          {"hidden_size", 48},
          {"intermediate_size", 96},
          {"num_hidden_layers", 4},
          {"num_attention_heads", 4},
          {"num_key_value_heads", 2},
          {"head_dim", 12},
          {"tie_word_embeddings", false},
          {"layer_types", {"full_attention", "linear_attention", "linear_attention", "full_attention"}},
          {"linear_allow_neg_eigval", true}};
}

TokenBatch two_sequences() {
  TokenBatch b;
  b.add_sequence({5, 17, 250, 3, 99, 42, 7});
  b.add_sequence({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11});
  return b;
}

}  // namespace

TEST(HybridStudent, ConfigDefaultsFollowAlgorithm1) {
  const ModelConfig c = parse_model_config(student_config_json(), "test");
  ASSERT_TRUE(c.linear.has_value());
  EXPECT_EQ(c.linear->num_key_heads, 4);   // H heads ...
  EXPECT_EQ(c.linear->num_value_heads, 4);
  EXPECT_EQ(c.linear->key_head_dim, 12);   // ... of the teacher's head dim
  EXPECT_EQ(c.linear->value_head_dim, 12);
  EXPECT_TRUE(c.linear->allow_neg_eigval);
  EXPECT_EQ(c.layer_kinds[1], LayerKind::LinearAttention);
  EXPECT_TRUE(c.unknown_keys.empty());
  nlohmann::json missing = student_config_json();
  missing.erase("layer_types");
  EXPECT_THROW(parse_model_config(missing, "test"), Error);
  nlohmann::json bad = student_config_json();
  bad["layer_types"][2] = "sliding_attention";
  EXPECT_THROW(parse_model_config(bad, "test"), Error);
}

TEST(HybridStudent, SaveLoadRoundTripIsExact) {
  const ModelConfig c = parse_model_config(student_config_json(), "test");
  Model created = Model::create(c, 7);
  test::ScratchDir scratch("student");
  created.save(scratch.path());
  Model loaded = Model::load(scratch.path());
  EXPECT_TRUE(loaded.unused_tensors().empty());
  EXPECT_EQ(loaded.config().layer_types, c.layer_types);
  EXPECT_EQ(loaded.config().linear->allow_neg_eigval, true);

  const TokenBatch batch = two_sequences();
  std::map<std::string, int> seen;
  const Capture count = [&](CapturePoint p, int layer, const Tensor&) {
    seen[std::string(capture_point_info(p).name)] += 1;
  };
  const Tensor a = created.forward(batch, {.all_logits = true}, count);
  const Tensor b = loaded.forward(batch, {.all_logits = true});
  ASSERT_EQ(a.numel(), b.numel());
  for (int64_t i = 0; i < a.numel(); ++i) ASSERT_EQ(a.f32()[i], b.f32()[i]) << i;
  for (const char* point : {"attn_in", "attn_delta", "attn_out", "mlp_delta"}) EXPECT_EQ(seen[point], 4) << point;
  EXPECT_EQ(seen["logits"], 1);

  // Capture point values are layer-kind independent in meaning: attn_out = attn_in + attn_delta.
  std::map<std::string, Tensor> values;
  loaded.forward(batch, {}, [&](CapturePoint p, int layer, const Tensor& v) {
    values[std::string(capture_point_info(p).name) + std::to_string(layer)] = v.clone();
  });
  for (int layer : {1, 3}) {
    const Tensor& in = values["attn_in" + std::to_string(layer)];
    const Tensor& d = values["attn_delta" + std::to_string(layer)];
    const Tensor& out = values["attn_out" + std::to_string(layer)];
    for (int64_t i = 0; i < in.numel(); ++i) ASSERT_FLOAT_EQ(out.f32()[i], in.f32()[i] + d.f32()[i]);
  }
}

TEST(HybridStudent, SequencesAreIndependent) {
  Model m = Model::create(parse_model_config(student_config_json(), "test"), 3);
  const TokenBatch both = two_sequences();
  TokenBatch second;
  second.add_sequence(std::vector<int32_t>(both.ids.begin() + 7, both.ids.end()));
  const Tensor packed = m.forward(both);     // last-token logits [2, V]
  const Tensor alone = m.forward(second);    // [1, V]
  for (int64_t v = 0; v < alone.numel(); ++v) EXPECT_NEAR(packed.f32()[300 + v], alone.f32()[v], 1e-6);
}

TEST(HybridStudent, InspectShowsLayoutAndMemory) {
  Model m = Model::create(parse_model_config(student_config_json(), "test"), 1);
  test::ScratchDir scratch("inspect");
  m.save(scratch.path());
  const auto r = test::run_hybridlm("inspect --json --context 1000 " + scratch.path().string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["layout"], "ARRA");
  EXPECT_EQ(j["layer_types"][1], "linear_attention");
  EXPECT_EQ(j["memory"]["full_attention"]["kv_elements_per_token"], 2 * 2 * 12);
  EXPECT_EQ(j["memory"]["linear_attention"]["state_elements"], 4 * 12 * 12);
  EXPECT_EQ(j["memory"]["model_bytes_at_context"],
            2 * (2 * 48 * 1000 + 2 * (4 * 12 * 12 + (2 * 48 + 48) * 3)));
}

// Olmo Hybrid paper, Table 1 (fp16): a GDN layer of 30 heads, dk 96, dv 192 holds 0.55 M elements = 1.05 MiB; a
// grouped-query attention cache of 8 KV heads of 128 over 4096 tokens holds 8.39 M elements = 16.0 MiB.
TEST(StateSizes, ReproduceOlmoHybridTable1) {
  nlohmann::json j = {{"model_type", "olmo_hybrid"}, {"vocab_size", 100}, {"hidden_size", 4096},
                      {"intermediate_size", 11008}, {"num_hidden_layers", 4}, {"num_attention_heads", 32},
                      {"num_key_value_heads", 8}, {"linear_num_key_heads", 30}, {"linear_num_value_heads", 30},
                      {"linear_key_head_dim", 96}, {"linear_value_head_dim", 192}};
  const ModelConfig c = parse_model_config(j, "test");
  ASSERT_EQ(c.head_dim, 128);  // 4096 / 32, Table 1's d_h
  const StateSizes s = state_sizes(c, 4096, 2);
  EXPECT_EQ(s.recurrent_state_elements, 552960);  // 0.55 M = 1.05 MiB at 2 bytes
  EXPECT_EQ(s.kv_elements_per_token, 2 * 8 * 128);  // K and V of 8 heads of 128
  EXPECT_EQ(s.kv_elements_at_context, 8388608);  // 8.39 M = 16.0 MiB at 2 bytes
  // Short-conv state, which Table 1 leaves out: q, k (30 x 96 each) and v (30 x 192) channels x (kernel 4 - 1).
  EXPECT_EQ(s.conv_state_elements, (2 * 30 * 96 + 30 * 192) * 3);
  EXPECT_EQ(s.model_elements_at_context, 8388608 + 3 * (552960 + (2 * 30 * 96 + 30 * 192) * 3));
  EXPECT_EQ(s.full_attention_layers, 1);  // OLMo-Hybrid default: every 4th layer
  EXPECT_EQ(s.linear_attention_layers, 3);
}
