// Warp-level tensor-core primitives for the chunked gated delta rule's v2 kernels (forward and backward):
// mma.sync m16n8k16 bf16 × bf16 → fp32, ldmatrix x1/x2/x4 (plain and .trans), bf16x2 packing, and the tile loads
// and register re-packing built from them. No shared-memory round trip for accumulators: a product's result is
// consumed in registers (scaled, masked, or re-packed as the next product's A operand, the FlashAttention-2 trick).
//
// Fragment layouts (PTX ISA, "Matrix Fragments for mma.m16n8k16 with floating point type"). In a warp, lane l has
// g = l / 4 (group, 0..7) and t = l % 4 (thread in group, 0..3). A 32-bit register holding two bf16 holds the
// lower column (or lower k) in its low 16 bits.
//   FragA  A [16 m][16 k], 4 regs:  r[0] = A[g][2t, 2t+1]   r[1] = A[g+8][2t, 2t+1]
//                                   r[2] = A[g][2t+8, +9]   r[3] = A[g+8][2t+8, +9]
//   FragB  B [16 k][8 n], 2 regs:   r[0] = B[2t, 2t+1][g]   r[1] = B[2t+8, 2t+9][g]
//   FragC  C [16 m][8 n], 4 floats: r[0], r[1] = C[g][2t], C[g][2t+1]     r[2], r[3] = C[g+8][2t], C[g+8][2t+1]
// ldmatrix (m8n8, b16): lanes 8i..8i+7 give the 8 row addresses (16 bytes each, 16-byte aligned, shared memory) of
// matrix i (x1: lanes 0-7 matter, x2: 0-15, x4: all); register i of lane l receives, of matrix i,
//   plain:  M[l/4][2(l%4)], M[l/4][2(l%4)+1]          (row g, columns 2t, 2t+1)
//   .trans: M[2(l%4)][l/4], M[2(l%4)+1][l/4]          (rows 2t, 2t+1, column g)
// So a row-major A tile is a plain x4, a B tile stored n-major ([n][k], i.e. Bᵀ row-major) a plain load, a B tile
// stored k-major ([k][n]) a .trans load, and an A tile stored [k][m] an x4.trans (helpers below).
// An accumulator pair (FragC of columns 0-7 and 8-15 of the same 16 rows) re-packed to bf16 is exactly a FragA of
// those 16 columns as k (a_from_acc): the product C·X can follow C = A·B without leaving registers.
//
// On the host (tools/cuda_emu, HLM_CUDA_EMU defined) the primitives come from emu_mma.h: the same names, run by one
// host thread per CUDA thread, exchanging fragments through a per-warp barrier. Everything else here is shared, so
// the emulation checks this file's index math too.
#pragma once
#include <cstdint>

#if defined(HLM_CUDA_EMU)
#include "emu_mma.h"  // mma_16816, ldsm_*, pack_bf16x2, unpack_bf16x2 on the host (tools/cuda_emu)
#else
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#endif

namespace hlm::gdn_mma {

struct FragA {
  uint32_t r[4];
};
struct FragB {
  uint32_t r[2];
};
struct FragC {
  float r[4];
};

#if !defined(HLM_CUDA_EMU)

// d += a · b (fp32 accumulate; the 16 products of a k-step are exact in fp32, their sum order is the hardware's).
__device__ __forceinline__ void mma_16816(FragC& d, const FragA& a, const FragB& b) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d.r[0]), "+f"(d.r[1]), "+f"(d.r[2]), "+f"(d.r[3])
      : "r"(a.r[0]), "r"(a.r[1]), "r"(a.r[2]), "r"(a.r[3]), "r"(b.r[0]), "r"(b.r[1]));
}

