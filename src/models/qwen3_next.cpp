// Qwen3-Next (HF model_type "qwen3_next", Qwen3NextForCausalLM): Qwen3.5's decoder (gated attention with per-head
// [q | gate] q_proj, partial RoPE default 0.25, zero-centred decoder / final / q-k norms, Gated DeltaNet) with two
// differences (shared/docs/families.md §2.4):
//   GDN input projections grouped per key head g: in_proj_qkvz [2·Hk·dk + 2·Hv·dv, H] holds, block by block,
//   [q_g | k_g | v of g's Hv/Hk value heads | z of them]; in_proj_ba [2·Hv, H] holds [b of them | a of them]. The
//   conv1d runs over the flat [q | k | v] channels, as Qwen3.5's. The tensor table cuts the blocks
//   (TensorRow::fused_grouped, gdn_grouped_projections).
//   FFN: Qwen3-MoE's schedule (decoder_sparse_step, mlp_only_layers; dense layers of intermediate_size) and routing
//   (norm_topk_prob, default true here), plus the sigmoid-gated shared expert of Qwen3.5-MoE.
// Checkpoints use "model." (no multimodal wrapper); mtp.* tensors are reported as unused.
#include "models/architecture.h"
#include "models/scale_only_hyper.h"

namespace hlm {

const ArchitectureSpec kQwen3NextSpec{
    .architecture = Architecture::Qwen3Next,
    .model_type = "qwen3_next",
    .description = "Qwen3-Next (Gated DeltaNet with grouped projections + gated attention, MoE with a shared expert)",
    .qk_norm = QkNorm::PerHead,
    .attention_post_norm = false,
    .hyper = scale_only_hyper,
    .attention_output_gate = true,
    .zero_centred_norms = true,
    .gdn_grouped_projections = true};

}  // namespace hlm
