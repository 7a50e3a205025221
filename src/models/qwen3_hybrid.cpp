// hybridlm's hybrid student (model_type "qwen3_hybrid"): the Qwen3 decoder of qwen3.cpp where each layer is either
// Qwen3 attention (full_attention) or Gated DeltaNet (linear_attention) with H heads of the teacher's head dim, no
// RoPE and no q/k norm inside GDN (the seed's Algorithm 1 student). Both kinds are pre-norm. GDN tensors are named as
// HF's olmo_hybrid module (model.layers.{i}.linear_attn.*); the gated norm uses rms_norm_eps (as Qwen3.5 does).
#include "models/architecture.h"
#include "models/scale_only_hyper.h"

namespace hlm {

const ArchitectureSpec kQwen3HybridSpec{
    Architecture::Qwen3Hybrid, "qwen3_hybrid", "Qwen3 hybrid student (Qwen3 attention + Gated DeltaNet layers)",
    QkNorm::PerHead, /*attention_post_norm=*/false, scale_only_hyper};

}  // namespace hlm
