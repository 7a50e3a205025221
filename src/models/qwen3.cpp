// Qwen3 dense (HF model_type "qwen3"): Llama-style pre-norm decoder with per-head RMSNorm on q and k (q_norm,
// k_norm over head_dim, applied before RoPE), SwiGLU MLP, softmax scale head_dim^-1/2, tied or untied LM head.
// No multipliers: every DecoderHyper scalar is 1 except the attention scale.
#include "models/architecture.h"
#include "models/scale_only_hyper.h"

namespace hlm {

DecoderHyper scale_only_hyper(const ModelConfig& c) {
  DecoderHyper h;
  h.attention_scale = c.attention_scale();
  return h;
}

const ArchitectureSpec kQwen3Spec{
    .architecture = Architecture::Qwen3,
    .model_type = "qwen3",
    .description = "Qwen3 dense decoder (q/k RMSNorm, SwiGLU, RoPE)",
    .qk_norm = QkNorm::PerHead,
    .attention_post_norm = false,
    .hyper = scale_only_hyper,
    .hybrid_student = "qwen3_hybrid"};

}  // namespace hlm
