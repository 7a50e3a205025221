// The five architectures of Olmo Hybrid's synthetic study (its Tables 15–17 columns), built from one SynthConfig as
// model configs the engine already supports: model_type "qwen3_hybrid" (Qwen3 attention with RoPE and per-head q/k
// RMSNorm, pre-norm blocks, SwiGLU MLP; Gated DeltaNet layers with a width-4 short conv, L2-normalised q/k, gated
// output RMSNorm), whose layer_types may be any mix, including all attention or all GDN.
//   transformer   every layer full_attention
//   gdn_neg       every layer linear_attention, β = 2·sigmoid(b) ∈ (0, 2) ("negative eigenvalues")
//   gdn_pos       every layer linear_attention, β = sigmoid(b) ∈ (0, 1) ("positive eigenvalues")
//   hybrid_neg    config.hybrid_layer_types (default: every 4th layer attention, GDN,GDN,GDN,attn), β ∈ (0, 2)
//   hybrid_pos    same layout, β ∈ (0, 1)
// Attention: num_heads query heads = KV heads (no GQA) of head_dim; GDN: num_heads key = value heads, key dim head_dim,
// value dim gdn_value_head_dim. Untied embeddings. max_position_embeddings: max_positions_recall for recall, else
// max_positions_other. Vocabulary: SynthVocab{max_address}.size().
#pragma once
#include <span>
#include <string>
#include <string_view>

#include "evals/synth/synth_config.h"
#include "models/hf_config.h"

namespace hlm {

enum class SynthArch { Transformer, GdnNeg, GdnPos, HybridNeg, HybridPos };

struct SynthArchSpec {
  SynthArch arch;
  const char* name;   // config / directory name
  const char* label;  // table column and plot legend
};

std::span<const SynthArchSpec> synth_arch_specs();  // in table-column order
SynthArch synth_arch_from_name(std::string_view name, std::string_view what = "architecture");
const SynthArchSpec& synth_arch_spec(SynthArch arch);

// The HF-style config.json object of `arch` for `task`, and the parsed ModelConfig.
nlohmann::json synth_model_config_json(const SynthConfig& config, SynthArch arch, SynthTask task);
ModelConfig synth_model_config(const SynthConfig& config, SynthArch arch, SynthTask task);

}  // namespace hlm
