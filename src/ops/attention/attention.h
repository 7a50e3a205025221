// Causal grouped-query softmax attention over packed sequences.
// Shapes (contiguous f32): q [T, Hq, D], k and v [T, Hkv, D], out [T, Hq, D]; T is the total of all sequences,
// sequence s spans tokens [cu_seqlens[s], cu_seqlens[s+1]). Query head h reads kv head h / (Hq / Hkv) (HF repeat_kv).
// Token t attends to tokens of its own sequence at positions <= t. Scores are scaled by `scale` (HF: head_dim^-1/2,
// Granite: attention_multiplier). Exact softmax in fp32 with the max subtracted; queries are processed in blocks of
// `query_block` so scratch memory is O(query_block · T) per thread.
#pragma once
#include <cstdint>

namespace hlm {

struct AttentionShape {
  int64_t total_tokens = 0;  // T
  int64_t q_heads = 0;       // Hq
  int64_t kv_heads = 0;      // Hkv, divides Hq
  int64_t head_dim = 0;      // D
};

void attention_forward(float* out, const float* q, const float* k, const float* v, const int64_t* cu_seqlens,
                       int64_t n_seqs, const AttentionShape& shape, float scale, int64_t query_block = 64);

}  // namespace hlm
