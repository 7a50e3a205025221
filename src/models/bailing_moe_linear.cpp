// inclusionAI "bailing" hybrid-linear models: Ring-mini-linear-2.0 (HF model_type "bailing_moe_linear",
// BailingMoeLinearV2ForCausalLM; ../shared/docs/families.md §6, docs/families.md for what was read and what is [I]).
//   layers: Lightning Attention-2 (LayerKind::Lightning, layers/lightning_layer.h) or GQA softmax attention, by
//   layer_group_size: layer i is softmax iff (i + 1) % gs == 0 or i >= L // gs * gs; pre-norm blocks (RMSNorm):
//   h = word_embeddings(ids); h += mixer(norm(h)); h += ffn(norm(h)); logits = lm_head(norm(h)).
//   Softmax layers: attention.query_key_value [(Hq + 2·Hkv)·D, H] cut [q | k | v] by the tensor table, per-head
//   RMSNorm of q and k (query_layernorm / key_layernorm), partial RoPE (rotate-half in the first D·partial_rotary_factor
//   dims), causal softmax with scale D^-1/2, dense.
//   FFN: dense SwiGLU (intermediate_size) for i < first_k_dense_replace, else routed experts with the sigmoid
//   group-limited router (expert_bias for selection only, routed_scaling_factor) plus the ungated shared expert
//   (mlp.shared_experts.*) (layers/moe_layer.h).
// CPU forward and CPU generation (the Lightning state per sequence: infer/cpu_engine.cpp). Not supported: training,
// CUDA (refused at upload), a softmax router, head_dim != hidden / heads.
#include "models/architecture.h"
#include "models/scale_only_hyper.h"

namespace hlm {

const ArchitectureSpec kBailingMoeLinearSpec{
    .architecture = Architecture::BailingMoeLinear,
    .model_type = "bailing_moe_linear",
    .description = "Ring-mini-linear-2.0 / bailing (Lightning Attention-2 + GQA softmax layers, sigmoid-routed MoE "
                   "with a shared expert)",
    .qk_norm = QkNorm::PerHead,
    .attention_post_norm = false,
    .hyper = scale_only_hyper,
    .fused_qkv_attention = true};

}  // namespace hlm
