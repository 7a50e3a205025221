// bailing_moe_linear (Ring-mini-linear-2.0): config parsing of the released config.json's keys (layer kinds from
// layer_group_size with its tail clause, partial RoPE, the sigmoid group-limited router, dense first layers) and
// refusals, the Lightning decay against HF's slope formula, the router against hand-worked cases (bias for selection
// only, groups scored by their two best, unbiased weights, scaling), state-size accounting and `inspect`, save round
// trip, the training refusal. Forward parity: GoldenParity's bailing_moe_linear_tiny; the CPU engine: EngineParity
// and GenerateGoldens (tests/infer).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "infer/memory_plan.h"
#include "layers/lightning_layer.h"
#include "layers/moe_layer.h"
#include "models/model.h"
#include "models/state_size.h"
#include "support/golden.h"
#include "support/run_binary.h"

using namespace hlm;
using json = nlohmann::json;

namespace {

// Ring-mini-linear-2.0's config.json as a public MLX port quotes it (quantization keys left out).
json ring_mini_config() {
  return json::parse(R"({
    "architectures": ["BailingMoeLinearV2ForCausalLM"], "attention_dropout": 0.0, "embedding_dropout": 0.0,
    "eos_token_id": 156892, "first_k_dense_replace": 1, "group_norm_size": 4, "head_dim": 128, "hidden_act": "silu",
    "hidden_size": 2048, "intermediate_size": 5120, "layer_group_size": 5, "linear_silu": false,
    "max_position_embeddings": 131072, "model_type": "bailing_moe_linear", "moe_intermediate_size": 512,
    "moe_router_enable_expert_bias": true, "moe_shared_expert_intermediate_size": 512, "n_group": 8,
    "norm_topk_prob": true, "num_attention_heads": 16, "num_experts": 256, "num_experts_per_tok": 8,
    "num_hidden_layers": 20, "num_key_value_heads": 4, "num_nextn_predict_layers": 0, "num_shared_experts": 1,
    "output_dropout": 0.0, "pad_token_id": 156892, "partial_rotary_factor": 0.5, "rms_norm_eps": 1e-06,
    "rope_scaling": null, "rope_theta": 1000000, "routed_scaling_factor": 2.5, "router_dtype": "fp32",
    "score_function": "sigmoid", "tie_word_embeddings": false, "topk_group": 4, "torch_dtype": "bfloat16",
    "transformers_version": "4.56.1", "use_bias": false, "use_cache": true, "use_qk_norm": true,
    "use_qkv_bias": false, "use_rmsnorm": true, "vocab_size": 157184})");
}

std::vector<int> softmax_layers(const ModelConfig& c) {
  std::vector<int> out;
  for (int i = 0; i < static_cast<int>(c.num_hidden_layers); ++i)
    if (c.layer_kinds[static_cast<size_t>(i)] == LayerKind::FullAttention) out.push_back(i);
  return out;
}

TEST(BailingMoeLinear, RingMiniConfigParses) {
  const ModelConfig c = parse_model_config(ring_mini_config(), "ring");
  EXPECT_EQ(c.architecture, Architecture::BailingMoeLinear);
  EXPECT_EQ(softmax_layers(c), (std::vector<int>{4, 9, 14, 19}));
  EXPECT_EQ(c.layer_kinds[0], LayerKind::Lightning);
  EXPECT_FALSE(c.moe_layer(0));  // first_k_dense_replace 1
  EXPECT_TRUE(c.moe_layer(1));
  EXPECT_TRUE(c.moe_layer(19));
  ASSERT_TRUE(c.moe && c.lightning);
  EXPECT_EQ(c.moe->num_experts, 256);
  EXPECT_EQ(c.moe->num_experts_per_tok, 8);
  EXPECT_EQ(c.moe->n_group, 8);
  EXPECT_EQ(c.moe->topk_group, 4);
  EXPECT_TRUE(c.moe->sigmoid_grouped_router);
  EXPECT_FALSE(c.moe->shared_expert_gated);
  EXPECT_EQ(c.moe->shared_expert_intermediate_size, 512);
  EXPECT_DOUBLE_EQ(c.moe->routed_scaling_factor, 2.5);
  EXPECT_EQ(c.lightning->group_norm_size, 4);
  EXPECT_DOUBLE_EQ(c.rope.partial_rotary_factor, 0.5);
  EXPECT_DOUBLE_EQ(c.rope.rope_theta, 1e6);
  EXPECT_EQ(rope_table_build(c.rope, c.head_dim, 64).rotary_dim, 64);
  EXPECT_EQ(c.eos_token_id, 156892);
  EXPECT_TRUE(c.unknown_keys.empty()) << c.unknown_keys.front();
  // The tail clause: 22 layers in groups of 5 also make layers 20 and 21 softmax.
  json j = ring_mini_config();
  j["num_hidden_layers"] = 22;
  EXPECT_EQ(softmax_layers(parse_model_config(j, "ring22")), (std::vector<int>{4, 9, 14, 19, 20, 21}));
  // A config written back by hybridlm reads the same.
  const ModelConfig back = parse_model_config(model_config_to_json(c), "back");
  EXPECT_EQ(back.layer_kinds, c.layer_kinds);
  EXPECT_EQ(back.ffn_kinds, c.ffn_kinds);
  EXPECT_DOUBLE_EQ(back.rope.partial_rotary_factor, 0.5);
  EXPECT_DOUBLE_EQ(back.moe->routed_scaling_factor, 2.5);
}

