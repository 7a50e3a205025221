// Per-architecture facts of the dense decoders hybridlm loads. Each architecture lives in its own file
// (qwen3.cpp, granite.cpp) and contributes one ArchitectureSpec; kArchitectures (architecture.cpp) lists them.
#pragma once
#include <span>
#include <string_view>

#include "models/hf_config.h"

namespace hlm {

// The scalars that distinguish one Llama-family decoder from another in the forward pass.
struct DecoderHyper {
  float embedding_multiplier = 1.0f;
  float residual_multiplier = 1.0f;
  float attention_scale = 1.0f;
  float logits_divisor = 1.0f;  // logits are divided by this (Granite logits_scaling), as HF does
  float logits_multiplier = 1.0f;  // logits are multiplied by this (Cohere2 logit_scale), as HF does
};

// RMSNorm of q and k before RoPE: none, per head over head_dim (Qwen3), or over the whole projection (OLMo).
enum class QkNorm { None, PerHead, WholeProjection };

struct ArchitectureSpec {
  Architecture architecture;
  std::string_view model_type;   // config.json "model_type"
  std::string_view description;
  QkNorm qk_norm;
  // Full-attention layers are post-norm (OLMo 2 style: h += norm(attn(h)); h += norm(mlp(h))) instead of pre-norm.
  bool attention_post_norm;
  DecoderHyper (*hyper)(const ModelConfig&);
  // Parallel block (Cohere2): one norm feeds both branches, h += attn(n) + mlp(n) with n = input_layernorm(h); no
  // post_attention_layernorm.
  bool parallel_block = false;
  // The decoder and final norms are LayerNorm without bias (ops/layernorm: mean subtracted) instead of RMSNorm.
  bool layer_norm = false;
};

extern const ArchitectureSpec kQwen3Spec;
extern const ArchitectureSpec kGraniteSpec;
extern const ArchitectureSpec kOlmoHybridSpec;
extern const ArchitectureSpec kQwen3HybridSpec;
extern const ArchitectureSpec kQwen3MoeSpec;
extern const ArchitectureSpec kOlmo3Spec;
extern const ArchitectureSpec kCohere2Spec;

const ArchitectureSpec& architecture_spec(Architecture architecture);
std::span<const ArchitectureSpec* const> architecture_specs();

}  // namespace hlm
