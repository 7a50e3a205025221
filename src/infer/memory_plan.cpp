#include "infer/memory_plan.h"

#include <algorithm>

#include "core/error.h"

namespace hlm {

MemoryPlan memory_plan_shape(const ModelConfig& c, int64_t block_size, int64_t kv_element_bytes) {
  HLM_CHECK_INPUT(block_size > 0, "KV block size must be positive, got ", block_size);
  HLM_CHECK(kv_element_bytes == 4 || kv_element_bytes == 2, "KV element bytes must be 4 or 2, got ", kv_element_bytes);
  MemoryPlan p;
  p.block_size = block_size;
  p.kv_element_bytes = kv_element_bytes;
  int64_t mamba_layers = 0;  // Mamba-2 and Lightning layers count among the recurrent (gdn_*) ones
  int64_t lightning_layers = 0;
  for (const LayerKind kind : c.layer_kinds) {
    if (kind == LayerKind::FullAttention) ++p.attention_layers;
    else if (kind == LayerKind::Mamba2) ++mamba_layers;
    else if (kind == LayerKind::Lightning) ++lightning_layers;
    else ++p.gdn_layers;
  }
  const auto f32 = static_cast<int64_t>(sizeof(float));
  p.kv_bytes_per_block = p.attention_layers * 2 * block_size * c.num_key_value_heads * c.head_dim * kv_element_bytes;
  if (p.gdn_layers > 0) {
    HLM_CHECK(c.linear.has_value(), "a config with linear-attention layers has no linear-attention keys");
    const LinearAttentionConfig& l = *c.linear;
    const int64_t conv = (2 * l.num_key_heads * l.key_head_dim + l.num_value_heads * l.value_head_dim) *
                         (l.conv_kernel_dim - 1);
    const int64_t recurrent = l.num_value_heads * l.value_head_dim * l.key_head_dim;
    p.gdn_bytes_per_sequence = p.gdn_layers * (conv + recurrent) * f32;
  }
  if (mamba_layers > 0) {  // conv state (Im + 2·G·N)·(K−1) and SSM state nh·P·N per layer, fp32
    HLM_CHECK(c.mamba.has_value(), "a config with Mamba-2 layers has no mamba keys");
    const Mamba2Config& m = *c.mamba;
    p.gdn_bytes_per_sequence +=
        mamba_layers * (m.conv_channels() * (m.conv_kernel - 1) + m.heads * m.head_dim * m.state_dim) * f32;
    p.gdn_layers += mamba_layers;
  }
  if (lightning_layers > 0) {  // one fp32 D×D state per head per layer
    p.gdn_bytes_per_sequence += lightning_layers * c.num_attention_heads * c.head_dim * c.head_dim * f32;
    p.gdn_layers += lightning_layers;
  }
  return p;
}

MemoryPlan memory_plan_build(const ModelConfig& c, const MemoryRequest& r) {
  HLM_CHECK_INPUT(r.max_sequences > 0, "the memory plan needs at least one sequence");
  MemoryPlan p = memory_plan_shape(c, r.block_size, r.kv_element_bytes);
  p.max_sequences = r.max_sequences;
  p.num_blocks = std::max<int64_t>(r.kv_blocks, 1);
  if (!r.budget_bytes) return p;
  const int64_t budget = *r.budget_bytes;
  HLM_CHECK_INPUT(budget >= p.sequence_bytes(1), "--max-memory ", budget, " bytes: not even one sequence of one token ",
                  "fits (", p.sequence_bytes(1), " bytes of state: ", p.kv_bytes_per_block, " per KV block of ",
                  p.block_size, " tokens, ", p.gdn_bytes_per_sequence, " GDN state per sequence)");
  while (p.max_sequences > 1 && p.max_sequences * p.sequence_bytes(1) > budget) --p.max_sequences;
  if (p.kv_bytes_per_block > 0)
    p.num_blocks = std::min(p.num_blocks, (budget - p.gdn_pool_bytes()) / p.kv_bytes_per_block);
  return p;
}

}  // namespace hlm
