// Warp-level tensor-core primitives of the chunked gated delta rule's v2 backward kernels (gdn_bwd_v2.cuh):
// mma.sync.aligned.m16n8k16 bf16 × bf16 → fp32 and ldmatrix (x4, plain and .trans), with the fragment layouts
// written out, so the kernels can keep accumulators in registers, apply masks and decays on them, and feed one
// product's result to the next as an A operand (FlashAttention-2's re-packing) without a shared-memory round trip.
// Built with HLM_GDN_EMU defined (tools/cuda_emu/gdn_bwd_emu.sh) the four asm primitives are left out: the CPU
// emulation (tools/cuda_emu/gdn_bwd_emu.h) defines them with the same names and semantics, everything else here is
// shared, so the index math below is what the emulated run checks.
//
// Fragments of one warp (lane l; g = l / 4 the group, t = l % 4 the thread in the group; PTX ISA "Matrix Fragments
// for mma.m16n8k16", .bf16). A register holds two bf16, the lower-indexed element in the low 16 bits.
//   A 16×16 (row m, column k): a[0] = (g, 2t..2t+1)   a[1] = (g+8, 2t..2t+1)   a[2] = (g, 2t+8..)   a[3] = (g+8, 2t+8..)
//   B 16×8  (row k, column n): b[0] = (2t..2t+1, g)   b[1] = (2t+8..2t+9, g)
//   C 16×8  (row m, column n): c[0..1] = (g, 2t..2t+1)   c[2..3] = (g+8, 2t..2t+1)   (fp32)
// So the C fragments of n-tiles 2c and 2c+1 of a 16-row strip, rounded to bf16 pairs, are exactly the A fragment of
// k-tile c of that strip (frag_a_from_c).
// ldmatrix x4: lanes 8j..8j+7 give the row addresses of 8×8 matrix j (16 bytes each); register j of lane l receives
// matrix j's (row g, columns 2t..2t+1), or with .trans its (rows 2t..2t+1, column g).
#pragma once
#include <cstdint>

namespace hlm::gdn_chunked::mma {

struct FragA {
  uint32_t x[4];
};
struct FragB {
  uint32_t x[2];
};
struct FragC {
  float x[4];
};

#ifndef HLM_GDN_EMU
// d = c + a·b (fp32 accumulate); d may alias c.
__device__ __forceinline__ void mma_bf16(FragC& d, const FragA& a, const FragB& b) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d.x[0]), "+f"(d.x[1]), "+f"(d.x[2]), "+f"(d.x[3])
      : "r"(a.x[0]), "r"(a.x[1]), "r"(a.x[2]), "r"(a.x[3]), "r"(b.x[0]), "r"(b.x[1]));
}
__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], const void* row) {
  const unsigned p = static_cast<unsigned>(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(p));
}
__device__ __forceinline__ void ldsm_x4_t(uint32_t (&r)[4], const void* row) {
  const unsigned p = static_cast<unsigned>(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(p));
}
#endif

__device__ __forceinline__ int lane_id() { return static_cast<int>(threadIdx.x) % 32; }

// Two floats as a bf16 pair (lo in the low half), round to nearest even.
__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
  const uint32_t l = __bfloat16_as_ushort(__float2bfloat16_rn(lo));
  const uint32_t h = __bfloat16_as_ushort(__float2bfloat16_rn(hi));
  return l | (h << 16);
}
__device__ __forceinline__ float bf16_lo(uint32_t v) { return __uint_as_float(v << 16); }
__device__ __forceinline__ float bf16_hi(uint32_t v) { return __uint_as_float(v & 0xffff0000u); }

// ---- Operands from shared memory (bf16, row stride ld elements; each 8-row group's rows 16-byte aligned)

// A of the 16×16 block at (m0, k0) of a row-major [m][k] tile.
__device__ __forceinline__ FragA lds_a(const bf16* A, int ld, int m0, int k0) {
  const int l = lane_id();
  FragA a;
  ldsm_x4(a.x, A + (m0 + (l % 16)) * ld + k0 + (l / 16) * 8);
  return a;
}
// A of the 16×16 block at (m0, k0) of Aᵀ stored row-major [k][m] (A = Sᵀ for a stored S).
__device__ __forceinline__ FragA lds_a_trans(const bf16* At, int ld, int m0, int k0) {
  const int l = lane_id();
  FragA a;
  ldsm_x4_t(a.x, At + (k0 + (l % 8) + (l / 16) * 8) * ld + m0 + ((l / 8) % 2) * 8);
  return a;
}
// B of n-tiles n0..n0+7 and n0+8..n0+15 (k rows k0..k0+15) of Bᵀ stored row-major [n][k] (B = Sᵀ: Q Kᵀ reads K so).
__device__ __forceinline__ void lds_b_nk(FragB& b0, FragB& b1, const bf16* Bt, int ld, int k0, int n0) {
  const int l = lane_id();
  uint32_t r[4];
  ldsm_x4(r, Bt + (n0 + (l % 8) + (l / 16) * 8) * ld + k0 + ((l / 8) % 2) * 8);
  b0.x[0] = r[0];
  b0.x[1] = r[1];
  b1.x[0] = r[2];
  b1.x[1] = r[3];
}
// The same from B stored row-major [k][n] (M0 [dv][dk] as the B of dO M0).
__device__ __forceinline__ void lds_b_kn(FragB& b0, FragB& b1, const bf16* B, int ld, int k0, int n0) {
  const int l = lane_id();
  uint32_t r[4];
  ldsm_x4_t(r, B + (k0 + (l % 8) + ((l / 8) % 2) * 8) * ld + n0 + (l / 16) * 8);
  b0.x[0] = r[0];
  b0.x[1] = r[1];
  b1.x[0] = r[2];
  b1.x[1] = r[3];
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
      a.x[r] = i < len ? v : 0u;
    } else {
      const Src* p = src + i * stride + k;
      float lo = 0.0f, hi = 0.0f;
      if (i < len) {
        if (k < width) lo = static_cast<float>(p[0]);
        if (k + 1 < width) hi = static_cast<float>(p[1]);
      }
      a.x[r] = pack_bf16x2(lo, hi);
    }
  }
  return a;
}

// A of k-tile c from the fp32 accumulators of n-tiles 2c and 2c+1 of the same 16-row strip.
__device__ __forceinline__ FragA frag_a_from_c(const FragC& lo, const FragC& hi) {
  FragA a;
  a.x[0] = pack_bf16x2(lo.x[0], lo.x[1]);
  a.x[1] = pack_bf16x2(lo.x[2], lo.x[3]);
  a.x[2] = pack_bf16x2(hi.x[0], hi.x[1]);
  a.x[3] = pack_bf16x2(hi.x[2], hi.x[3]);
  return a;
}

template <int N>
__device__ __forceinline__ void zero(FragC (&c)[N]) {
#pragma unroll
  for (int n = 0; n < N; ++n) c[n] = FragC{{0.0f, 0.0f, 0.0f, 0.0f}};
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