// Shared-memory byte addresses: 32-bit on the GPU (the emulation uses the host pointer). Kernels that compute a
// lane's address once and add constant byte offsets per tile (the ldsm_* overloads taking saddr_t) keep a register
// per operand instead of a 64-bit generic pointer per tile.
using saddr_t = uint32_t;
__device__ __forceinline__ saddr_t smem_addr(const void* p) {
  return static_cast<saddr_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void ldsm_x2(uint32_t& r0, uint32_t& r1, saddr_t row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];\n" : "=r"(r0), "=r"(r1) : "r"(row));
}
__device__ __forceinline__ void ldsm_x4(uint32_t& r0, uint32_t& r1, uint32_t& r2, uint32_t& r3, saddr_t row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(row));
}
__device__ __forceinline__ void ldsm_x2_trans(uint32_t& r0, uint32_t& r1, saddr_t row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];\n" : "=r"(r0), "=r"(r1) : "r"(row));
}
__device__ __forceinline__ void ldsm_x4_trans(uint32_t& r0, uint32_t& r1, uint32_t& r2, uint32_t& r3, saddr_t row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(row));
}
// row: this lane's row address (see the header comment for which lanes matter).
__device__ __forceinline__ void ldsm_x1(uint32_t& r0, const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%0}, [%1];\n" : "=r"(r0) : "r"(smem_addr(row)));
}
__device__ __forceinline__ void ldsm_x2(uint32_t& r0, uint32_t& r1, const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];\n"
               : "=r"(r0), "=r"(r1)
               : "r"(smem_addr(row)));
}
__device__ __forceinline__ void ldsm_x4(uint32_t& r0, uint32_t& r1, uint32_t& r2, uint32_t& r3, const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(smem_addr(row)));
}
__device__ __forceinline__ void ldsm_x1_trans(uint32_t& r0, const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16 {%0}, [%1];\n" : "=r"(r0) : "r"(smem_addr(row)));
}
__device__ __forceinline__ void ldsm_x2_trans(uint32_t& r0, uint32_t& r1, const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];\n"
               : "=r"(r0), "=r"(r1)
               : "r"(smem_addr(row)));
}
__device__ __forceinline__ void ldsm_x4_trans(uint32_t& r0, uint32_t& r1, uint32_t& r2, uint32_t& r3,
                                              const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(smem_addr(row)));
}

// Two floats rounded to nearest-even bf16 in one register: lo in the low half (the lower column / k).
// (cvt.rn.bf16x2.f32 d, a, b puts a in the upper half: the instruction __floats2bfloat162_rn(lo, hi) compiles to,
// written out so no bfloat162 temporary is taken by address.)
__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
  uint32_t d;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(d) : "f"(hi), "f"(lo));
  return d;
}
__device__ __forceinline__ float2 unpack_bf16x2(uint32_t v) {
  return make_float2(__uint_as_float(v << 16), __uint_as_float(v & 0xffff0000u));
}

#endif  // !HLM_CUDA_EMU

__device__ __forceinline__ int lane_id() { return static_cast<int>(threadIdx.x) & 31; }

// ---- Tile loads from shared memory (T: a 2-byte type such as bf16; row stride ld elements; row starts 16-byte aligned; ld·2 ≡ 16 mod 128
// keeps the eight rows of a matrix on distinct banks, e.g. gdn_chunked_tiles.cuh's kLdD, kLdC)

// Each load has a lane-offset function (elements from the tile's base for this lane's ldmatrix row address) and
// two forms: from a pointer, and from a byte address (saddr_t) the caller computed as smem_addr(base + lane_off).

// A [16 m][16 k] stored row-major at base (A[m][k] = base[m·ld + k]).
__device__ __forceinline__ int lane_off_a(int ld) { return (lane_id() % 16) * ld + 8 * (lane_id() / 16); }
// A [16 m][16 k] stored k-major at base (A[m][k] = base[k·ld + m]).
__device__ __forceinline__ int lane_off_a_trans(int ld) {
  const int l = lane_id();
  return ((l % 8) + 8 * (l / 16)) * ld + 8 * ((l / 8) % 2);
}
// Two B tiles [16 k][8 n] (n = 0-7 → b[0], n = 8-15 → b[1]) stored n-major at base (B[k][n] = base[n·ld + k]).
__device__ __forceinline__ int lane_off_b2(int ld) {
  const int l = lane_id();
  return ((l % 8) + 8 * (l / 16)) * ld + 8 * ((l / 8) % 2);
}
// Two B tiles [16 k][8 n] stored k-major at base (B[k][n] = base[k·ld + n]).
__device__ __forceinline__ int lane_off_b2_trans(int ld) {
  const int l = lane_id();
  return ((l % 8) + 8 * ((l / 8) % 2)) * ld + 8 * (l / 16);
}
// One B tile [16 k][8 n], n-major (B[k][n] = base[n·ld + k]) or k-major (base[k·ld + n]); lanes 16-31 repeat 0-15.
__device__ __forceinline__ int lane_off_b(int ld) {
  const int l = lane_id() % 16;
  return (l % 8) * ld + 8 * (l / 8);
}
__device__ __forceinline__ int lane_off_b_trans(int ld) { return (lane_id() % 16) * ld; }

