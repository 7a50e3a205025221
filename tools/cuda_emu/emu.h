// Host emulation of the CUDA subset that src/ops/adamw/adamw_lowmem.cu's step kernel uses, so that the kernel's own
// source (copied by adamw8_emu.sh, the asm approximations swapped for libm) runs on a machine without a GPU: one
// std::thread per CUDA thread of a block (blocks one after another), std::barrier for __syncthreads and for the warp
// reduction __reduce_max_sync, and IEEE host arithmetic for the _rn intrinsics (volatile results, and the build uses
// -ffp-contract=off, so nothing is fused). Warp collectives (__reduce_max_sync, the shuffles, __syncwarp, and the
// tensor-core primitives of emu_mma.h) go through the warp's barrier and exchange buffer: every lane of the warp must
// call them together (full masks only). Not emulated: memory ordering beyond the barriers, flush-to-zero of the
// approx functions (the kernel uses them only for a search's starting point).
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
#define __launch_bounds__(...)
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
// CUDA's integer min/max overloads (same-type arguments).
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
inline long long min(long long a, long long b) { return a < b ? a : b; }
inline long long max(long long a, long long b) { return a > b ? a : b; }
inline long min(long a, long b) { return a < b ? a : b; }
inline long max(long a, long b) { return a > b ? a : b; }
inline std::barrier<>* g_block_barrier;
inline void __syncthreads() { g_block_barrier->arrive_and_wait(); }
struct WarpX { std::unique_ptr<std::barrier<>> bar; uint32_t vals[32]; uint64_t xch[32][12]; };
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
// Shuffles: lane l reads lane src(l) (its own value when src is out of range, as on the GPU for up/down).
template <class T, class Src> T emu_shfl(T v, Src src) {
  static_assert(sizeof(T) <= 8, "shuffle of a register-sized value");
  WarpX& w = g_warps[threadIdx.x / 32];
  const int l = static_cast<int>(threadIdx.x % 32);
  std::memcpy(&w.xch[l][11], &v, sizeof(T));
  w.bar->arrive_and_wait();
  const int from = src(l);
  T r;
  std::memcpy(&r, &w.xch[from >= 0 && from < 32 ? from : l][11], sizeof(T));
  w.bar->arrive_and_wait();
  return r;
}
template <class T> T __shfl_xor_sync(unsigned, T v, int m) { return emu_shfl(v, [m](int l) { return l ^ m; }); }
template <class T> T __shfl_up_sync(unsigned, T v, unsigned d) { return emu_shfl(v, [d](int l) { return l - (int)d; }); }
template <class T> T __shfl_down_sync(unsigned, T v, unsigned d) { return emu_shfl(v, [d](int l) { return l + (int)d; }); }
template <class T> T __shfl_sync(unsigned, T v, int s) { return emu_shfl(v, [s](int) { return s & 31; }); }
inline void __syncwarp(unsigned = 0xffffffffu) { g_warps[threadIdx.x / 32].bar->arrive_and_wait(); }
enum cudaMemcpyKind { cudaMemcpyHostToDevice };
template <class T> int cudaMemcpyToSymbol(T& sym, const void* src, size_t bytes) { std::memcpy(&sym, src, bytes); return 0; }

// ---- Launch helper (the GDN emulations; adamw8_emu.cpp launches by hand): blocks run one after another, each with
// `threads` host threads (a multiple of 32), its own barriers and `smem_bytes` of zeroed dynamic shared memory, which
// the kernel reaches through emu_dyn_smem (the emulation scripts put it in place of `extern __shared__ ... smem[]`).
#include <thread>
#include <vector>
#define __align__(n) alignas(n)
inline thread_local char* emu_dyn_smem;
template <class F>
void emu_launch(Dim grid, unsigned threads, size_t smem_bytes, F&& body) {
  if (threads % 32 != 0) std::abort();
  gridDim = {grid.x, grid.y ? grid.y : 1, grid.z ? grid.z : 1};
  blockDim = {threads, 1, 1};
  std::vector<char> smem_buf(smem_bytes + 128);
  char* smem = smem_buf.data() + (128 - reinterpret_cast<uintptr_t>(smem_buf.data()) % 128) % 128;
  for (unsigned z = 0; z < gridDim.z; ++z)
    for (unsigned y = 0; y < gridDim.y; ++y)
      for (unsigned x = 0; x < gridDim.x; ++x) {
        std::memset(smem, 0, smem_bytes);
        std::barrier<> block_bar(threads);
        g_block_barrier = &block_bar;
        std::vector<WarpX> warps(threads / 32);
        for (auto& w : warps) w.bar = std::make_unique<std::barrier<>>(32);
        g_warps = warps.data();
        std::vector<std::thread> th;
        for (unsigned t = 0; t < threads; ++t)
          th.emplace_back([&, t] {
            threadIdx = {t, 0, 0};
            blockIdx = {x, y, z};
            emu_dyn_smem = smem;
            body();
          });
        for (auto& t : th) t.join();
      }
}
