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
  // Gated full attention (Qwen3.5 / Qwen3-Next): the checkpoint's q_proj holds [q_h | gate_h] per head
  // ([Hq·2D, hidden]); the loader splits it into self_attn.q_proj and self_attn.gate_proj and the layer computes
  // out = o_proj(o ⊙ sigmoid(x·gate_projᵀ)) (layers/attention_layer.h).
  bool attention_output_gate = false;
  // Zero-centred RMSNorm (y = n ⊙ (1 + w), w stored as an offset from 1): the decoder, final and q/k norms. The
  // loader stores fl(1 + w), the factor HF multiplies by, so every norm op runs unchanged; save writes w back.
  bool zero_centred_norms = false;
  // Another prefix checkpoints use for the decoder's "model." tensors (a multimodal wrapper's text model:
  // "model.language_model."); lm_head.weight keeps its name.
  std::string_view text_prefix = {};
  // Parallel block (Cohere2): one norm feeds both branches, h += attn(n) + mlp(n) with n = input_layernorm(h); no
  // post_attention_layernorm.
  bool parallel_block = false;
  // The decoder and final norms are LayerNorm without bias (ops/layernorm: mean subtracted) instead of RMSNorm.
  bool layer_norm = false;
  // Qwen3-Next's GDN input projections: in_proj_qkvz / in_proj_ba grouped per key head (TensorRow::fused_grouped)
  // instead of Qwen3.5's flat in_proj_qkv and separate z, b, a.
  bool gdn_grouped_projections = false;
  // Granite-4.0-H: every layer's FFN is a shared SwiGLU MLP (shared_mlp.input_linear [gate | up] / output_linear,
  // stored in DecoderLayerWeights::mlp) plus, on MoE layers, routed experts added to it (no shared-expert gate).
  bool shared_mlp = false;
  // The model_type of the hybrid student that `convert` (models/convert.h, the seed's Algorithm 1) makes from a dense
  // teacher of this architecture: its decoder, with GDN in the converted layers and this architecture's DecoderHyper
  // (e.g. Granite's multipliers). Empty: not a convert teacher.
  std::string_view hybrid_student = {};
  // The bailing models' attention tensors (Ring-mini-linear-2.0): every layer's mixer is `attention.*`; a softmax
  // layer's checkpoint holds attention.query_key_value [(Hq + 2·Hkv)·D, hidden] (the table cuts it into q/k/v),
  // query_layernorm / key_layernorm [D] and dense [hidden, Hq·D] instead of self_attn.*; the Lightning layers'
  // tensors are attention.* too (layers/lightning_layer.h).
  bool fused_qkv_attention = false;
};

extern const ArchitectureSpec kQwen3Spec;
extern const ArchitectureSpec kGraniteSpec;
extern const ArchitectureSpec kOlmoHybridSpec;
extern const ArchitectureSpec kQwen3HybridSpec;
extern const ArchitectureSpec kQwen3MoeSpec;
extern const ArchitectureSpec kOlmo3Spec;
extern const ArchitectureSpec kCohere2Spec;
extern const ArchitectureSpec kQwen35Spec;
extern const ArchitectureSpec kQwen35MoeSpec;
extern const ArchitectureSpec kQwen3NextSpec;
extern const ArchitectureSpec kGraniteMoeHybridSpec;
extern const ArchitectureSpec kGraniteHybridSpec;
extern const ArchitectureSpec kBailingMoeLinearSpec;

const ArchitectureSpec& architecture_spec(Architecture architecture);
std::span<const ArchitectureSpec* const> architecture_specs();

}  // namespace hlm
