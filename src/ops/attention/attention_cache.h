// Causal GQA softmax attention of new query tokens over a PAGED KV cache (inference: prefill chunks and decode
// steps), CPU reference. The cache of one attention layer is a pool of fixed-size token blocks:
//   k_cache, v_cache [num_blocks, block_size, Hkv, D]   token slot s = block · block_size + offset
// A sequence's tokens live in the blocks its block table lists, in order: token p of sequence n is in block
// block_tables[n · max_blocks + p / block_size] at offset p % block_size.
//
// attention_cache_write stores k/v rows [T, Hkv, D] at slots slot_mapping[T] (the caller appends a chunk's keys before
// attending, so the chunk sees itself).
// attention_cache_forward: q, out [T, Hq, D] packed in N sequences (cu_seqlens [N+1]); sequence n's context after the
// chunk is context_lens[n] tokens (cached before + this chunk), so its i-th query (of n_q = cu_seqlens[n+1] −
// cu_seqlens[n]) sits at absolute position context_lens[n] − n_q + i and attends to the cached tokens 0 .. that
// position: all earlier tokens plus the causal part of the chunk. Query head h reads kv head h / (Hq / Hkv).
// window > 0 (a sliding-window layer): a query at position p attends only to positions p − window + 1 .. p (the
// convention of attention.h); block table entries wholly before the chunk's first window are not read, so a caller
// may release those blocks.
//
// Numerics: the operation order of attention_forward (ops/attention/attention.h) — fp32 scores scaled, max subtracted,
// exp in fp32, row sum in double, p = e · (1/Σ), out = Σ_j p_j v_j in key order — so a prefill of a whole sequence
// through the cache equals the full causal attention to the last bit, and a chunked prefill / decode differs from it
// only where the projections saw different row counts. Deterministic, independent of the OpenMP thread count.
#pragma once
#include <cstdint>

#include "ops/attention/attention.h"

namespace hlm {

struct PagedKvShape {
  int64_t num_blocks = 0;
  int64_t block_size = 0;
  int64_t kv_heads = 0;  // Hkv
  int64_t head_dim = 0;  // D
  int64_t slot_elements() const { return kv_heads * head_dim; }
};

// k_cache/v_cache rows at slot_mapping[t] ← k/v [t] for t < tokens (slots must be < num_blocks · block_size).
void attention_cache_write(float* k_cache, float* v_cache, const float* k, const float* v,
                           const int64_t* slot_mapping, int64_t tokens, const PagedKvShape& cache);

// out [T, Hq, D] (overwritten); see the header comment. block_tables [N, max_blocks] (int32 block ids; entries past a
// sequence's last block are not read).
void attention_cache_forward(float* out, const float* q, const float* k_cache, const float* v_cache,
                             const PagedKvShape& cache, const int32_t* block_tables, int64_t max_blocks,
                             const int64_t* context_lens, const int64_t* cu_seqlens, int64_t n_seqs, int64_t q_heads,
                             float scale, int64_t window = 0);

}  // namespace hlm
