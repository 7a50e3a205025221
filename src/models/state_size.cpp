#include "models/state_size.h"

#include <algorithm>

namespace hlm {

StateSizes state_sizes(const ModelConfig& c, int64_t context, int64_t bytes_per_element) {
  StateSizes s;
  s.context = context;
  s.bytes_per_element = bytes_per_element;
  const int64_t attention_layers =
      std::count(c.layer_kinds.begin(), c.layer_kinds.end(), LayerKind::FullAttention);
  for (int64_t i = 0; i < c.num_hidden_layers; ++i)
    if (c.layer_kinds[static_cast<size_t>(i)] == LayerKind::FullAttention && c.attention_window(i) > 0)
      ++s.sliding_attention_layers;
  s.full_attention_layers = attention_layers - s.sliding_attention_layers;
  s.mamba_layers = std::count(c.layer_kinds.begin(), c.layer_kinds.end(), LayerKind::Mamba2);
  s.lightning_layers = std::count(c.layer_kinds.begin(), c.layer_kinds.end(), LayerKind::Lightning);
  s.linear_attention_layers = c.num_hidden_layers - attention_layers - s.mamba_layers - s.lightning_layers;
  if (c.lightning) s.lightning_state_elements = c.num_attention_heads * c.head_dim * c.head_dim;
  if (c.mamba) {
    s.mamba_ssm_state_elements = c.mamba->heads * c.mamba->head_dim * c.mamba->state_dim;
    s.mamba_conv_state_elements = c.mamba->conv_channels() * (c.mamba->conv_kernel - 1);
  }
  s.sliding_window = s.sliding_attention_layers > 0 ? c.sliding_window : 0;
  s.kv_elements_per_token = 2 * c.num_key_value_heads * c.head_dim;
  s.kv_elements_at_context = s.kv_elements_per_token * context;
  s.kv_elements_at_window = s.kv_elements_per_token * std::min(context, s.sliding_window);
  if (c.linear) {
    const LinearAttentionConfig& l = *c.linear;
    s.recurrent_state_elements = l.num_value_heads * l.key_head_dim * l.value_head_dim;
    s.conv_state_elements =
        (2 * l.num_key_heads * l.key_head_dim + l.num_value_heads * l.value_head_dim) * (l.conv_kernel_dim - 1);
  }
  s.model_elements_at_context = s.full_attention_layers * s.kv_elements_at_context +
                                s.sliding_attention_layers * s.kv_elements_at_window +
                                s.linear_attention_layers * (s.recurrent_state_elements + s.conv_state_elements) +
                                s.mamba_layers * (s.mamba_ssm_state_elements + s.mamba_conv_state_elements) +
                                s.lightning_layers * s.lightning_state_elements;
  return s;
}

}  // namespace hlm
