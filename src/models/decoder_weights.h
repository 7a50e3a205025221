// Weights of a Llama-family decoder (Qwen3, Granite), all f32, named by HF tensor names through kTensorTable.
#pragma once
#include <vector>

#include "layers/attention_layer.h"
#include "layers/mlp_layer.h"

namespace hlm {

struct DecoderLayerWeights {
  Tensor input_layernorm;           // [hidden]
  AttentionWeights self_attn;
  Tensor post_attention_layernorm;  // [hidden]
  MlpWeights mlp;
};

struct DecoderWeights {
  Tensor embed_tokens;  // [V, hidden]
  std::vector<DecoderLayerWeights> layers;
  Tensor norm;     // [hidden]
  Linear lm_head;  // weight [V, hidden]; shares embed_tokens when tie_word_embeddings
};

}  // namespace hlm
