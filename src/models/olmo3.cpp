// OLMo-3 (HF model_type "olmo3"): the OLMo 2 post-norm decoder with sliding-window attention layers, every layer
// softmax attention:
//   h += post_attention_layernorm(attn(h));  h += post_feedforward_layernorm(mlp(h))   (no input_layernorm)
// Attention: q_norm / k_norm are RMSNorms over the whole q (Hq·D) and k (Hkv·D) projections, then RoPE (half
// convention) on both layer types, each with its own rope parameters (ModelConfig::sliding_rope); "sliding_attention"
// layers see the last sliding_window keys including the token itself, "full_attention" layers the whole prefix. The
// default layout is three sliding layers per full one (layer i full iff (i + 1) % 4 == 0). Softmax scale
// head_dim^-1/2; rms_norm_eps defaults to 1e-5. Spec: shared/docs/families.md §3 (transformers 5.17 modeling_olmo3).
#include "models/architecture.h"
#include "models/scale_only_hyper.h"

namespace hlm {

const ArchitectureSpec kOlmo3Spec{
    Architecture::Olmo3, "olmo3", "OLMo-3 decoder (OLMo 2 post-norm attention, sliding-window layers 3:1)",
    QkNorm::WholeProjection, /*attention_post_norm=*/true, scale_only_hyper};

}  // namespace hlm