TEST(BailingMoeLinear, UnsupportedKeysAreRefused) {
  const auto refused = [](const char* key, json value) {
    json j = ring_mini_config();
    j[key] = std::move(value);
    EXPECT_THROW(parse_model_config(j, "ring"), Error) << key;
  };
  refused("score_function", "softmax");
  refused("moe_router_enable_expert_bias", false);
  refused("head_dim", 64);  // head_dim · heads != hidden
  refused("moe_shared_expert_intermediate_size", 1024);
  refused("linear_silu", true);
  refused("use_qkv_bias", true);
  refused("router_dtype", "bf16");
  refused("topk_group", 9);
  refused("group_norm_size", 3);
}

// HF: slope = −build_slope_tensor(H) · (1 − (ℓ − 1)/(L − 1) + 1e−5), slopes 2^(−8(h+1)/H) for a power of two.
TEST(BailingMoeLinear, DecayIsTheHfSlopeFormula) {
  const std::vector<float> g0 = lightning_decay(0, 20, 16);
  const std::vector<float> g19 = lightning_decay(19, 20, 16);
  for (int h = 0; h < 16; ++h) {
    const double s = std::pow(2.0, -0.5 * (h + 1));
    EXPECT_NEAR(g0[h], -s * (1.0 + 1.0 / 19.0 + 1e-5), 3e-7 * s) << h;  // layer 0: factor > 1 (stronger decay)
    EXPECT_NEAR(g19[h], -s * (1.0 - 18.0 / 19.0 + 1e-5), 3e-7 * s) << h;
  }
  // 6 heads (not a power of two): the 4-head slopes, then every other one of the 8-head set.
  const std::vector<float> g = lightning_decay(1, 7, 6);
  const double expect[6] = {std::pow(2.0, -2), std::pow(2.0, -4), std::pow(2.0, -6), std::pow(2.0, -8),
                            std::pow(2.0, -1), std::pow(2.0, -3)};
  for (int h = 0; h < 6; ++h) EXPECT_NEAR(g[h], -expect[h] * (1.0 + 1e-5), 1e-7) << h;
}

// 8 experts in 4 groups of 2, keep 2 groups, top-3. logits chosen so that σ is easy to read; the bias decides.
TEST(BailingMoeLinear, RouterSelectsByBiasedGroupsAndWeighsByUnbiasedScores) {
  MoeDims d{8, 3, true};
  d.sigmoid_grouped = true;
  d.n_group = 4;
  d.topk_group = 2;
  d.routed_scaling = 2.5f;
  const auto sig = [](float x) { return static_cast<float>(1.0 / (1.0 + std::exp(-static_cast<double>(x)))); };
  // Expert 0 has the best single score but its group (0, 1) sums low: group scores (σ + b):
  //   g0 = 0.9 + 0.0 (expert 1 biased down), g1 = 0.6 + 0.6, g2 = 0.55 + 0.55, g3 = 0.5 + 0.5 + (bias +0.2 on 7)
  const float logits[8] = {2.1972246f, -8.0f, 0.4054651f, 0.4054651f, 0.2006707f, 0.2006707f, 0.0f, 0.0f};
  const float bias[8] = {0.0f, -0.5f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.3f};
  std::vector<float> scores(8);
  const MoeRoute r = moe_route_sigmoid_grouped(logits, bias, d, 1, scores.data());
  // Biased: [0.9, -0.4997, 0.6, 0.6, 0.55, 0.55, 0.5, 0.8]; group sums (top 2): g0 0.40, g1 1.2, g2 1.1, g3 1.3.
  // Kept: g3 and g1 -> candidates 2, 3, 6, 7 -> top-3 by biased score: 7 (0.8), 2 (0.6), 3 (0.6; tie -> lower index).
  ASSERT_EQ(r.expert.size(), 3u);
  EXPECT_EQ(r.expert[0], 7);
  EXPECT_EQ(r.expert[1], 2);
  EXPECT_EQ(r.expert[2], 3);
  const float s7 = sig(0.0f), s2 = sig(0.4054651f);  // the UNBIASED σ: 0.5, 0.6
  const float sum = s7 + s2 + s2;
  EXPECT_FLOAT_EQ(r.weight[0], s7 / (sum + 1e-20f) * 2.5f);
  EXPECT_FLOAT_EQ(r.weight[1], s2 / (sum + 1e-20f) * 2.5f);
  EXPECT_FLOAT_EQ(scores[0], sig(2.1972246f));
  // Without renormalisation the weights are σ · scale.
  d.norm_topk_prob = false;
  const MoeRoute raw = moe_route_sigmoid_grouped(logits, bias, d, 1);
  EXPECT_FLOAT_EQ(raw.weight[0], s7 * 2.5f);
  // Without the groups (one group) expert 0 (0.9) comes first.
  d.n_group = 1;
  d.topk_group = 1;
  EXPECT_EQ(moe_route_sigmoid_grouped(logits, bias, d, 1).expert[0], 0);
}

