// Qwen3.5 dense text decoder (HF model_type "qwen3_5_text", Qwen3_5ForCausalLM; the text model of "qwen3_5",
// whose config.json nests it under text_config and whose checkpoint prefixes it "model.language_model.").
//   layers: Gated DeltaNet ("linear_attention") and gated full attention ("full_attention"), per layer_types
//   (absent: layer i full iff (i+1) % full_attention_interval == 0, interval 4); pre-norm blocks, dense SwiGLU MLP.
//   norms: decoder, final and per-head q/k RMSNorms are zero-centred, y = n ⊙ (1 + w); the GDN output norm is plain.
//   attention: q_proj [Hq·2D, H] holds [q_h | gate_h] per head; q/k norm per head, partial RoPE on the first
//   int(D · partial_rotary_factor) dims of each head (default 0.25); out = o_proj(o ⊙ sigmoid(gate)).
//   GDN: in_proj_qkv [2·Hk·dk + Hv·dv, H] (flat q | k | v), in_proj_z, in_proj_b, in_proj_a, conv1d [.., 1, K] over
//   q | k | v, A_log, dt_bias, norm (gated, eps rms_norm_eps), out_proj; β = sigmoid(b); v-head h reads k-head
//   h / (Hv/Hk). The tensor table maps these names onto the GDN layer's fields.
// Non-goals: the vision tower (model.visual.*) and the multi-token-prediction head (mtp.*), reported as unused.
#include "models/architecture.h"
#include "models/scale_only_hyper.h"

namespace hlm {

const ArchitectureSpec kQwen35Spec{
    Architecture::Qwen35, "qwen3_5_text",
    "Qwen3.5 (Gated DeltaNet + gated attention, partial RoPE, zero-centred norms, dense SwiGLU)", QkNorm::PerHead,
    /*attention_post_norm=*/false,
    scale_only_hyper,
    /*attention_output_gate=*/true, /*zero_centred_norms=*/true, /*text_prefix=*/"model.language_model."};

}  // namespace hlm