__device__ __forceinline__ void load_a(FragA& a, saddr_t lane_addr) {
  ldsm_x4(a.r[0], a.r[1], a.r[2], a.r[3], lane_addr);
}
__device__ __forceinline__ void load_a_trans(FragA& a, saddr_t lane_addr) {
  ldsm_x4_trans(a.r[0], a.r[1], a.r[2], a.r[3], lane_addr);
}
__device__ __forceinline__ void load_b2(FragB (&b)[2], saddr_t lane_addr) {
  ldsm_x4(b[0].r[0], b[0].r[1], b[1].r[0], b[1].r[1], lane_addr);
}
__device__ __forceinline__ void load_b2_trans(FragB (&b)[2], saddr_t lane_addr) {
  ldsm_x4_trans(b[0].r[0], b[0].r[1], b[1].r[0], b[1].r[1], lane_addr);
}
__device__ __forceinline__ void load_b(FragB& b, saddr_t lane_addr) { ldsm_x2(b.r[0], b.r[1], lane_addr); }
__device__ __forceinline__ void load_b_trans(FragB& b, saddr_t lane_addr) { ldsm_x2_trans(b.r[0], b.r[1], lane_addr); }

template <typename T>
__device__ __forceinline__ void load_a(FragA& a, const T* base, int ld) {
  load_a(a, smem_addr(base + lane_off_a(ld)));
}
template <typename T>
__device__ __forceinline__ void load_a_trans(FragA& a, const T* base, int ld) {
  load_a_trans(a, smem_addr(base + lane_off_a_trans(ld)));
}
template <typename T>
__device__ __forceinline__ void load_b2(FragB (&b)[2], const T* base, int ld) {
  load_b2(b, smem_addr(base + lane_off_b2(ld)));
}
template <typename T>
__device__ __forceinline__ void load_b2_trans(FragB (&b)[2], const T* base, int ld) {
  load_b2_trans(b, smem_addr(base + lane_off_b2_trans(ld)));
}
template <typename T>
__device__ __forceinline__ void load_b(FragB& b, const T* base, int ld) {
  load_b(b, smem_addr(base + lane_off_b(ld)));
}
template <typename T>
__device__ __forceinline__ void load_b_trans(FragB& b, const T* base, int ld) {
  load_b_trans(b, smem_addr(base + lane_off_b_trans(ld)));
}

// ---- Register re-packing

// The FragA (bf16, rounded to nearest) of the 16 × 16 tile whose columns 0-7 are lo and 8-15 are hi (accumulators
// of the same 16 rows), optionally scaled by s.
__device__ __forceinline__ FragA a_from_acc(const FragC& lo, const FragC& hi, float s = 1.0f) {
  FragA a;
  a.r[0] = pack_bf16x2(s * lo.r[0], s * lo.r[1]);
  a.r[1] = pack_bf16x2(s * lo.r[2], s * lo.r[3]);
  a.r[2] = pack_bf16x2(s * hi.r[0], s * hi.r[1]);
  a.r[3] = pack_bf16x2(s * hi.r[2], s * hi.r[3]);
  return a;
}

// Coordinates of a FragC element e (0..3) for this lane: row in 0..15, column in 0..7.
__device__ __forceinline__ int acc_row(int e) { return lane_id() / 4 + 8 * (e / 2); }
__device__ __forceinline__ int acc_col(int e) { return 2 * (lane_id() % 4) + (e % 2); }

__device__ __forceinline__ void zero(FragC& c) {
  for (int e = 0; e < 4; ++e) c.r[e] = 0.0f;
}

// A 16-row strip of accumulators (c[0..N), one per 8 columns) with its rows scaled: this lane's row acc_row(0) by lo,
// row acc_row(2) (8 further down) by hi — diag(f) · C on the fragments.
template <int N>
__device__ __forceinline__ void scale_rows(FragC (&c)[N], float lo, float hi) {
#pragma unroll
  for (int n = 0; n < N; ++n) {
    c[n].r[0] *= lo;
    c[n].r[1] *= lo;
    c[n].r[2] *= hi;
    c[n].r[3] *= hi;
  }
}

}  // namespace hlm::gdn_mma
