// Inference memory per layer kind, the Olmo Hybrid paper's Table 1 arithmetic: a full-attention layer caches K and V
// for every token (2·Hkv·D elements per token, growing with the context); a GDN layer keeps one matrix state per
// value head (Hv·dk·dv elements, constant) plus the short-conv state ((2·Hk·dk + Hv·dv)·(K−1) elements, reported
// apart, as Table 1 leaves it out); a sliding-window attention layer (OLMo-3 sliding_attention) needs K and V of its
// last W tokens only: 2·Hkv·D·min(context, W) elements, bounded by the window. Bytes = elements × bytes_per_element
// (Table 1 uses fp16: 2). A Mamba-2 layer (granitemoehybrid) keeps an SSM state of nh·P·N and a conv state of
// (Im + 2·G·N)·(K−1) elements, both constant in the context. A Lightning Attention-2 layer (bailing_moe_linear) keeps
// one D×D matrix per head: Hq·D·D elements, constant, no conv state.
#pragma once
#include <cstdint>

#include "models/hf_config.h"

namespace hlm {

struct StateSizes {
  int64_t context = 0;
  int64_t bytes_per_element = 2;
  int64_t full_attention_layers = 0;         // softmax attention over the whole context
  int64_t sliding_attention_layers = 0;      // softmax attention over the last sliding_window tokens
  int64_t sliding_window = 0;
  int64_t linear_attention_layers = 0;
  int64_t kv_elements_per_token = 0;         // per full-attention layer
  int64_t kv_elements_at_context = 0;        // per full-attention layer, × context
  int64_t kv_elements_at_window = 0;         // per sliding layer, × min(context, window)
  int64_t recurrent_state_elements = 0;      // per GDN layer (matrix state)
  int64_t conv_state_elements = 0;           // per GDN layer
  int64_t mamba_layers = 0;                  // Mamba-2 layers (granitemoehybrid)
  int64_t mamba_ssm_state_elements = 0;      // per Mamba-2 layer: nh·P·N (HF ssm_state)
  int64_t mamba_conv_state_elements = 0;     // per Mamba-2 layer: (Im + 2·G·N)·(K−1) (HF conv_state)
  int64_t lightning_layers = 0;              // Lightning Attention-2 layers (bailing_moe_linear)
  int64_t lightning_state_elements = 0;      // per Lightning layer: Hq·D·D (FLA's recurrent state)
  int64_t model_elements_at_context = 0;     // all layers: KV at context (window) + GDN / Mamba-2 states
};

StateSizes state_sizes(const ModelConfig& config, int64_t context, int64_t bytes_per_element);

}  // namespace hlm
