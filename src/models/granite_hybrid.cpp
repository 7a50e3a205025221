// hybridlm's hybrid student of a dense Granite teacher (model_type "granite_hybrid", made by `convert`): the Granite
// decoder of granite.cpp — the same four scalars (embeddings × embedding_multiplier, every block output ×
// residual_multiplier before its residual add, softmax scale = attention_multiplier, logits ÷ logits_scaling), no q/k
// norm, optional mlp_bias — where each layer is either Granite attention (full_attention) or Gated DeltaNet
// (linear_attention) with the qwen3_hybrid student's geometry and tensor names (qwen3_hybrid.cpp). The GDN mixer's
// output is scaled by residual_multiplier like every block output, so the converted student starts from the
// teacher's residual stream scale.
#include "models/architecture.h"
#include "models/granite_hyper.h"

namespace hlm {

const ArchitectureSpec kGraniteHybridSpec{
    .architecture = Architecture::GraniteHybrid,
    .model_type = "granite_hybrid",
    .description = "Granite hybrid student (Granite attention + Gated DeltaNet layers, Granite's four scalars)",
    .qk_norm = QkNorm::None,
    .attention_post_norm = false,
    .hyper = granite_hyper};

}  // namespace hlm
