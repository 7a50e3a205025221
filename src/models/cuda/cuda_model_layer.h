// CudaModel's per-layer weights (private to models/cuda: cuda_model.cpp uploads and runs them, cuda_model_train.cpp
// differentiates them). The slots mirror models/decoder_weights.h's DecoderLayerWeights.
#pragma once
#include "models/cuda/cuda_model.h"

namespace hlm {

struct CudaModel::Layer {
  bool full_attention = false;
  CudaTensor input_layernorm;             // [hidden]; empty in post-norm blocks
  CudaAttentionWeights self_attn;         // full_attention layers
  CudaGdnWeights linear_attn;             // linear_attention layers
  CudaTensor post_attention_layernorm;    // [hidden]
  CudaMlpWeights mlp;
  CudaTensor post_feedforward_layernorm;  // [hidden]; post-norm blocks only
};

}  // namespace hlm
