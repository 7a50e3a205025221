// Host emulation of the CUDA subset that src/ops/adamw/adamw_lowmem.cu's step kernel uses, so that the kernel's own
// source (copied by adamw8_emu.sh, the asm approximations swapped for libm) runs on a machine without a GPU: one
// std::thread per CUDA thread of a block (blocks one after another), std::barrier for __syncthreads and for the warp
// reduction __reduce_max_sync, and IEEE host arithmetic for the _rn intrinsics (volatile results, and the build uses
// -ffp-contract=off, so nothing is fused). Not emulated: shuffles (abort), memory ordering beyond the barriers,
// flush-to-zero of the approx functions (the kernel uses them only for a search's starting point).
#pragma once
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <cstdio>
#define __device__
#define __global__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(x)
#define __shared__ static
struct uint2 { uint32_t x, y; };
struct alignas(16) uint4 { uint32_t x, y, z, w; };
struct alignas(16) float4 { float x, y, z, w; };
inline uint2 make_uint2(uint32_t a, uint32_t b) { return {a, b}; }
inline uint4 make_uint4(uint32_t a, uint32_t b, uint32_t c, uint32_t d) { return {a, b, c, d}; }
inline float4 make_float4(float a, float b, float c, float d) { return {a, b, c, d}; }
struct Dim { unsigned x = 0, y = 0, z = 0; };
inline thread_local Dim threadIdx, blockIdx;
inline Dim gridDim, blockDim;
inline float __fdiv_rn(float a, float b) { volatile float r = a / b; return r; }
inline float __fmul_rn(float a, float b) { volatile float r = a * b; return r; }
inline float __fadd_rn(float a, float b) { volatile float r = a + b; return r; }
inline float __fsub_rn(float a, float b) { volatile float r = a - b; return r; }
inline float __fsqrt_rn(float a) { return std::sqrt(a); }
inline float __frcp_rn(float a) { volatile float r = 1.0f / a; return r; }
inline float __uint_as_float(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }
inline uint32_t __float_as_uint(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }
inline int __float2int_rn(float f) { if (std::isnan(f)) return 0; return (int)std::nearbyint(f); }
using std::isfinite;
inline std::barrier<>* g_block_barrier;
inline void __syncthreads() { g_block_barrier->arrive_and_wait(); }
struct WarpX { std::unique_ptr<std::barrier<>> bar; uint32_t vals[32]; };
inline WarpX* g_warps;
inline unsigned __reduce_max_sync(unsigned, unsigned v) {
  WarpX& w = g_warps[threadIdx.x / 32];
  w.vals[threadIdx.x % 32] = v;
  w.bar->arrive_and_wait();
  unsigned m = 0;
  for (int l = 0; l < 32; ++l) m = m > w.vals[l] ? m : w.vals[l];
  w.bar->arrive_and_wait();
  return m;
}
inline float __shfl_xor_sync(unsigned, float, int) { std::abort(); }
enum cudaMemcpyKind { cudaMemcpyHostToDevice };
template <class T> int cudaMemcpyToSymbol(T& sym, const void* src, size_t bytes) { std::memcpy(&sym, src, bytes); return 0; }
