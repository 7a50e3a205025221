// OLMo-Hybrid (HF model_type "olmo_hybrid"): Gated DeltaNet layers interleaved with OLMo 2 style attention layers.
//   linear_attention layer (pre-norm):  h += gdn(input_layernorm(h));        h += mlp(post_attention_layernorm(h))
//   full_attention layer (post-norm):   h += post_attention_layernorm(attn(h)); h += post_feedforward_layernorm(mlp(h))
// Attention: q_norm/k_norm are RMSNorms over the whole q (Hq·D) and k (Hkv·D) projections, then RoPE (absent when
// rope_parameters is null). GDN: β = 2·sigmoid(b) when linear_allow_neg_eigval (default true); gated norm eps 1e-5.
// Checkpoint names: HF's save_pretrained and the Hub use attention_layer_norm / feedforward_layer_norm for
// input_layernorm / post_attention_layernorm (the tensor table lists both), and q/k/v_conv1d for the split conv.
#include "models/architecture.h"
#include "models/scale_only_hyper.h"

namespace hlm {

const ArchitectureSpec kOlmoHybridSpec{
    Architecture::OlmoHybrid, "olmo_hybrid", "OLMo-Hybrid (Gated DeltaNet + OLMo 2 attention layers)",
    QkNorm::WholeProjection, /*attention_post_norm=*/true, scale_only_hyper};

}  // namespace hlm
