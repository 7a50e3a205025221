// Models for the inference tests: the committed HF goldens of the four architectures' families (real HF configs and
// weights) plus a randomly created qwen3_hybrid student with GQA and unequal GDN dims (Hk 2 ≠ Hv 4, dk 8 ≠ dv 12)
// and a granite-style multiplier set, so shared code sees every per-architecture fact the forward uses.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/rng.h"
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

inline std::vector<InferModelCase> infer_model_cases() {
  return {
      {"qwen3_untied", [] { return load_golden_model("qwen3_untied"); }},
      {"qwen3_yarn", [] { return load_golden_model("qwen3_yarn"); }},
      {"granite", [] { return load_golden_model("granite"); }},
      {"olmo_hybrid_tiny", [] { return load_golden_model("olmo_hybrid_tiny"); }},
      {"qwen3_hybrid_student", [] { return Model::create(parse_model_config(student_config_json(), "test"), 11); }},
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

}  // namespace hlm::test
