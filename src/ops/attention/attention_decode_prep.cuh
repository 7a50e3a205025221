// The q/k preparation folded into the decode attention kernels (attention_cache_decode_prep_cuda), as device code
// only: its arguments (DecodePrep), the packing of a prepared row into cache elements, and the block-wide preparation
// both kernels run (decode_prep_block). The warp kernel (attention_decode_warps.cuh) takes per-head norms (its
// supported check); the tiled kernel (attention_decode_tiled.cuh) also norms over the whole q or k row (OLMo's), whose
// sums of squares it computes in the summation order of qk_norm_rope.cu (rmsnorm.cu's: a warp per row of ≤ 1,024, else
// 256 threads and block_sum), so that the folded launch gives the bits of the q/k launch + the attention kernel.
// Included by attention_cache.cu and by tools/cuda_emu's emulation. Internal linkage.
#pragma once
#include <cstdint>

#include "ops/attention/attention_cache_common.cuh"
#include "ops/qk_norm_rope/qk_row_math.cuh"

namespace hlm {

namespace {

// The raw projections, the norms (or none), RoPE and the cache slots of the step's tokens, as
// qk_norm_rope_cache_write_cuda takes them.
struct DecodePrep {
  const float* q;       // [T, Hq·D] the raw projections: read by every split's block, so never written
  const float* k;       // [T, Hkv·D]
  const float* v;       // [T, Hkv·D]
  const float* q_norm;  // [D] per head, [Hq·D] when q_whole, or nullptr
  const float* k_norm;  // [D] per head, [Hkv·D] when k_whole, or nullptr
  float eps;
  bool q_vec, k_vec;    // the norms' V = 4 order (qk_row_math.cuh; a whole row's only when it is ≤ 1,024 long)
  bool q_whole, k_whole;  // the norm spans the token's whole q (k) row (tiled kernel only)
  const int32_t* positions;  // [T]
  const float* cos;     // [num_positions, half] or nullptr (no RoPE)
  const float* sin;
  int64_t half, num_positions;
  const int64_t* slots;  // [T] cache slots of the new k/v rows
  int64_t cache_slots;
};

// kVec cache elements packed into 16 bytes from fp32 values (narrowed as the cache write narrows them).
template <typename C, int kVec>
__device__ __forceinline__ uint4 pack_chunk(const float* x) {
  uint4 u;
  C* e = reinterpret_cast<C*>(&u);
#pragma unroll
  for (int i = 0; i < kVec; ++i) e[i] = narrow<C>(x[i]);
  return u;
}

// rmsnorm.cu's two summation orders (attention_cache.cu asserts them against rmsnorm_cuda.h).
constexpr int kNormBlockThreads = 256;       // rmsnorm_cuda_threads(): the block path for rows > kNormWarpMaxDim
constexpr int64_t kNormWarpMaxDim = 1024;    // rmsnorm_cuda_warp_max_dim(): one warp per row up to it
constexpr int kNormVirtualWarps = kNormBlockThreads / 32;
static_assert(kNormBlockThreads == 2 * kDecodeThreads, "each decode thread plays two of the block path's threads");

// Σ x² of a row of n ≤ kNormWarpMaxDim in qk_norm_row_warp's order, by the calling warp (every lane gets it): lane l
// sums with FMA its chunks of V at (32j + l)·V (V = 4 when vec), j ascending, then warp_sum. All loads first.
__device__ __forceinline__ float warp_order_sumsq(const float* x, int64_t n, bool vec) {
  const int lane = static_cast<int>(threadIdx.x % 32);
  float ss = 0.0f;
  if (vec) {
    float4 c[kNormWarpMaxDim / 128];
#pragma unroll
    for (int j = 0; j < kNormWarpMaxDim / 128; ++j) {
      const int64_t s = (static_cast<int64_t>(j) * 32 + lane) * 4;
      c[j] = s < n ? __ldcg(reinterpret_cast<const float4*>(x + s)) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
#pragma unroll
    for (int j = 0; j < kNormWarpMaxDim / 128; ++j)
      if ((static_cast<int64_t>(j) * 32 + lane) * 4 < n) {
        ss = fmaf(c[j].x, c[j].x, ss);
        ss = fmaf(c[j].y, c[j].y, ss);
        ss = fmaf(c[j].z, c[j].z, ss);
        ss = fmaf(c[j].w, c[j].w, ss);
      }
  } else {
    float c[kNormWarpMaxDim / 32];
#pragma unroll
    for (int j = 0; j < kNormWarpMaxDim / 32; ++j) {
      const int64_t s = static_cast<int64_t>(j) * 32 + lane;
      c[j] = s < n ? __ldcg(x + s) : 0.0f;
    }
#pragma unroll
    for (int j = 0; j < kNormWarpMaxDim / 32; ++j)
      if (static_cast<int64_t>(j) * 32 + lane < n) ss = fmaf(c[j], c[j], ss);
  }
  return cuda::warp_sum(ss);
}

// The block path's per-thread partials of a row of n > kNormWarpMaxDim: block-path thread u sums x[u], x[u + 256], ...
// with FMA; this thread t plays u = t (into a) and u = t + 128 (into b), 16 loads per chain in flight (one L2 round
// trip for a row of 4,096; 80 registers at the 7B shape, as 8 were).
__device__ __forceinline__ void block_order_partials(const float* x, int64_t n, float& a, float& b) {
  const int t = static_cast<int>(threadIdx.x);
  a = b = 0.0f;
  for (int64_t base = 0; base < n; base += 16 * kNormBlockThreads) {
    float xa[16], xb[16];
#pragma unroll
    for (int u = 0; u < 16; ++u) {
      const int64_t da = base + u * kNormBlockThreads + t, db = da + kDecodeThreads;
      xa[u] = da < n ? __ldcg(x + da) : 0.0f;
      xb[u] = db < n ? __ldcg(x + db) : 0.0f;
    }
#pragma unroll
    for (int u = 0; u < 16; ++u) {
      const int64_t da = base + u * kNormBlockThreads + t, db = da + kDecodeThreads;
      if (da < n) a = fmaf(xa[u], xa[u], a);
      if (db < n) b = fmaf(xb[u], xb[u], b);
    }
  }
}

// Shared memory of a block's preparation (the q heads go into the kernel's own q rows).
template <int DMAX>
struct PrepShared {
  float k[DMAX], v[DMAX];                  // the new key's k (normalized, rotated) and v, fp32
  float cs[DMAX / 2], sn[DMAX / 2];         // cos, sin at the token's position
  float red[2][kNormVirtualWarps];         // whole-row sums: the block path's warp sums, or the warp path's sum
};

// A decode kernel's q/k preparation, by all kDecodeThreads threads of a block after the dependent-launch wait:
// q_s[g] ← q head h0 + g normalized and rotated (zero past D); when the block's split holds the step's new key
// (holds_new), ps.k / ps.v ← its KV head's new k (normalized, rotated) and v, and the KV head's first head group
// writes them into the cache slot (narrowed), as the q/k kernel does; a slot outside the pool raises the flag and is
// not written. The operations are qk_norm_rope.cu's: whole-row sums in its order (above), per-head rows through
// qk_norm_row_warp, then x = w · (x · r), RoPE by qk_rope_pair (NaN on the rotary dims and the flag for a position
// outside the table). Ends after a block barrier.
// kWholeRows false (the warp kernel, per-head norms only): the whole-row code is compiled out (it would raise that
// kernel's registers).
template <int HPB, int DMAX, typename C, bool kWholeRows>
__device__ void decode_prep_block(const DecodePrep& pr, const CacheDims& dm, int64_t tok, int64_t h0, int64_t kvh,
                                  bool holds_new, float (&q_s)[HPB][DMAX], PrepShared<DMAX>& ps, C* k_cache,
                                  C* v_cache, int* flag) {
  const int t = static_cast<int>(threadIdx.x), warp = t / 32, lane = t % 32;
  const int64_t D = dm.D, Cq = dm.Hq * D, Ckv = dm.Hkv * D;
  const float* q_row = pr.q + tok * Cq;
  const float* k_row = pr.k + tok * Ckv;
  const int32_t pos = pr.cos != nullptr ? pr.positions[tok] : 0;
  const bool pos_ok = pr.cos != nullptr && pos >= 0 && pos < pr.num_positions;
  // 1. loads: the block's raw q heads, the new key's raw k and v, cos and sin; whole-row sums of squares (their own
  //    loads) — everything issued before the barrier.
  for (int i = t; i < HPB * DMAX; i += kDecodeThreads) {
    const int g = i / DMAX, d = i % DMAX;
    q_s[g][d] = d < D ? __ldcg(q_row + (h0 + g) * D + d) : 0.0f;
  }
  for (int64_t i = t; holds_new && i < D; i += kDecodeThreads) {
    ps.k[i] = __ldcg(k_row + kvh * D + i);
    ps.v[i] = __ldcg(pr.v + tok * Ckv + kvh * D + i);
  }
  if (pos_ok)
    for (int64_t i = t; i < pr.half; i += kDecodeThreads) {
      ps.cs[i] = pr.cos[static_cast<int64_t>(pos) * pr.half + i];
      ps.sn[i] = pr.sin[static_cast<int64_t>(pos) * pr.half + i];
    }
  const bool q_whole = kWholeRows && pr.q_norm != nullptr && pr.q_whole;
  const bool k_whole = kWholeRows && pr.k_norm != nullptr && pr.k_whole && holds_new;
  const bool q_block = q_whole && Cq > kNormWarpMaxDim, k_block = k_whole && Ckv > kNormWarpMaxDim;
  if (q_block || k_block) {  // the block path (uniform over the block): every thread
    float qa = 0.0f, qb = 0.0f, ka = 0.0f, kb = 0.0f;
    if (q_block) block_order_partials(q_row, Cq, qa, qb);
    if (k_block) block_order_partials(k_row, Ckv, ka, kb);
    // block_sum's tree over virtual warps `warp` (a) and `warp` + 4 (b); lane 0 keeps them in red[row]
    const auto keep = [&](int row, float a, float b) {
      a = cuda::warp_sum(a);
      b = cuda::warp_sum(b);
      if (lane == 0) {
        ps.red[row][warp] = a;
        ps.red[row][warp + kNormVirtualWarps / 2] = b;
      }
    };
    if (q_block) keep(0, qa, qb);
    if (k_block) keep(1, ka, kb);
  }
  // The warp path (rows ≤ 1,024): warp 0 sums q, warp 1 sums k; lane 0 writes the sum to red[row][0] (the rest of
  // that row's red stays unread).
  if (q_whole && Cq <= kNormWarpMaxDim && warp == 0) {
    const float s = warp_order_sumsq(q_row, Cq, pr.q_vec);
    if (lane == 0) ps.red[0][0] = s;
  }
  if (k_whole && Ckv <= kNormWarpMaxDim && warp == 1) {
    const float s = warp_order_sumsq(k_row, Ckv, pr.k_vec);
    if (lane == 0) ps.red[1][0] = s;
  }
  __syncthreads();
  // 2. norms. Whole rows: r from the sum (block path: the 8 warp sums added in order from 0, as block_sum), then
  //    x = w · (x · r) at the row's indices. Per head: a warp per row, rmsnorm.cu's warp order.
  const auto whole_inv = [&](int which, int64_t n) {
    float ss = ps.red[which][0];
    if (n > kNormWarpMaxDim) {
      ss = 0.0f;
#pragma unroll
      for (int w = 0; w < kNormVirtualWarps; ++w) ss += ps.red[which][w];
    }
    return 1.0f / sqrtf(ss / static_cast<float>(n) + pr.eps);
  };
  if (q_whole) {
    const float r = whole_inv(0, Cq);
    for (int i = t; i < HPB * DMAX; i += kDecodeThreads) {
      const int g = i / DMAX, d = i % DMAX;
      if (d < D) q_s[g][d] = pr.q_norm[(h0 + g) * D + d] * (q_s[g][d] * r);
    }
  }
  if (k_whole) {
    const float r = whole_inv(1, Ckv);
    for (int64_t i = t; i < D; i += kDecodeThreads) ps.k[i] = pr.k_norm[kvh * D + i] * (ps.k[i] * r);
  }
  const int rows = HPB + (holds_new ? 1 : 0);  // per-head rows: the q heads, then k
  for (int r = warp; r < rows; r += kDecodeThreads / 32) {
    const bool is_q = r < HPB;
    const float* w = is_q ? pr.q_norm : pr.k_norm;
    if (w != nullptr && !(is_q ? q_whole : k_whole))
      cuda::qk_norm_row_warp(is_q ? &q_s[r][0] : ps.k, D, w, is_q ? pr.q_vec : pr.k_vec, pr.eps, 0, D);
  }
  __syncthreads();
  // 3. RoPE over the q heads and the new k row.
  if (pr.cos != nullptr) {
    if (!pos_ok && t == 0 && flag != nullptr) atomicOr(flag, 1);
    for (int64_t p = t; p < rows * pr.half; p += kDecodeThreads) {
      const int64_t h = p / pr.half, i = p - h * pr.half;
      float* x = h < HPB ? &q_s[h][0] : ps.k;
      if (!pos_ok) {
        x[i] = quiet_nan();
        x[i + pr.half] = quiet_nan();
      } else {
        cuda::qk_rope_pair(x, i, pr.half, ps.cs[i], ps.sn[i]);
      }
    }
    __syncthreads();
  }
  // 4. the cache write, by the KV head's first head group (the caches are written only here in the launch)
  if (holds_new && h0 % dm.group == 0) {
    const int64_t slot = pr.slots[tok];
    if (slot < 0 || slot >= pr.cache_slots) {
      if (t == 0 && flag != nullptr) atomicOr(flag, 1);
    } else {
      C* kc = k_cache + (slot * dm.Hkv + kvh) * D;
      C* vc = v_cache + (slot * dm.Hkv + kvh) * D;
      for (int64_t i = t; i < D; i += kDecodeThreads) {
        kc[i] = narrow<C>(ps.k[i]);
        vc[i] = narrow<C>(ps.v[i]);
      }
    }
  }
}

}  // namespace

}  // namespace hlm
