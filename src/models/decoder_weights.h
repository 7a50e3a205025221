// Weights of the decoders hybridlm runs (Qwen3, Granite, OLMo-Hybrid, hybrid students), all f32, named by HF
// tensor names through the tensor table. A layer holds either self_attn or linear_attn, by its LayerKind, and either
// mlp or moe, by its FfnKind.
#pragma once
#include <vector>

#include "layers/attention_layer.h"
#include "layers/gdn_layer.h"
#include "layers/lightning_layer.h"
#include "layers/mamba2_layer.h"
#include "layers/mlp_layer.h"
#include "layers/moe_layer.h"

namespace hlm {

struct DecoderLayerWeights {
  Tensor input_layernorm;             // [hidden]; undefined in post-norm blocks
  AttentionWeights self_attn;         // full_attention layers
  GdnWeights linear_attn;             // linear_attention layers
  Mamba2Weights mamba;                // Mamba-2 layers (granitemoehybrid)
  LightningWeights lightning;         // Lightning Attention-2 layers (bailing_moe_linear)
  Tensor post_attention_layernorm;    // [hidden]: pre-MLP norm, or post-mixer norm in post-norm blocks
  MlpWeights mlp;                     // dense FFN layers
  MoeWeights moe;                     // routed-expert FFN layers (ModelConfig::moe_layer)
  Tensor post_feedforward_layernorm;  // [hidden]; post-norm blocks only
};

struct DecoderWeights {
  Tensor embed_tokens;  // [V, hidden]
  std::vector<DecoderLayerWeights> layers;
  Tensor norm;     // [hidden]
  Linear lm_head;  // weight [V, hidden]; shares embed_tokens when tie_word_embeddings
};

}  // namespace hlm
