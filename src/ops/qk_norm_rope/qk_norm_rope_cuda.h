// q/k norm + RoPE + paged KV cache write on CUDA in ONE launch (contract: qk_norm_rope.h; raw device pointers, queued
// on `stream`, no synchronization, no allocation). It replaces, in an attention layer's inference step, the sequence
//   rmsnorm_forward_cuda(q_n, q, q_norm)  rmsnorm_forward_cuda(k_n, k, k_norm)   (attention_qk_norm_params rows)
//   rope_forward_cuda(q_n)  rope_forward_cuda(k_n)  attention_cache_write_cuda(k_cache, v_cache, k_n, v)
// (five launches per layer and step, ~1.2-1.7 µs each at batch 1 on the H200) and is BIT-IDENTICAL to it: every
// output (q, k and both caches, fp32 or bf16) has the bits that sequence gives, NaN included, and the error flag is
// set in the same cases. That holds because the kernel performs the same float operations in the same order:
//   - each norm row's Σx² in the order of rmsnorm_cuda.h (rows of ≤ rmsnorm_cuda_warp_max_dim(): lane l sums, with
//     FMA, its chunks of V elements at (32j + l)·V, V = 4 when q (k) and the weight are 16-byte aligned and the row
//     length is a multiple of 4, else V = 1, then the same xor-shuffle tree; longer rows: thread t of 256 sums
//     t, t + 256, ... then block_sum), r = 1 / sqrt(Σ/n + eps), out = w · (x · r);
//   - RoPE's two products and one sum per output with separate roundings (rope.cu), bad positions → NaN on the
//     rotary dims of that token;
//   - the cache stores: the fp32 value, or __float2bfloat16_rn of it.
// The summation order above is that of rmsnorm_forward_cuda with out = a fresh (aligned) buffer and x = q (k), as
// the engine's former sequence ran it.
//
// Layout: one block of 256 threads per unit (grid-stride over units): a unit is one KV group of a token (its Hq/Hkv
// q heads, its k and v head) when every norm row lies inside one group (per-head norms or none), else the whole
// token (a norm over whole q or k rows); the unit's q, k and v rows and its cos/sin row are loaded together into
// shared memory (((Hq + 2·Hkv)·D / units + R) floats), normalized and rotated there, then q and k are written back
// in place and k, v to the cache slot. With a norm over whole rows at ≤ 64 tokens (decode) on sm_90+, a token is a
// cluster of C blocks instead (C the largest divisor of Hkv ≤ 8, when above 1): each loads the whole q and k rows,
// sums them as the one block would (same bits), and normalizes, rotates and stores only its Hkv/C KV groups, after a
// cluster barrier that orders every block's reads of q and k before any write back. qk_norm_rope_cuda_supported says whether the rows fit
// in the device's shared memory (any model with (Hq + 2·Hkv)·D ≲ 56k does); the caller keeps the five launches
// otherwise.
//
// Bad input (never throws from the kernel): a position outside [0, rope.num_positions) sets *error_flag = 1 and the
// token's rotary dims of q and k become NaN (so do its cached k); a slot outside [0, cache_slots) sets *error_flag =
// 1 and nothing is written to the cache for that token (q and k are still written). error_flag may be nullptr; it is
// never cleared.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "ops/qk_norm_rope/qk_norm_rope.h"
#include "ops/rope/rope_cuda.h"

namespace hlm {

struct QkNormRopeCudaParams {
  QkNormRopeShape shape;    // tokens, heads, head_dim, norm sizes (0: no norm), eps
  int64_t cache_slots = 0;  // num_blocks · block_size: rows of k_cache / v_cache
};

// True when one token's rows fit in a block's shared memory on the current device (else use the separate launches).
bool qk_norm_rope_cuda_supported(const QkNormRopeCudaParams& p);

// q [T, Hq·D], k [T, Hkv·D] overwritten; v [T, Hkv·D]; q_norm / k_norm (fp32, nullable with norm size 0);
// positions [T] int32 and rope (nullptr: no RoPE; its head_dim must be D); slot_mapping [T] int64;
// k_cache / v_cache [cache_slots, Hkv·D]. q, k, v and the caches must not overlap.
void qk_norm_rope_cache_write_cuda(float* q, float* k, const float* v, const float* q_norm, const float* k_norm,
                                   const int32_t* positions, const RopeCudaTable* rope, float* k_cache,
                                   float* v_cache, const int64_t* slot_mapping, const QkNormRopeCudaParams& p,
                                   int* error_flag, cudaStream_t stream);
void qk_norm_rope_cache_write_cuda(float* q, float* k, const float* v, const float* q_norm, const float* k_norm,
                                   const int32_t* positions, const RopeCudaTable* rope, __nv_bfloat16* k_cache,
                                   __nv_bfloat16* v_cache, const int64_t* slot_mapping, const QkNormRopeCudaParams& p,
                                   int* error_flag, cudaStream_t stream);

}  // namespace hlm
