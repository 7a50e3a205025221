// Qwen3-MoE (HF model_type "qwen3_moe", e.g. Qwen3-30B-A3B): the Qwen3 decoder (per-head q/k RMSNorm before RoPE,
// pre-norm blocks, softmax scale head_dim^-1/2) whose FFN is routed experts in the layers the config makes sparse
// (ModelConfig::ffn_kinds from decoder_sparse_step / mlp_only_layers) and the dense SwiGLU elsewhere. Routing:
// softmax over all experts, top-k, renormalised iff norm_topk_prob (layers/moe_layer.h). No shared expert.
#include "models/architecture.h"
#include "models/scale_only_hyper.h"

namespace hlm {

const ArchitectureSpec kQwen3MoeSpec{
    Architecture::Qwen3Moe, "qwen3_moe", "Qwen3-MoE decoder (Qwen3 attention, routed SwiGLU experts, top-k)",
    QkNorm::PerHead, /*attention_post_norm=*/false, scale_only_hyper};

}  // namespace hlm
