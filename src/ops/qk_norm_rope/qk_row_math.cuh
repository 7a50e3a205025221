// The per-row steps of the q/k preparation on the device, shared by the q/k norm + RoPE + cache write kernel
// (qk_norm_rope.cu) and the decode attention kernel that folds that preparation in (attention_cache.cu,
// attention_cache_decode_prep_cuda), so that both give the bits of the separate rmsnorm and rope launches:
//   qk_norm_row_warp: one warp normalizes a row of x (shared memory) in place in rmsnorm.cu's warp order: lane l sums,
//     with FMA, its chunks of V elements at (32j + l)·V (V = 4 when `vec`: the row and the weight 16-byte aligned and
//     n % 4 == 0; else V = 1), then cuda::warp_sum; r = 1 / sqrt(Σ / n + eps); x = w · (x · r), written only for
//     the elements in [wlo, whi) (a cluster block's own heads; the sum is over the whole row). Rows of n ≤
//     rmsnorm_cuda_warp_max_dim() only.
//   qk_rope_pair: RoPE of the pair (x[i], x[i + half]) by (c, s) = (cos, sin) of the position: rope.cu's two products
//     and one sum per output, each separately rounded.
#pragma once
#include <cstdint>

#include "backend/cuda/warp_rows.cuh"

namespace hlm::cuda {

__device__ __forceinline__ void qk_norm_row_warp(float* xr, int64_t n, const float* w, bool vec, float eps,
                                                 int64_t wlo, int64_t whi) {
  const int lane = static_cast<int>(threadIdx.x % 32);
  float ss = 0.0f;
  if (vec) {  // V = 4: 16-byte shared loads (the caller's rows start 16-byte aligned)
    for (int64_t s = static_cast<int64_t>(lane) * 4; s < n; s += 128) {
      const float4 c = *reinterpret_cast<const float4*>(xr + s);
      ss = fmaf(c.x, c.x, ss);
      ss = fmaf(c.y, c.y, ss);
      ss = fmaf(c.z, c.z, ss);
      ss = fmaf(c.w, c.w, ss);
    }
  } else {
    for (int64_t s = lane; s < n; s += 32) ss = fmaf(xr[s], xr[s], ss);
  }
  ss = warp_sum(ss);  // this lane's reads are done; it writes only its own elements below
  const float inv = 1.0f / sqrtf(ss / static_cast<float>(n) + eps);
  const int V = vec ? 4 : 1;
  for (int64_t s = static_cast<int64_t>(lane) * V; s < n; s += 32 * V)
    for (int e = 0; e < V; ++e)
      if (s + e >= wlo && s + e < whi) xr[s + e] = w[s + e] * (xr[s + e] * inv);
}

__device__ __forceinline__ void qk_rope_pair(float* x, int64_t i, int64_t half, float c, float s) {
  const float x1 = x[i], x2 = x[i + half];
  const float lo_a = __fmul_rn(x1, c), lo_b = __fmul_rn(-x2, s);
  const float hi_a = __fmul_rn(x2, c), hi_b = __fmul_rn(x1, s);
  x[i] = __fadd_rn(lo_a, lo_b);
  x[i + half] = __fadd_rn(hi_a, hi_b);
}

}  // namespace hlm::cuda
