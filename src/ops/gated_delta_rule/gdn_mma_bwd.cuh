// Warp-level helpers of the chunked gated delta rule's v2 backward kernels (gdn_bwd_v2.cuh) on top of gdn_mma.cuh
// (mma.sync m16n8k16, ldmatrix, fragment layouts: see there): tile loads addressed by block coordinates, A fragments
// straight from global memory for row strips only one warp reads, and the lane reductions over an accumulator's
// rows and columns. With HLM_CUDA_EMU defined (tools/cuda_emu/gdn_bwd_emu.sh) gdn_mma.cuh's primitives are the CPU
// emulation's, so the emulated run checks this file's index math too.
//
// Accumulator layout (gdn_mma.cuh): lane l, g = l / 4, t = l % 4 holds C[g][2t..2t+1] (r[0..1]) and C[g+8][2t..2t+1]
// (r[2..3]) of each 16×8 tile: a row's values sit in the four lanes of a group, a column's in the eight groups.
#pragma once
#include <cstdint>

#include "ops/gated_delta_rule/gdn_mma.cuh"

namespace hlm::gdn_chunked::mma {

using gdn_mma::FragA;
using gdn_mma::FragB;
using gdn_mma::FragC;
using gdn_mma::lane_id;
using gdn_mma::pack_bf16x2;
using gdn_mma::scale_rows;

__device__ __forceinline__ void mma_bf16(FragC& d, const FragA& a, const FragB& b) { gdn_mma::mma_16816(d, a, b); }
__device__ __forceinline__ float bf16_lo(uint32_t v) { return __uint_as_float(v << 16); }
__device__ __forceinline__ float bf16_hi(uint32_t v) { return __uint_as_float(v & 0xffff0000u); }

// ---- Operands from shared memory by block coordinates (bf16, row stride ld elements, rows 16-byte aligned)

// A of the 16×16 block at (m0, k0) of a row-major [m][k] tile.
__device__ __forceinline__ FragA lds_a(const bf16* A, int ld, int m0, int k0) {
  FragA a;
  gdn_mma::load_a(a, A + m0 * ld + k0, ld);
  return a;
}
// A of the 16×16 block at (m0, k0) of Aᵀ stored row-major [k][m] (A = Sᵀ for a stored S).
__device__ __forceinline__ FragA lds_a_trans(const bf16* At, int ld, int m0, int k0) {
  FragA a;
  gdn_mma::load_a_trans(a, At + k0 * ld + m0, ld);
  return a;
}
// B of n-tiles n0..n0+7 and n0+8..n0+15 (k rows k0..k0+15) of Bᵀ stored row-major [n][k] (Q Kᵀ reads K so).
__device__ __forceinline__ void lds_b_nk(FragB& b0, FragB& b1, const bf16* Bt, int ld, int k0, int n0) {
  FragB b[2];
  gdn_mma::load_b2(b, Bt + n0 * ld + k0, ld);
  b0 = b[0];
  b1 = b[1];
}
// The same from B stored row-major [k][n] (M0 [dv][dk] as the B of dO M0).
__device__ __forceinline__ void lds_b_kn(FragB& b0, FragB& b1, const bf16* B, int ld, int k0, int n0) {
  FragB b[2];
  gdn_mma::load_b2_trans(b, B + k0 * ld + n0, ld);
  b0 = b[0];
  b1 = b[1];
}

// ---- Operands straight from global memory (row-owned strips: only this warp reads them)

// A of the 16×16 block at (rows row0.., columns k0..) of a row-major matrix (row stride `stride` elements), rows ≥ len
// and columns ≥ width as zeros, rounded to bf16; Src float or bf16. kFull: width = 128, the stride even and the base
// aligned to two elements, so each register is one unconditional 8-byte (fp32) or 4-byte (bf16) load from a row
// clamped to len − 1 and zeroed after (no branches, so the loads of several k-tiles are issued together); else
// element loads with guards.
template <bool kFull, typename Src>
__device__ __forceinline__ FragA ldg_a(const Src* src, int64_t stride, int row0, int k0, int len, int width) {
  const int l = lane_id(), g = l / 4, t = l % 4;
  FragA a;
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    const int i = row0 + g + (r % 2) * 8, k = k0 + 2 * t + (r / 2) * 8;
    if constexpr (kFull) {
      const Src* p = src + min(i, len - 1) * stride + k;
      uint32_t v;
      if constexpr (sizeof(Src) == 4) {
        const float2 f = __ldg(reinterpret_cast<const float2*>(p));
        v = pack_bf16x2(f.x, f.y);
      } else {
        v = __ldg(reinterpret_cast<const unsigned int*>(p));
      }
      a.r[r] = i < len ? v : 0u;
    } else {
      const Src* p = src + i * stride + k;
      float lo = 0.0f, hi = 0.0f;
      if (i < len) {
        if (k < width) lo = static_cast<float>(p[0]);
        if (k + 1 < width) hi = static_cast<float>(p[1]);
      }
      a.r[r] = pack_bf16x2(lo, hi);
    }
  }
  return a;
}

template <int N>
__device__ __forceinline__ void zero(FragC (&c)[N]) {
#pragma unroll
  for (int n = 0; n < N; ++n) gdn_mma::zero(c[n]);
}

// Sum over the four lanes of a group (the lanes that hold one accumulator row).
__device__ __forceinline__ float group_sum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  v += __shfl_xor_sync(0xffffffffu, v, 2);
  return v;
}
// Sum over the eight groups (the lanes that hold one accumulator column pair).
__device__ __forceinline__ float column_sum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 4);
  v += __shfl_xor_sync(0xffffffffu, v, 8);
  v += __shfl_xor_sync(0xffffffffu, v, 16);
  return v;
}

}  // namespace hlm::gdn_chunked::mma
