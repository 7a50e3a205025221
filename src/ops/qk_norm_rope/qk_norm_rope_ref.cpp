// q/k norm + RoPE + KV cache write: CPU reference (contract in qk_norm_rope.h), the existing ops in sequence.
#include <algorithm>

#include "core/error.h"
#include "ops/qk_norm_rope/qk_norm_rope.h"
#include "ops/rmsnorm/rmsnorm.h"

namespace hlm {

template <typename T>
void qk_norm_rope_cache_write(T* q, T* k, const T* v, const T* q_norm, const T* k_norm, const QkNormRopeShape& s,
                              const RopeTable* rope, const int32_t* positions, T* k_cache, T* v_cache,
                              const int64_t* slot_mapping, const PagedKvShape& cache) {
  HLM_CHECK(s.tokens >= 0 && s.q_heads > 0 && s.kv_heads > 0 && s.head_dim > 0, "qk_norm_rope: bad shape");
  HLM_CHECK(cache.kv_heads == s.kv_heads && cache.head_dim == s.head_dim, "qk_norm_rope: cache of ", cache.kv_heads,
            " heads of ", cache.head_dim, " for ", s.kv_heads, " heads of ", s.head_dim);
  const int64_t T_ = s.tokens, D = s.head_dim;
  if (q_norm != nullptr && s.q_norm_size > 0) {
    const QkNormRows r = qk_norm_rows(s.q_norm_size, T_, s.q_heads, D);
    rmsnorm_forward<T>(q, q, q_norm, r.rows, r.width, static_cast<double>(s.eps));
  }
  if (k_norm != nullptr && s.k_norm_size > 0) {
    const QkNormRows r = qk_norm_rows(s.k_norm_size, T_, s.kv_heads, D);
    rmsnorm_forward<T>(k, k, k_norm, r.rows, r.width, static_cast<double>(s.eps));
  }
  if (rope != nullptr) {
    HLM_CHECK(rope->head_dim == D, "rope table head_dim ", rope->head_dim, " != attention head_dim ", D);
    rope_forward<T>(q, positions, T_, s.q_heads, *rope);
    rope_forward<T>(k, positions, T_, s.kv_heads, *rope);
  }
  // attention_cache_write, for either T.
  const int64_t row = cache.slot_elements(), slots = cache.num_blocks * cache.block_size;
  for (int64_t t = 0; t < T_; ++t) {
    const int64_t slot = slot_mapping[t];
    HLM_CHECK(slot >= 0 && slot < slots, "KV cache slot ", slot, " outside the pool of ", slots);
    std::copy_n(k + t * row, row, k_cache + slot * row);
    std::copy_n(v + t * row, row, v_cache + slot * row);
  }
}

template void qk_norm_rope_cache_write<float>(float*, float*, const float*, const float*, const float*,
                                              const QkNormRopeShape&, const RopeTable*, const int32_t*, float*, float*,
                                              const int64_t*, const PagedKvShape&);
template void qk_norm_rope_cache_write<double>(double*, double*, const double*, const double*, const double*,
                                               const QkNormRopeShape&, const RopeTable*, const int32_t*, double*,
                                               double*, const int64_t*, const PagedKvShape&);

}  // namespace hlm
