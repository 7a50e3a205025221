// Granite-4.0-H (HF model_type "granitemoehybrid", GraniteMoeHybridForCausalLM; ../shared/docs/families.md §5):
//   layers: Mamba-2 ("mamba") or softmax attention ("attention") per layer_types; pre-norm blocks (RMSNorm).
//   h = embed·embedding_multiplier; h += residual_multiplier·mixer(norm(h));
//   h += residual_multiplier·(shared_mlp(norm(h)) [+ routed experts when num_local_experts > 0]);
//   logits = lm_head(norm(h)) / logits_scaling. Attention: GQA, scale = attention_multiplier, no q/k norm, NoPE
//   unless position_embedding_type is "rope". Mamba-2 mixer: layers/mamba2_layer.h.
//   Shared MLP: shared_mlp.input_linear [2S, H] = [gate | up], output_linear [H, S] (the tensor table cuts it into
//   the layer's mlp gate/up/down). Experts: block_sparse_moe.router.layer [E, H], input_linear [E, 2I, H] (gate rows
//   first), output_linear [E, H, I]; router top-k of the logits, softmax over the k (= renormalised top-k softmax).
// Non-goals: mamba_proj_bias (refused), training (refused), CUDA (refused). CPU generation: infer/cpu_engine.cpp.
#include "models/architecture.h"
#include "models/granite_hyper.h"

namespace hlm {

const ArchitectureSpec kGraniteMoeHybridSpec{
    .architecture = Architecture::GraniteMoeHybrid,
    .model_type = "granitemoehybrid",
    .description = "Granite-4.0-H (Mamba-2 + NoPE attention, shared MLP, optional routed experts, Granite scalars)",
    .qk_norm = QkNorm::None,
    .attention_post_norm = false,
    .hyper = granite_hyper,  // the four Granite scalars, as the dense Granite (granite.cpp)
    .shared_mlp = true};

}  // namespace hlm