// The golden model (7 layers L L A L L A A, 6 heads of 16, GQA 6:2): state accounting, memory plan, inspect.
TEST(BailingMoeLinear, StateSizesPlanAndInspect) {
  const std::filesystem::path dir = test::golden_dir("bailing_moe_linear_tiny");
  const ModelConfig c = load_model_config(dir);
  const StateSizes s = state_sizes(c, 1000, 2);
  EXPECT_EQ(s.lightning_layers, 4);
  EXPECT_EQ(s.full_attention_layers, 3);
  EXPECT_EQ(s.linear_attention_layers, 0);
  EXPECT_EQ(s.lightning_state_elements, 6 * 16 * 16);
  EXPECT_EQ(s.model_elements_at_context, 3 * 2 * 2 * 16 * 1000 + 4 * 6 * 16 * 16);
  const MemoryPlan plan = memory_plan_shape(c, 16);
  EXPECT_EQ(plan.gdn_layers, 4);
  EXPECT_EQ(plan.gdn_bytes_per_sequence, 4 * 6 * 16 * 16 * 4);
  EXPECT_EQ(plan.attention_layers, 3);
  const auto r = test::run_hybridlm("inspect " + dir.string() + " --json --context 100");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json j = json::parse(r.out);
  EXPECT_EQ(j["model_type"], "bailing_moe_linear");
  EXPECT_EQ(j["layout"], "RRARRAA");
  EXPECT_EQ(j["memory"]["lightning"]["layers"], 4);
  EXPECT_EQ(j["memory"]["lightning"]["state_elements"], 6 * 16 * 16);
  EXPECT_EQ(j["memory"]["full_attention"]["layers"], 3);
  EXPECT_EQ(j["memory"]["linear_attention"]["layers"], 0);
}

// save writes our names (attention.{q,k,v}_proj for the softmax layers' cut query_key_value, model.embed_tokens):
// they load back into bit-identical logits. Training is refused (no Lightning / sigmoid-router backward).
TEST(BailingMoeLinear, SaveRoundTripAndTrainingRefusal) {
  Model m = Model::load(test::golden_dir("bailing_moe_linear_tiny"));
  EXPECT_TRUE(m.unused_tensors().empty());
  const SafetensorsFile golden = test::open_golden("bailing_moe_linear_tiny");
  const TokenBatch batch = test::golden_batch(golden);
  const Tensor logits = m.forward(batch, {.all_logits = true}).clone();
  test::ScratchDir scratch("bailing-save");
  m.save(scratch.path());
  Model back = Model::load(scratch.path());
  EXPECT_TRUE(back.unused_tensors().empty());
  const Tensor again = back.forward(batch, {.all_logits = true});
  ASSERT_EQ(again.numel(), logits.numel());
  for (int64_t i = 0; i < logits.numel(); ++i) ASSERT_EQ(again.f32()[i], logits.f32()[i]) << i;
  ModelStash stash;
  stash.mixer.resize(7);
  stash.mlp.resize(7);
  ForwardOptions train;
  train.stash = &stash;
  EXPECT_THROW(m.forward(batch, train), Error);
}

}  // namespace
