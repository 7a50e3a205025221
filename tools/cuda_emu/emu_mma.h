// Host emulation of the warp-level tensor-core primitives that src/ops/gated_delta_rule/gdn_mma.cuh declares
// (included from there when HLM_CUDA_EMU is defined), plus the bf16 type and conversions the GDN kernels use:
// mma.sync m16n8k16 bf16 → fp32, ldmatrix m8n8 x1/x2/x4 (plain and .trans), bf16x2 packing. Each lane (a fiber,
// emu.h) publishes its operands in its warp's exchange buffer, the warp meets at its barrier, every lane
// assembles the whole matrices from the published fragments by the PTX layouts (written out once more below, from
// the spec, independently of gdn_mma.cuh's load helpers) and keeps its own part of the result. All 32 lanes must call
// together, as on the GPU (.sync.aligned).
// Numerics: an mma's 16 products per output are exact (bf16 × bf16 fits fp32); they are summed in double and added
// to the fp32 accumulator once, so results may differ from the hardware's fp32 sum order in the last bits.
// Self-test: emu_mma_selftest.cpp (tools/cuda_emu/emu_mma_selftest.sh).
#pragma once
#include <cassert>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "emu.h"

// ---- bf16 (round to nearest even; NaN stays a quiet NaN), the subset of cuda_bf16.h the kernels use
struct __nv_bfloat16 {
  uint16_t x;
  __nv_bfloat16() = default;
  __nv_bfloat16(float f) { *this = from(f); }  // cuda_bf16.h converts from float implicitly too
  static __nv_bfloat16 from(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    __nv_bfloat16 b;
    b.x = (u & 0x7fffffffu) > 0x7f800000u ? static_cast<uint16_t>((u >> 16) | 0x40u)
                                          : static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
    return b;
  }
  operator float() const {
    const uint32_t u = static_cast<uint32_t>(x) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
};
struct __nv_bfloat162 {
  __nv_bfloat16 x, y;
};
inline __nv_bfloat16 __float2bfloat16_rn(float f) { return __nv_bfloat16::from(f); }
inline float __bfloat162float(__nv_bfloat16 b) { return static_cast<float>(b); }
inline __nv_bfloat162 __floats2bfloat162_rn(float lo, float hi) { return {__float2bfloat16_rn(lo), __float2bfloat16_rn(hi)}; }
struct float2 {
  float x, y;
};
inline float2 make_float2(float a, float b) { return {a, b}; }

namespace hlm::gdn_mma {

namespace emu_detail {
inline WarpX& warp() { return g_warps[threadIdx.x / 32]; }
inline int lane() { return static_cast<int>(threadIdx.x % 32); }
inline float bits_to_float(uint32_t top16) {
  const uint32_t u = top16 << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline float lo_of(uint32_t v) { return bits_to_float(v & 0xffffu); }
inline float hi_of(uint32_t v) { return bits_to_float(v >> 16); }
}  // namespace emu_detail

inline uint32_t pack_bf16x2(float lo, float hi) {
  return static_cast<uint32_t>(__float2bfloat16_rn(lo).x) | (static_cast<uint32_t>(__float2bfloat16_rn(hi).x) << 16);
}
inline float2 unpack_bf16x2(uint32_t v) { return {emu_detail::lo_of(v), emu_detail::hi_of(v)}; }

// ldmatrix: lane l publishes its row address; register i of lane l takes, of matrix i (rows: lanes 8i..8i+7),
// plain: row l/4, columns 2(l%4), 2(l%4)+1; trans: rows 2(l%4), 2(l%4)+1, column l/4.
template <int kCount, bool kTrans>
inline void emu_ldsm(uint32_t* out, const void* row) {
  using namespace emu_detail;
  WarpX& w = warp();
  const int l = lane();
  const uintptr_t a = reinterpret_cast<uintptr_t>(row);
  w.xch[l][10] = a;
  w.bar->arrive_and_wait();
  for (int i = 0; i < kCount; ++i) {
    uint16_t v[2];
    for (int e = 0; e < 2; ++e) {
      const int r = kTrans ? 2 * (l % 4) + e : l / 4, c = kTrans ? l / 4 : 2 * (l % 4) + e;
      const uintptr_t base = w.xch[8 * i + r][10];
      if (base % 16 != 0) {
        std::fprintf(stderr, "ldmatrix: row address of lane %d not 16-byte aligned\n", 8 * i + r);
        std::abort();
      }
      std::memcpy(&v[e], reinterpret_cast<const char*>(base) + 2 * c, 2);
    }
    out[i] = static_cast<uint32_t>(v[0]) | (static_cast<uint32_t>(v[1]) << 16);
  }
  w.bar->arrive_and_wait();
}
// Shared-memory "byte addresses" of the emulation: the host pointer as an integer (gdn_mma.cuh's saddr_t).
using saddr_t = uintptr_t;
inline saddr_t smem_addr(const void* p) { return reinterpret_cast<saddr_t>(p); }
inline const void* emu_ptr(saddr_t a) { return reinterpret_cast<const void*>(a); }

inline void ldsm_x1(uint32_t& r0, const void* row) { emu_ldsm<1, false>(&r0, row); }
inline void ldsm_x2(uint32_t& r0, uint32_t& r1, const void* row) {
  uint32_t o[2];
  emu_ldsm<2, false>(o, row);
  r0 = o[0], r1 = o[1];
}
inline void ldsm_x4(uint32_t& r0, uint32_t& r1, uint32_t& r2, uint32_t& r3, const void* row) {
  uint32_t o[4];
  emu_ldsm<4, false>(o, row);
  r0 = o[0], r1 = o[1], r2 = o[2], r3 = o[3];
}
inline void ldsm_x1_trans(uint32_t& r0, const void* row) { emu_ldsm<1, true>(&r0, row); }
inline void ldsm_x2_trans(uint32_t& r0, uint32_t& r1, const void* row) {
  uint32_t o[2];
  emu_ldsm<2, true>(o, row);
  r0 = o[0], r1 = o[1];
}
inline void ldsm_x4_trans(uint32_t& r0, uint32_t& r1, uint32_t& r2, uint32_t& r3, const void* row) {
  uint32_t o[4];
  emu_ldsm<4, true>(o, row);
  r0 = o[0], r1 = o[1], r2 = o[2], r3 = o[3];
}

inline void ldsm_x2(uint32_t& r0, uint32_t& r1, saddr_t row) { ldsm_x2(r0, r1, emu_ptr(row)); }
inline void ldsm_x4(uint32_t& r0, uint32_t& r1, uint32_t& r2, uint32_t& r3, saddr_t row) {
  ldsm_x4(r0, r1, r2, r3, emu_ptr(row));
}
inline void ldsm_x2_trans(uint32_t& r0, uint32_t& r1, saddr_t row) { ldsm_x2_trans(r0, r1, emu_ptr(row)); }
inline void ldsm_x4_trans(uint32_t& r0, uint32_t& r1, uint32_t& r2, uint32_t& r3, saddr_t row) {
  ldsm_x4_trans(r0, r1, r2, r3, emu_ptr(row));
}

// d += a · b: the warp's fragments assembled into A [16][16], B [16][8] by the PTX layouts (g = l/4, t = l%4):
// A: a.r[0] = A[g][2t..], r[1] = A[g+8][2t..], r[2] = A[g][2t+8..], r[3] = A[g+8][2t+8..];
// B: b.r[0] = B[2t..][g], r[1] = B[2t+8..][g]; C: c[0..1] = C[g][2t..], c[2..3] = C[g+8][2t..].
template <class FA, class FB, class FC>
inline void emu_mma_16816(FC& d, const FA& a, const FB& b) {
  using namespace emu_detail;
  WarpX& w = warp();
  const int l = lane();
  for (int i = 0; i < 4; ++i) w.xch[l][i] = a.r[i];
  for (int i = 0; i < 2; ++i) w.xch[l][4 + i] = b.r[i];
  w.bar->arrive_and_wait();
  float A[16][16], B[16][8];
  for (int src = 0; src < 32; ++src) {
    const int g = src / 4, t = src % 4;
    for (int i = 0; i < 4; ++i) {
      const uint32_t v = static_cast<uint32_t>(w.xch[src][i]);
      const int r = g + 8 * (i % 2), c = 2 * t + 8 * (i / 2);
      A[r][c] = lo_of(v);
      A[r][c + 1] = hi_of(v);
    }
    for (int i = 0; i < 2; ++i) {
      const uint32_t v = static_cast<uint32_t>(w.xch[src][4 + i]);
      B[2 * t + 8 * i][g] = lo_of(v);
      B[2 * t + 8 * i + 1][g] = hi_of(v);
    }
  }
  w.bar->arrive_and_wait();
  const int g = l / 4, t = l % 4;
  for (int e = 0; e < 4; ++e) {
    const int r = g + 8 * (e / 2), c = 2 * t + (e % 2);
    double acc = 0.0;
    for (int k = 0; k < 16; ++k) acc += static_cast<double>(A[r][k]) * B[k][c];
    d.r[e] = static_cast<float>(acc + d.r[e]);
  }
}

}  // namespace hlm::gdn_mma

// gdn_mma.cuh includes this file before it defines its fragment structs, so the wrapper is a template resolved
// at the call.
namespace hlm::gdn_mma {
template <class FC, class FA, class FB>
inline void mma_16816(FC& d, const FA& a, const FB& b) {
  emu_mma_16816(d, a, b);
}
}  // namespace hlm::gdn_mma
