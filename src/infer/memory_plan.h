// The memory plan of an inference engine: how many sequences run at once and how many KV-cache blocks the attention
// layers share, from the model's shapes and an optional byte budget for the state (weights and activations are not
// counted). One KV block holds `block_size` consecutive tokens of ONE sequence for EVERY full-attention layer (each
// layer has its own [num_blocks, block_size, Hkv, D] K and V pools indexed by the same block ids), so a sequence of L
// tokens holds ceil(L / block_size) blocks and wastes less than one block. A GDN layer's state is per sequence and
// constant: conv state (2·Ck + Cv)·(K−1) plus the recurrent Hv·dv·dk, always fp32 (gdn.md: the recurrence is kept in
// fp32 whatever the weights). The KV cache is stored in fp32 (4 bytes per element, the CPU engine and the CUDA fp32
// precision) or bf16 (2 bytes, the CUDA engine's bf16 precision): kv_element_bytes.
#pragma once
#include <cstdint>
#include <optional>

#include "models/hf_config.h"

namespace hlm {

inline constexpr int64_t kDefaultKvBlockSize = 16;

struct MemoryPlan {
  int64_t block_size = kDefaultKvBlockSize;  // tokens per KV block
  int64_t num_blocks = 0;                    // KV blocks in the pool
  int64_t max_sequences = 0;                 // sequence slots (GDN states allocated for each)
  int64_t attention_layers = 0;
  int64_t gdn_layers = 0;
  int64_t kv_bytes_per_block = 0;         // K + V of one block, all attention layers together
  int64_t gdn_bytes_per_sequence = 0;     // conv + recurrent state, all GDN layers together
  int64_t kv_element_bytes = 4;           // bytes of one cached K or V element: 4 (fp32) or 2 (bf16)

  int64_t blocks_for(int64_t tokens) const { return (tokens + block_size - 1) / block_size; }
  int64_t kv_pool_bytes() const { return num_blocks * kv_bytes_per_block; }
  int64_t gdn_pool_bytes() const { return max_sequences * gdn_bytes_per_sequence; }
  int64_t total_bytes() const { return kv_pool_bytes() + gdn_pool_bytes(); }
  // State bytes one sequence of `tokens` tokens needs (its blocks and its GDN state).
  int64_t sequence_bytes(int64_t tokens) const {
    return blocks_for(tokens) * kv_bytes_per_block + gdn_bytes_per_sequence;
  }
};

struct MemoryRequest {
  int64_t max_sequences = 1;  // sequences that may run at once
  int64_t kv_blocks = 1;      // KV blocks wanted (e.g. the sum of the concurrent sequences' blocks_for)
  std::optional<int64_t> budget_bytes;  // cap on total_bytes(); nullopt: exactly what was asked
  int64_t block_size = kDefaultKvBlockSize;
  int64_t kv_element_bytes = 4;  // 4: fp32 KV cache; 2: bf16
};

// The per-block and per-sequence byte counts of a model (num_blocks and max_sequences left 0).
// kv_element_bytes: 4 (fp32 cache) or 2 (bf16 cache); anything else is an internal error.
MemoryPlan memory_plan_shape(const ModelConfig& config, int64_t block_size = kDefaultKvBlockSize,
                             int64_t kv_element_bytes = 4);

// A plan for the request: max_sequences slots and the blocks wanted, cut down to the budget (first fewer sequence
// slots, until each slot has its GDN state and one block, then fewer blocks). Input error, naming the budget, when not
// even one sequence with one block fits.
MemoryPlan memory_plan_build(const ModelConfig& config, const MemoryRequest& request);

}  // namespace hlm
