// Models for the inference tests: the committed HF goldens of the four architectures' families and of Granite-4.0-H
// (real HF configs and weights) plus a randomly created qwen3_hybrid student with GQA and unequal GDN dims (Hk 2 ≠
// Hv 4, dk 8 ≠ dv 12) and a granite-style multiplier set, so shared code sees every per-architecture fact the forward
// uses. Also the engine tests' shared steps (CPU and CUDA engines alike).
#pragma once
#include <algorithm>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/rng.h"
#include "infer/inference_engine.h"
#include "models/model.h"

namespace hlm::test {

struct InferModelCase {
  std::string name;
  Model (*make)();
};

inline Model load_golden_model(const std::string& name) {
  return Model::load(std::filesystem::path(HLM_GOLDEN_DIR) / name);
}

inline nlohmann::json student_config_json() {
  return {{"model_type", "qwen3_hybrid"},
          {"vocab_size", 96},
          {"hidden_size", 40},
          {"intermediate_size", 72},
          {"num_hidden_layers", 4},
          {"num_attention_heads", 4},
          {"num_key_value_heads", 2},
          {"head_dim", 12},
          {"max_position_embeddings", 256},
          {"tie_word_embeddings", true},
          {"layer_types", {"linear_attention", "full_attention", "linear_attention", "full_attention"}},
          {"linear_num_key_heads", 2},
          {"linear_num_value_heads", 4},
          {"linear_key_head_dim", 8},
          {"linear_value_head_dim", 12},
          {"linear_allow_neg_eigval", true}};
}

// OLMo-3 with sliding windows (3 < the test sequences) on layers 0, 1, 3 and a full layer 2, RoPE per layer type
// (YaRN on the full layer, default with another theta on the sliding ones), GQA 2:1, head_dim 12 (q width 48 != 40).
inline nlohmann::json olmo3_config_json() {
  return {{"model_type", "olmo3"},
          {"vocab_size", 96},
          {"hidden_size", 40},
          {"intermediate_size", 72},
          {"num_hidden_layers", 4},
          {"num_attention_heads", 4},
          {"num_key_value_heads", 2},
          {"head_dim", 12},
          {"max_position_embeddings", 256},
          {"sliding_window", 3},
          {"layer_types", {"sliding_attention", "sliding_attention", "full_attention", "sliding_attention"}},
          {"rope_parameters",
           {{"full_attention",
             {{"rope_type", "yarn"}, {"rope_theta", 100.0}, {"factor", 4.0}, {"original_max_position_embeddings", 16}}},
            {"sliding_attention", {{"rope_type", "default"}, {"rope_theta", 500.0}}}}}};
}

// Cohere2 (Tiny Aya's architecture): parallel LayerNorm blocks, window 3 on layers 0, 2, 3 (interleaved RoPE), a
// NoPE full layer 1, GQA 2:1, tied embeddings, logits × 0.0625.
inline nlohmann::json cohere2_config_json() {
  return {{"model_type", "cohere2"},
          {"vocab_size", 96},
          {"hidden_size", 40},
          {"intermediate_size", 72},
          {"num_hidden_layers", 4},
          {"num_attention_heads", 4},
          {"num_key_value_heads", 2},
          {"max_position_embeddings", 256},
          {"sliding_window", 3},
          {"layer_types", {"sliding_attention", "full_attention", "sliding_attention", "sliding_attention"}},
          {"rope_parameters", {{"rope_type", "default"}, {"rope_theta", 1000.0}}}};
}

inline std::vector<InferModelCase> infer_model_cases() {
  return {
      {"qwen3_untied", [] { return load_golden_model("qwen3_untied"); }},
      {"qwen3_yarn", [] { return load_golden_model("qwen3_yarn"); }},
      {"granite", [] { return load_golden_model("granite"); }},
      {"olmo_hybrid_tiny", [] { return load_golden_model("olmo_hybrid_tiny"); }},
      {"qwen3_hybrid_student", [] { return Model::create(parse_model_config(student_config_json(), "test"), 11); }},
      {"olmo3_sliding", [] { return Model::create(parse_model_config(olmo3_config_json(), "test"), 12); }},
      {"cohere2_sliding", [] { return Model::create(parse_model_config(cohere2_config_json(), "test"), 13); }},
      // Granite-4.0-H: Mamba-2 layers (conv + SSM state per sequence) with NoPE attention, dense and with experts.
      {"granitemoehybrid_tiny", [] { return load_golden_model("granitemoehybrid_tiny"); }},
      {"granitemoehybrid_moe_tiny", [] { return load_golden_model("granitemoehybrid_moe_tiny"); }},
      // Ring-mini-linear-2.0 shape: Lightning Attention-2 layers (a D×D state per head, RoPE at absolute positions)
      // with GQA softmax layers, the sigmoid-routed experts and a dense layer 0.
      {"bailing_moe_linear_tiny", [] { return load_golden_model("bailing_moe_linear_tiny"); }},
  };
}

// n ids drawn uniformly from [0, vocab) (counter-based: the same on every run).
inline std::vector<int32_t> random_ids(int64_t n, int64_t vocab, uint64_t stream) {
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    ids[i] =
        std::min<int32_t>(static_cast<int32_t>(rng_uniform(99, stream, i) * vocab), static_cast<int32_t>(vocab - 1));
  return ids;
}

// One engine step of one sequence: ids appended to slot's sequence; the logits of its last position [1, vocab].
inline Tensor step_one(InferenceEngine& engine, int slot, const std::vector<int32_t>& ids) {
  TokenBatch b;
  b.add_sequence(ids);
  const int one[1] = {slot};
  return engine.step(one, b);
}

// Whether any layer is softmax attention (full or windowed): the layers with a KV cache.
inline bool has_attention_layer(const ModelConfig& c) {
  return std::find(c.layer_kinds.begin(), c.layer_kinds.end(), LayerKind::FullAttention) != c.layer_kinds.end();
}

}  // namespace hlm::test
