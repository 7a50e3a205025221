// Granite dense (HF model_type "granite"): the Llama decoder with four scalars from config.json —
// embeddings × embedding_multiplier after lookup, each block output × residual_multiplier before its residual add,
// softmax scale = attention_multiplier (instead of head_dim^-1/2), logits ÷ logits_scaling. No q/k norm.
#include "models/architecture.h"
#include "models/granite_hyper.h"

namespace hlm {

DecoderHyper granite_hyper(const ModelConfig& c) {
  DecoderHyper h;
  h.embedding_multiplier = static_cast<float>(c.embedding_multiplier);
  h.residual_multiplier = static_cast<float>(c.residual_multiplier);
  h.attention_scale = c.attention_scale();
  h.logits_divisor = static_cast<float>(c.logits_scaling);
  return h;
}

const ArchitectureSpec kGraniteSpec{
    .architecture = Architecture::Granite,
    .model_type = "granite",
    .description = "Granite dense decoder (Llama with embedding/residual/attention/logit scalars)",
    .qk_norm = QkNorm::None,
    .attention_post_norm = false,
    .hyper = granite_hyper,
    .hybrid_student = "granite_hybrid"};

}  // namespace hlm
