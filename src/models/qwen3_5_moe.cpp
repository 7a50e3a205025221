// Qwen3.5-MoE text decoder (HF model_type "qwen3_5_moe_text", Qwen3_5MoeForCausalLM; the text model of
// "qwen3_5_moe"). Qwen3.5's mixers, norms and RoPE (qwen3_5.cpp); every layer's FFN is routed experts with a shared
// expert (layers/moe_layer.h): p = softmax(x·routerᵀ) over all E, the top-k renormalised (always), plus
// sigmoid(x·shared_expert_gateᵀ) · SwiGLU_shared(x). Experts load from the per-expert layout
// (mlp.experts.{e}.{gate,up,down}_proj.weight) or from the stacked one (mlp.experts.gate_up_proj [E, 2I, H] with
// gate rows first, mlp.experts.down_proj [E, H, I]).
#include "models/architecture.h"
#include "models/scale_only_hyper.h"

namespace hlm {

const ArchitectureSpec kQwen35MoeSpec{
    Architecture::Qwen35Moe, "qwen3_5_moe_text",
    "Qwen3.5-MoE (Gated DeltaNet + gated attention, routed experts with a gated shared expert)", QkNorm::PerHead,
    /*attention_post_norm=*/false,
    scale_only_hyper,
    /*attention_output_gate=*/true, /*zero_centred_norms=*/true, /*text_prefix=*/"model.language_model."};

}  // namespace hlm
