// The step of an attention layer between its q/k/v projections and attention over a paged KV cache, for every token
// of a prefill chunk or decode step: optional RMSNorm of q and of k (per head or over the whole projection, HF
// Qwen3 / OLMo-2 q_norm, k_norm), optional RoPE at the token's absolute position, then k and v appended to the cache.
// CPU reference, composed of the ops it replaces in sequence (the CUDA kernel, qk_norm_rope_cuda.h, fuses them into
// one launch):
//   q = rope(rmsnorm(q) · q_norm), k = rope(rmsnorm(k) · k_norm)      (each step only when its weight / table is given)
//   k_cache[slot_mapping[t]] ← k[t], v_cache[slot_mapping[t]] ← v[t]
// Shapes (token-major, contiguous):
//   q [T, Hq, D] and k [T, Hkv, D], overwritten in place; v [T, Hkv, D] (read only);
//   q_norm [q_norm_size] with q_norm_size D (one norm per head, Qwen3) or Hq·D (over the whole projection, OLMo-2);
//     k_norm likewise with Hkv; a norm size of 0 (or a null weight) skips that norm;
//   positions [T] (int32, the tokens' absolute positions); rope: the layer's table (nullptr: no RoPE), head_dim D;
//   k_cache, v_cache [num_blocks · block_size, Hkv·D] (attention_cache.h's PagedKvShape), slot_mapping [T] (int64).
// Numerics: those of rmsnorm_forward (double sums), rope_forward and attention_cache_write, applied in that order
// (q norm, k norm, q rope, k rope, cache write). Bad input: a slot outside the pool, a negative position (or one past
// a dynamic table's limit) throw as those ops do; nothing is written to the cache for a token with a bad slot.
#pragma once
#include <cstdint>

#include "core/error.h"
#include "ops/attention/attention_cache.h"
#include "ops/rope/rope.h"

namespace hlm {

struct QkNormRopeShape {
  int64_t tokens = 0;       // T
  int64_t q_heads = 0;      // Hq
  int64_t kv_heads = 0;     // Hkv
  int64_t head_dim = 0;     // D
  int64_t q_norm_size = 0;  // 0 (no q norm), D or Hq·D
  int64_t k_norm_size = 0;  // 0 (no k norm), D or Hkv·D
  float eps = 1e-6f;        // the norms' epsilon
};

// The rows of one q/k norm over `heads` heads of D: norm_size D → tokens·heads rows of D; heads·D → tokens rows of
// heads·D. Internal error for any other size. (Inline: the CUDA launcher, in hlm_cuda, checks with it too.)
struct QkNormRows {
  int64_t rows = 0, width = 0;
};
inline QkNormRows qk_norm_rows(int64_t norm_size, int64_t tokens, int64_t heads, int64_t head_dim) {
  HLM_CHECK(norm_size == head_dim || norm_size == heads * head_dim, "q/k norm of ", norm_size, " entries for ", heads,
            " heads of ", head_dim);
  return {tokens * heads * head_dim / norm_size, norm_size};
}

// T = float: the reference the CUDA kernel is compared with; T = double: the accurate reference for the tests'
// tolerances (same float angle and table as rope_forward<double>). The cache holds T.
template <typename T>
void qk_norm_rope_cache_write(T* q, T* k, const T* v, const T* q_norm, const T* k_norm, const QkNormRopeShape& s,
                              const RopeTable* rope, const int32_t* positions, T* k_cache, T* v_cache,
                              const int64_t* slot_mapping, const PagedKvShape& cache);

}  // namespace hlm
