// RMSNorm CUDA kernels and launchers (contract: rmsnorm.h, rmsnorm_cuda.h). Two paths, chosen by the row length D:
//   D ≤ rmsnorm_cuda_warp_max_dim() (per-head q/k norms, hidden sizes up to 1024): one warp per row, kWarpRows rows
//     per block. Each lane loads its slice of the row into registers (16-byte vectors when every pointer is 16-byte
//     aligned and D is a multiple of the vector, else single elements), sums it in order, and a 5-level xor-shuffle
//     tree gives every lane the row sum; the lane then writes only the elements it loaded.
//     forward:  out = w · (x · r), r = 1 / sqrt(mean(x²) + eps).
//     backward: one fused pass over row-groups (rmsnorm_cuda_dweight_plan: block g takes kWarpRows · rows_per_warp
//               consecutive rows, warp k the group's rows k, k + kWarpRows, ...). Per row: r, m = (Σ_d g·x) · r / D
//               with g = d_out · w; each lane adds fma(d_out · x, r, acc) for its columns from the registers (before
//               dx is written, so dx may alias d_out with no extra pass); then dx = r · (g − x · r · m). After its
//               rows the block adds its warps' accumulators in warp order through shared memory and writes one
//               partial row [groups, D] to the workspace; the finish kernel (cuda::partial_rows_finish_kernel) sums
//               each column's partial rows in a fixed order and adds the total into dweight.
//   longer rows: one block of rmsnorm_cuda_threads() threads per row, scalar loads.
//     forward:  block sum of x², then the same formula (rows up to 16 · 256 held in registers, the same bits).
//     backward: (1) one block per row stores r and m; (2) dweight by the column sum (before (3): dx may alias d_out);
//               (3) elementwise dx.
// Every read of a row happens before the reduction that precedes its writes, and each thread writes only elements it
// read, so out may alias x and dx may alias d_out on both paths. Deterministic: fixed summation order, no atomics;
// the kernels that write dx are the same whether dweight is wanted or not (a runtime branch), so dx has the same
// bits either way. Non-goals for now: vectorized loads and a fused backward for rows longer than
// rmsnorm_cuda_warp_max_dim(). The warp path's shared helpers (slices, warp sum, partial rows, V/P dispatch):
// backend/cuda/warp_rows.cuh.
#include <cstdint>
#include <type_traits>

#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/dependent_launch.cuh"
#include "backend/cuda/warp_rows.cuh"
#include "core/env_switch.h"
#include "core/error.h"
#include "ops/cast/bf16_round.cuh"
#include "ops/cast/bf16_store_slice.cuh"
#include "ops/cast/cast_cuda.h"
#include "ops/residual/residual_add.cuh"
#include "ops/residual/residual_cuda.h"
#include "ops/rmsnorm/rmsnorm_cuda.h"

namespace hlm {

namespace {

using cuda::aligned16;
using cuda::block_sum;
using cuda::for_slice;
using cuda::dispatch_warp;
using cuda::from_f32;
using cuda::load_slice;
using cuda::row_blocks;
using cuda::store_slice;
using cuda::to_f32;
using cuda::warp_sum;
constexpr int kThreads = rmsnorm_cuda_threads();
constexpr int64_t kWarpMaxDim = rmsnorm_cuda_warp_max_dim();
constexpr int kWarpRows = rmsnorm_cuda_warp_rows();  // rows (warps) per block on the warp path
constexpr int kFinishSlices = rmsnorm_cuda_dweight_finish_slices();
constexpr int kWarpThreads = 32 * kWarpRows;
static_assert(kWarpMaxDim <= 32 * 32, "warp path: at most 32 elements per lane are held in registers");
static_assert(rmsnorm_cuda_regs_max_dim() == 16 * kThreads, "block path: at most 16 elements per thread in registers");

// ---- Warp path (helpers: backend/cuda/warp_rows.cuh)

// With `delta` (T = float only): first x += scale · delta in place, product and sum rounded separately as
// residual_add_forward_cuda does, then the norm of the updated row (the fused residual + norm of a pre-norm block;
// the lane stores its own slice of x, which only it reads). With `x_out` the updated row goes there instead and x is
// only read (x_out aliases nothing but possibly x).
// With `out16` (T = float only): the output's bf16 rounding is stored too, from the same registers (the bits of
// casting `out`), for readers that only multiply it on the tensor cores.
// With `post` (T = float only, never with delta): after the norm, post += scale · out (residual_add_value's bits) from
// the same registers: a post-norm block's residual add of its normed branch (the lane's slice of post is loaded with
// x, before the sum, so its latency hides under the row's).
template <typename T, int V, int P>
__global__ void __launch_bounds__(kWarpThreads) rmsnorm_forward_warp_kernel(T* out, T* x, const T* w, int64_t R,
                                                                        int64_t D, float eps,
                                                                        const float* delta = nullptr,
                                                                        float scale = 1.0f,
                                                                        __nv_bfloat16* out16 = nullptr,
                                                                        float* post = nullptr,
                                                                        T* x_out = nullptr) {
  cuda::dependent_launch_trigger();  // a programmatic dependent (the next GEMV) may start now
  cuda::dependent_launch_wait();     // launched as a dependent itself: the producer of x / delta has finished
  const int lane = static_cast<int>(threadIdx.x % 32);
  T* const xs = x_out != nullptr ? x_out : x;  // where the updated residual row goes (with delta)
  float wv[P];
  load_slice<V, P>(wv, w, D, lane);
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * kWarpRows + threadIdx.x / 32; r < R;
       r += static_cast<int64_t>(gridDim.x) * kWarpRows) {
    float xv[P];
    load_slice<V, P>(xv, x + r * D, D, lane);
    if constexpr (std::is_same_v<T, float>) {
      if (delta != nullptr) {
        float dv[P];
        load_slice<V, P>(dv, delta + r * D, D, lane);
#pragma unroll
        for (int i = 0; i < P; ++i) xv[i] = cuda::residual_add_value(xv[i], scale, dv[i]);
        store_slice<V, P>(xs + r * D, xv, D, lane);
      }
    }
    float pv[P];
    if constexpr (std::is_same_v<T, float>) {
      if (post != nullptr) load_slice<V, P>(pv, post + r * D, D, lane);
    }
    float ss = cuda::slice_sum_squares<V, P>(xv, D, lane);
    ss = warp_sum(ss);  // every read of this lane's elements happened above: out may alias x
    const float inv = 1.0f / sqrtf(ss / static_cast<float>(D) + eps);
    float ov[P];
#pragma unroll
    for (int i = 0; i < P; ++i) ov[i] = wv[i] * (xv[i] * inv);
    store_slice<V, P>(out + r * D, ov, D, lane);
    if constexpr (std::is_same_v<T, float>) {
      if (out16 != nullptr) cuda::store_slice_bf16<V, P>(out16 + r * D, ov, D, lane);  // the cast's bits
      if (post != nullptr) {
#pragma unroll
        for (int i = 0; i < P; ++i) pv[i] = cuda::residual_add_value(pv[i], scale, ov[i]);
        store_slice<V, P>(post + r * D, pv, D, lane);
      }
    }
  }
}

// Backward over the row-group blockIdx.x (rows [g·kWarpRows·rows_per_warp, (g + 1)·kWarpRows·rows_per_warp) ∩ [0,
// R)): writes dx = r·(g − x·r·m) when dx != nullptr, and, when dw_partial != nullptr, the group's dweight partial
// row dw_partial[g, :] = Σ_warps (in warp order) Σ_rows of the warp (in row order) d_out·x·r.
// With `dx16` (T = float only, dx != nullptr): the stored dx's bf16 rounding too, from the same registers (the bits of
// casting dx after the kernel).
template <typename T, int V, int P>
__global__ void __launch_bounds__(kWarpThreads) rmsnorm_backward_warp_kernel(T* dx, float* dw_partial,
                                                                         const T* d_out, const T* x, const T* w,
                                                                         int64_t R, int64_t D,
                                                                         int64_t rows_per_warp, float eps,
                                                                         bool accumulate_dx,
                                                                         __nv_bfloat16* dx16 = nullptr) {
  __shared__ float red[kWarpRows][32 * P];  // the warps' dweight accumulators, by column
  const int lane = static_cast<int>(threadIdx.x % 32), warp = static_cast<int>(threadIdx.x / 32);
  float wv[P], acc[P];
  load_slice<V, P>(wv, w, D, lane);
#pragma unroll
  for (int i = 0; i < P; ++i) acc[i] = 0.0f;
  const cuda::RowGroup rows = cuda::row_group<kWarpRows>(blockIdx.x, rows_per_warp, R);
  for (int64_t r = rows.first + warp; r < rows.end; r += kWarpRows) {
    float xv[P], gv[P];  // gv: d_out as loaded (g = d_out·w is formed where it is used)
    load_slice<V, P>(xv, x + r * D, D, lane);
    load_slice<V, P>(gv, d_out + r * D, D, lane);
    float ss = 0.0f, gx = 0.0f;
    for_slice<V, P>(D, lane, [&](int i) {
      ss = fmaf(xv[i], xv[i], ss);
      gx = fmaf(gv[i] * wv[i], xv[i], gx);  // g = d_out · w
    });
    ss = warp_sum(ss);  // every read of this lane's elements happened above: dx may alias d_out
    gx = warp_sum(gx);
    const float inv = 1.0f / sqrtf(ss / static_cast<float>(D) + eps);
    if (dw_partial != nullptr) {
#pragma unroll
      for (int i = 0; i < P; ++i) acc[i] = fmaf(gv[i] * xv[i], inv, acc[i]);  // from registers, before dx is written
    }
    if (dx == nullptr) continue;
    const float mean_gn = gx * inv / static_cast<float>(D);
    float dv[P];
#pragma unroll
    for (int i = 0; i < P; ++i) dv[i] = inv * (gv[i] * wv[i] - xv[i] * inv * mean_gn);
    if (accumulate_dx) {  // dx += the value above: residual_add_value(old, 1, dv), its exact 1 · dv left out
      float old[P];
      load_slice<V, P>(old, dx + r * D, D, lane);
#pragma unroll
      for (int i = 0; i < P; ++i) dv[i] = __fadd_rn(old[i], dv[i]);
    }
    store_slice<V, P>(dx + r * D, dv, D, lane);
    if constexpr (std::is_same_v<T, float>) {
      if (dx16 != nullptr) cuda::store_slice_bf16<V, P>(dx16 + r * D, dv, D, lane);  // the cast's bits
    }
  }
  if (dw_partial == nullptr) return;  // the same for every thread of the grid
  cuda::store_partial_row<kWarpRows, V>(dw_partial, red, acc, D, lane, warp);
}

// ---- Block path (rows longer than kWarpMaxDim)

// Two block sums in one pass (one pair of barriers instead of two): each added in block_sum<kThreads>'s order (the
// same xor-shuffle tree, then the warp sums in warp order from zero), so each has block_sum's bits. smem holds
// 2 · kThreads/32 floats; a is returned in *a, b in *b.
__device__ void block_sum2(float* a, float* b, float* smem) {
  float u = *a, v = *b;
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    u += __shfl_xor_sync(0xffffffffu, u, offset);
    v += __shfl_xor_sync(0xffffffffu, v, offset);
  }
  if (threadIdx.x % 32 == 0) {
    smem[threadIdx.x / 32] = u;
    smem[kThreads / 32 + threadIdx.x / 32] = v;
  }
  __syncthreads();
  float su = 0.0f, sv = 0.0f;
#pragma unroll
  for (int k = 0; k < kThreads / 32; ++k) {
    su += smem[k];
    sv += smem[kThreads / 32 + k];
  }
  __syncthreads();  // smem may be reused by the next row
  *a = su;
  *b = sv;
}

template <typename T>
__global__ void __launch_bounds__(kThreads) rmsnorm_forward_kernel(T* out, const T* x, const T* w, int64_t R, int64_t D,
                                                                   float eps) {
  cuda::dependent_launch_trigger();  // a programmatic dependent (the next GEMV) may start now
  __shared__ float smem[kThreads / 32];
  for (int64_t r = blockIdx.x; r < R; r += gridDim.x) {
    const T* xr = x + r * D;
    float ss = 0.0f;
    for (int64_t d = threadIdx.x; d < D; d += kThreads) {
      const float v = to_f32(xr[d]);
      ss = fmaf(v, v, ss);
    }
    ss = block_sum<kThreads>(ss, smem);  // every read of the row happens before this barrier: out may alias x
    const float inv = 1.0f / sqrtf(ss / static_cast<float>(D) + eps);
    T* o = out + r * D;
    for (int64_t d = threadIdx.x; d < D; d += kThreads) o[d] = from_f32<T>(to_f32(w[d]) * (to_f32(xr[d]) * inv));
  }
}

// The same kernel for rows of at most E · kThreads elements (E ≤ 16: hidden sizes up to 4096) with the row held in
// registers: every load of the row is issued before the first sum (the loop above waits on each load in turn, ~5.7 µs
// for one row of 2560 on the H200, session 11's batch-1 decode trace). Thread t still sums the elements t, t + kThreads,
// ... in order and block_sum adds the same partials, so the bits equal rmsnorm_forward_kernel's.
// With `delta` (T = float only): first x += scale · delta in place, product and sum rounded separately as
// residual_add_forward_cuda does, then the norm of the updated row (the fused residual + norm of a pre-norm block);
// with `x_out` the updated row goes there instead (as the warp kernel).
// With `out16` (T = float only): the output's bf16 rounding is stored too (as the warp kernel).
// With `post` (T = float only, never with delta): post += scale · out after the norm (as the warp kernel).
template <typename T, int E>
__global__ void __launch_bounds__(kThreads) rmsnorm_forward_regs_kernel(T* out, T* x, const T* w, int64_t R,
                                                                        int64_t D, float eps,
                                                                        const float* delta = nullptr,
                                                                        float scale = 1.0f,
                                                                        __nv_bfloat16* out16 = nullptr,
                                                                        float* post = nullptr,
                                                                        T* x_out = nullptr) {
  cuda::dependent_launch_trigger();  // a programmatic dependent (the next GEMV) may start now
  cuda::dependent_launch_wait();     // launched as a dependent itself: the producer of x / delta has finished
  __shared__ float smem[kThreads / 32];
  for (int64_t r = blockIdx.x; r < R; r += gridDim.x) {
    const T* xr = x + r * D;
    T* const xs = (x_out != nullptr ? x_out : x) + r * D;  // where the updated residual row goes (with delta)
    float v[E], wv[E];
#pragma unroll
    for (int e = 0; e < E; ++e) {
      const int64_t d = threadIdx.x + static_cast<int64_t>(e) * kThreads;
      v[e] = d < D ? to_f32(xr[d]) : 0.0f;
      wv[e] = d < D ? to_f32(w[d]) : 0.0f;
    }
    if (delta != nullptr) {
      // Every load of delta first, then the adds and the stores of x: interleaved, each load waited behind the
      // previous store to x (x and delta are not restrict), one memory latency per element; the 4B step's fused
      // residual + norm took 157 µs per [8192, 2560] call that way against 52 µs without delta (session 36 trace).
      float dv[E];
#pragma unroll
      for (int e = 0; e < E; ++e) {
        const int64_t d = threadIdx.x + static_cast<int64_t>(e) * kThreads;
        dv[e] = d < D ? delta[r * D + d] : 0.0f;
      }
#pragma unroll
      for (int e = 0; e < E; ++e) {
        const int64_t d = threadIdx.x + static_cast<int64_t>(e) * kThreads;
        if (d < D) {
          v[e] = cuda::residual_add_value(v[e], scale, dv[e]);
          xs[d] = from_f32<T>(v[e]);
        }
      }
    }
    float pv[E];  // post's elements, loaded before the sum (only with post)
    if constexpr (std::is_same_v<T, float>) {
      if (post != nullptr) {
#pragma unroll
        for (int e = 0; e < E; ++e) {
          const int64_t d = threadIdx.x + static_cast<int64_t>(e) * kThreads;
          pv[e] = d < D ? post[r * D + d] : 0.0f;
        }
      }
    }
    float ss = 0.0f;
#pragma unroll
    for (int e = 0; e < E; ++e) {
      if (threadIdx.x + static_cast<int64_t>(e) * kThreads < D) ss = fmaf(v[e], v[e], ss);
    }
    ss = block_sum<kThreads>(ss, smem);  // every read of the row happens before this barrier: out may alias x
    const float inv = 1.0f / sqrtf(ss / static_cast<float>(D) + eps);
    T* o = out + r * D;
#pragma unroll
    for (int e = 0; e < E; ++e) {
      const int64_t d = threadIdx.x + static_cast<int64_t>(e) * kThreads;
      if (d < D) {
        const float y = wv[e] * (v[e] * inv);
        o[d] = from_f32<T>(y);
        if constexpr (std::is_same_v<T, float>) {
          if (out16 != nullptr) reinterpret_cast<uint16_t*>(out16)[r * D + d] = cuda::f32_to_bf16_bits(y);
          if (post != nullptr) post[r * D + d] = cuda::residual_add_value(pv[e], scale, y);
        }
      }
    }
  }
}

// Backward of the block path for rows of at most E · kThreads elements, fused as the warp kernel is (rmsnorm_cuda.h,
// W = 1): block g takes rows [g·rows_per_group, (g + 1)·rows_per_group) ∩ [0, R) in order, one at a time with x,
// d_out (and w) held in registers, writes dx = r·(g − x·r·m) when dx != nullptr and adds fma(d_out·x, r, acc) into
// each thread's columns t, t + kThreads, ...; when dw_partial != nullptr it stores its partial row
// dw_partial[g, :]. Σx² and Σ g·x are the sums of rmsnorm_row_stats_kernel (thread t over its elements in order,
// then block_sum's order, both in one pass of the block: block_sum2), so r, m and dx have the bits of the former
// row-stats + dx kernels. x and d_out are read once (the three former passes read them three times).
// With `dx16` (T = float only, dx != nullptr): the stored dx's bf16 rounding too (the bits of casting dx after it).
template <typename T, int E>
__global__ void __launch_bounds__(kThreads) rmsnorm_backward_regs_kernel(T* dx, float* dw_partial, const T* d_out,
                                                                         const T* x, const T* w, int64_t R,
                                                                         int64_t D, int64_t rows_per_group,
                                                                         float eps, bool accumulate_dx,
                                                                         __nv_bfloat16* dx16 = nullptr) {
  __shared__ float smem[2 * (kThreads / 32)];
  float wv[E], acc[E];
#pragma unroll
  for (int e = 0; e < E; ++e) {
    const int64_t d = threadIdx.x + static_cast<int64_t>(e) * kThreads;
    wv[e] = d < D ? to_f32(w[d]) : 0.0f;
    acc[e] = 0.0f;
  }
  const int64_t first = static_cast<int64_t>(blockIdx.x) * rows_per_group;
  const int64_t end = first + rows_per_group < R ? first + rows_per_group : R;
  for (int64_t r = first; r < end; ++r) {
    float xv[E], gv[E];  // gv: d_out as loaded (g = d_out·w is formed where it is used)
#pragma unroll
    for (int e = 0; e < E; ++e) {
      const int64_t d = threadIdx.x + static_cast<int64_t>(e) * kThreads;
      xv[e] = d < D ? to_f32(x[r * D + d]) : 0.0f;
      gv[e] = d < D ? to_f32(d_out[r * D + d]) : 0.0f;
    }
    float ss = 0.0f, gx = 0.0f;
#pragma unroll
    for (int e = 0; e < E; ++e) {
      if (threadIdx.x + static_cast<int64_t>(e) * kThreads < D) {
        ss = fmaf(xv[e], xv[e], ss);
        gx = fmaf(gv[e] * wv[e], xv[e], gx);
      }
    }
    block_sum2(&ss, &gx, smem);  // every read of the row happens before this barrier: dx may alias d_out
    const float inv = 1.0f / sqrtf(ss / static_cast<float>(D) + eps);
    if (dw_partial != nullptr) {
#pragma unroll
      for (int e = 0; e < E; ++e) acc[e] = fmaf(gv[e] * xv[e], inv, acc[e]);
    }
    if (dx == nullptr) continue;
    const float mean_gn = gx * inv / static_cast<float>(D);
#pragma unroll
    for (int e = 0; e < E; ++e) {
      const int64_t d = threadIdx.x + static_cast<int64_t>(e) * kThreads;
      if (d < D) {
        const float v = inv * (gv[e] * wv[e] - xv[e] * inv * mean_gn);
        const float stored = accumulate_dx ? __fadd_rn(to_f32(dx[r * D + d]), v) : v;  // as the dx kernel
        dx[r * D + d] = from_f32<T>(stored);
        if constexpr (std::is_same_v<T, float>) {
          if (dx16 != nullptr) reinterpret_cast<uint16_t*>(dx16)[r * D + d] = cuda::f32_to_bf16_bits(stored);
        }
      }
    }
  }
  if (dw_partial == nullptr) return;  // the same for every thread of the grid
#pragma unroll
  for (int e = 0; e < E; ++e) {
    const int64_t d = threadIdx.x + static_cast<int64_t>(e) * kThreads;
    if (d < D) dw_partial[static_cast<int64_t>(blockIdx.x) * D + d] = acc[e];
  }
}

// Per-row r and m = (Σ_d d_out·w·x) · r / D.
template <typename T>
__global__ void __launch_bounds__(kThreads) rmsnorm_row_stats_kernel(float* inv_out, float* mean_gn_out, const T* d_out,
                                                                     const T* x, const T* w, int64_t R, int64_t D,
                                                                     float eps) {
  __shared__ float smem[kThreads / 32];
  for (int64_t r = blockIdx.x; r < R; r += gridDim.x) {
    const T* xr = x + r * D;
    const T* gr = d_out + r * D;
    float ss = 0.0f, gx = 0.0f;
    for (int64_t d = threadIdx.x; d < D; d += kThreads) {
      const float v = to_f32(xr[d]);
      ss = fmaf(v, v, ss);
      gx = fmaf(to_f32(gr[d]) * to_f32(w[d]), v, gx);
    }
    ss = block_sum<kThreads>(ss, smem);
    gx = block_sum<kThreads>(gx, smem);
    if (threadIdx.x == 0) {
      const float inv = 1.0f / sqrtf(ss / static_cast<float>(D) + eps);
      inv_out[r] = inv;
      mean_gn_out[r] = gx * inv / static_cast<float>(D);
    }
  }
}

// Element i = r·D + d of dx. Index I: int64_t, or uint32_t when R·D ≤ INT32_MAX (i + the grid's stride then stays
// below 2³²): the row r = i / D as a 32-bit division instead of a 64-bit one, which on the GPU is a long
// instruction sequence per element (the 4B step's [8192, 2560] rows: 113 µs per call, ~3 TB/s, session 36 trace).
// The same elements and arithmetic either way (the same bits).
template <typename T, typename I>
__global__ void rmsnorm_dx_kernel(T* dx, const T* d_out, const T* x, const T* w, const float* inv,
                                  const float* mean_gn, int64_t R, int64_t D, bool accumulate_dx) {
  const I n = static_cast<I>(R * D), dim = static_cast<I>(D);
  for (I i = static_cast<I>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += static_cast<I>(gridDim.x) * blockDim.x) {
    const I r = i / dim, d = i - r * dim;
    const float ir = inv[r];
    const float g = to_f32(d_out[i]) * to_f32(w[d]);
    const float v = ir * (g - to_f32(x[i]) * ir * mean_gn[r]);
    dx[i] = from_f32<T>(accumulate_dx ? __fadd_rn(to_f32(dx[i]), v) : v);  // as the warp path
  }
}

template <typename T>
struct DweightTerm {
  const T* d_out;
  const T* x;
  const float* inv;
  int64_t D;
  __device__ float operator()(int64_t r, int64_t d) const {
    return to_f32(d_out[r * D + d]) * to_f32(x[r * D + d]) * inv[r];
  }
};

// ---- Launch helpers

void check_params(const RmsnormCudaParams& p) {
  HLM_CHECK(p.rows >= 0 && p.dim >= 0, "rmsnorm_cuda: negative shape [", p.rows, ", ", p.dim, "]");
}

unsigned warp_row_blocks(int64_t R) { return cuda::warp_row_blocks<kWarpRows>(R); }

// out = rmsnorm(x) · w, after x += scale · delta in place when delta is given (T = float only; the kernels that
// hold the row fuse the add, rows longer than 16 · kThreads take residual_add_forward_cuda first). x is written only
// when delta is given.
// With x_out (only with delta; may equal x): x_out = x + scale · delta and x is only read, the same bits as in place.
template <typename T>
void forward_impl(T* out, T* x, const T* w, const RmsnormCudaParams& p, cudaStream_t stream,
                  const float* delta = nullptr, float scale = 1.0f, __nv_bfloat16* out16 = nullptr,
                  float* post = nullptr, T* x_out = nullptr) {
  check_params(p);
  if (p.rows == 0 || p.dim == 0) return;
  if (x_out == x) x_out = nullptr;
  HLM_CHECK(x_out == nullptr || delta != nullptr, "rmsnorm_cuda: a residual destination without delta");
  if (x_out != nullptr && p.dim > 16 * kThreads) {
    // Rows too long to hold (the add is its own launch): copy x into x_out and go in place there (the same bits).
    HLM_CUDA_CHECK(cudaMemcpyAsync(x_out, x, static_cast<size_t>(p.rows * p.dim) * sizeof(T),
                                   cudaMemcpyDeviceToDevice, stream));
    forward_impl(out, x_out, w, p, stream, delta, scale, out16, post);
    return;
  }
  if constexpr (!std::is_same_v<T, float>)
    HLM_CHECK(out16 == nullptr && post == nullptr, "rmsnorm_cuda: out16 or post with bf16 rows");
  HLM_CHECK(delta == nullptr || post == nullptr, "rmsnorm_cuda: a residual before and after the norm");
  // The warp and register kernels are launched as programmatic dependents (dependent_launch.cuh): the launch overlaps
  // the producer's tail, the kernels wait for it before any read.
  const bool pdl = cuda::dependent_launch_enabled();
  if (p.dim <= kWarpMaxDim) {
    // out16 takes no part in the choice: the vector and scalar slices sum the row in different orders, so choosing
    // by out16 too would give out other bits than the plain launcher's; store_slice_bf16 stores a row that is not
    // 8-byte aligned element by element instead.
    const bool vec = aligned16(out) && aligned16(x) && aligned16(w) && (delta == nullptr || aligned16(delta));
    if constexpr (std::is_same_v<T, float>) {
      if (post != nullptr && vec && !aligned16(post)) {  // post takes no part in the choice either: two launches
        forward_impl(out, x, w, p, stream, nullptr, 1.0f, out16);
        residual_add_forward_cuda(post, out, scale, p.rows * p.dim, stream);
        return;
      }
    }
    dispatch_warp<T>(p.dim, vec, [&](auto v, auto pl) {
      // The slices' order (vector or scalar) decides out's bits and is chosen as for the in-place call; vector slices
      // store x_out as 16-byte rows, so x_out must then be aligned too (a copy would not help: the norm of a
      // misaligned row sums in the scalar order).
      HLM_CHECK(x_out == nullptr || decltype(v)::value == 1 || aligned16(x_out),
                "rmsnorm_residual_into_forward_rounded_cuda: rows of ", p.dim,
                " on the warp path's 16-byte slices (x, out, weight and delta aligned) need a 16-byte aligned x_out");
      HLM_CUDA_CHECK(cuda::launch_maybe_dependent(
          pdl, rmsnorm_forward_warp_kernel<T, decltype(v)::value, decltype(pl)::value>, dim3(warp_row_blocks(p.rows)),
          dim3(kWarpThreads), 0, stream, out, x, w, p.rows, p.dim, p.eps, delta, scale, out16, post, x_out));
    });
  } else if (p.dim <= 8 * kThreads) {
    HLM_CUDA_CHECK(cuda::launch_maybe_dependent(pdl, rmsnorm_forward_regs_kernel<T, 8>, dim3(row_blocks(p.rows)),
                                                dim3(kThreads), 0, stream, out, x, w, p.rows, p.dim, p.eps, delta,
                                                scale, out16, post, x_out));
  } else if (p.dim <= 16 * kThreads) {
    HLM_CUDA_CHECK(cuda::launch_maybe_dependent(pdl, rmsnorm_forward_regs_kernel<T, 16>, dim3(row_blocks(p.rows)),
                                                dim3(kThreads), 0, stream, out, x, w, p.rows, p.dim, p.eps, delta,
                                                scale, out16, post, x_out));
  } else {
    if constexpr (std::is_same_v<T, float>) {
      if (delta != nullptr) residual_add_forward_cuda(x, delta, scale, p.rows * p.dim, stream);
    }
    rmsnorm_forward_kernel<T><<<row_blocks(p.rows), kThreads, 0, stream>>>(out, x, w, p.rows, p.dim, p.eps);
    if constexpr (std::is_same_v<T, float>) {
      if (out16 != nullptr) {  // rows this long: the cast as its own launch (the same bits)
        HLM_CUDA_CHECK_LAUNCH();
        cast_f32_to_bf16_cuda(out16, out, p.rows * p.dim, stream);
      }
      if (post != nullptr) {  // rows this long: the residual add as its own launch (the same bits)
        HLM_CUDA_CHECK_LAUNCH();
        residual_add_forward_cuda(post, out, scale, p.rows * p.dim, stream);
      }
    }
  }
  HLM_CUDA_CHECK_LAUNCH();
}

OverridableSwitch g_fused_backward{"HLM_RMSNORM_FUSED_BACKWARD", true};  // on since session 39 (rmsnorm_cuda.h)

// Whether rows of this length take the block path's fused backward (rmsnorm_backward_regs_kernel).
bool fused_block_backward(int64_t dim) {
  return dim > kWarpMaxDim && dim <= rmsnorm_cuda_regs_max_dim() && g_fused_backward.on();
}

struct Workspace {
  float* inv;      // block path: r [R]
  float* mean_gn;  // block path: m [R]
  float* partial;  // warp path: dweight partial rows [groups, D]; block path: the column sum's partials
  RmsnormCudaDweightPlan warp_plan;
  ColumnSumPlan plan;
  size_t bytes;
};

// Sizes the workspace and, when `base` is given, places the pieces in it. Fused paths (warp, and block up to
// rmsnorm_cuda_regs_max_dim()): the dweight partial rows. Longer rows: r [R], m [R], the column sum's partials.
Workspace carve(void* base, const RmsnormCudaParams& p) {
  Workspace ws{};
  if (p.dim <= kWarpMaxDim || fused_block_backward(p.dim)) {  // the fused paths: the dweight partial rows only
    ws.warp_plan = rmsnorm_cuda_dweight_plan(p.rows, p.dim);
    ws.bytes = static_cast<size_t>(ws.warp_plan.groups * p.dim) * sizeof(float);
    ws.partial = static_cast<float*>(base);
    return ws;
  }
  const size_t row_bytes = cuda::align_up_256(static_cast<size_t>(p.rows) * sizeof(float));
  ws.plan = column_sum_plan(p.rows, p.dim, ~size_t{0} / 2);
  ws.bytes = 2 * row_bytes + ws.plan.scratch_bytes;
  if (base == nullptr) return ws;
  auto* b = static_cast<char*>(base);
  ws.inv = reinterpret_cast<float*>(b);
  ws.mean_gn = reinterpret_cast<float*>(b + row_bytes);
  ws.partial = reinterpret_cast<float*>(b + 2 * row_bytes);
  return ws;
}

template <typename T>
void backward_warp(T* dx, float* dweight, const T* d_out, const T* x, const T* w, const RmsnormCudaParams& p,
                   const Workspace& ws, bool accumulate_dx, __nv_bfloat16* dx16, cudaStream_t stream) {
  if (dx == nullptr && dweight == nullptr) return;
  const bool vec = aligned16(d_out) && aligned16(x) && aligned16(w) && (dx == nullptr || aligned16(dx));
  float* partial = dweight != nullptr ? ws.partial : nullptr;
  dispatch_warp<T>(p.dim, vec, [&](auto v, auto pl) {
    rmsnorm_backward_warp_kernel<T, decltype(v)::value, decltype(pl)::value>
        <<<static_cast<unsigned>(ws.warp_plan.groups), kWarpThreads, 0, stream>>>(
            dx, partial, d_out, x, w, p.rows, p.dim, ws.warp_plan.rows_per_warp, p.eps, accumulate_dx, dx16);
  });
  HLM_CUDA_CHECK_LAUNCH();
  if (dweight == nullptr) return;
  cuda::partial_rows_finish<kFinishSlices, /*kAccumulate=*/true>(dweight, ws.partial, ws.warp_plan.groups, p.dim,
                                                                 stream);
}

template <typename T>
void backward_regs(T* dx, float* dweight, const T* d_out, const T* x, const T* w, const RmsnormCudaParams& p,
                   const Workspace& ws, bool accumulate_dx, __nv_bfloat16* dx16, cudaStream_t stream) {
  if (dx == nullptr && dweight == nullptr) return;
  float* partial = dweight != nullptr ? ws.partial : nullptr;
  const unsigned blocks = static_cast<unsigned>(ws.warp_plan.groups);
  const int64_t rows_per_group = ws.warp_plan.rows_per_warp;
  if (p.dim <= 8 * kThreads)  // fewer registers for hidden sizes up to 2048
    rmsnorm_backward_regs_kernel<T, 8><<<blocks, kThreads, 0, stream>>>(dx, partial, d_out, x, w, p.rows, p.dim,
                                                                        rows_per_group, p.eps, accumulate_dx, dx16);
  else if (p.dim <= 12 * kThreads)
    rmsnorm_backward_regs_kernel<T, 12><<<blocks, kThreads, 0, stream>>>(dx, partial, d_out, x, w, p.rows, p.dim,
                                                                         rows_per_group, p.eps, accumulate_dx, dx16);
  else
    rmsnorm_backward_regs_kernel<T, 16><<<blocks, kThreads, 0, stream>>>(dx, partial, d_out, x, w, p.rows, p.dim,
                                                                         rows_per_group, p.eps, accumulate_dx, dx16);
  HLM_CUDA_CHECK_LAUNCH();
  if (dweight == nullptr) return;
  cuda::partial_rows_finish<kFinishSlices, /*kAccumulate=*/true>(dweight, ws.partial, ws.warp_plan.groups, p.dim,
                                                                 stream);
}

// dx16 (T = float, dx != nullptr): also dx's bf16 rounding, from the kernel's registers on the fused paths, else by a
// cast launch after the dx kernel (the same bits either way).
template <typename T>
void backward_impl(T* dx, float* dweight, const T* d_out, const T* x, const T* w, const RmsnormCudaParams& p,
                   void* workspace, size_t workspace_bytes, bool accumulate_dx, cudaStream_t stream,
                   __nv_bfloat16* dx16 = nullptr) {
  check_params(p);
  if (p.rows == 0 || p.dim == 0) return;
  HLM_CHECK(workspace != nullptr, "rmsnorm_backward_cuda: no workspace");
  const Workspace ws = carve(workspace, p);
  HLM_CHECK(workspace_bytes >= ws.bytes, "rmsnorm_backward_cuda: workspace of ",
            workspace_bytes, " bytes, needs ", ws.bytes);
  if (p.dim <= kWarpMaxDim) {
    backward_warp(dx, dweight, d_out, x, w, p, ws, accumulate_dx, dx16, stream);
    return;
  }
  if (fused_block_backward(p.dim)) {
    backward_regs(dx, dweight, d_out, x, w, p, ws, accumulate_dx, dx16, stream);
    return;
  }
  rmsnorm_row_stats_kernel<T><<<row_blocks(p.rows), kThreads, 0, stream>>>(ws.inv, ws.mean_gn, d_out, x, w, p.rows,
                                                                          p.dim, p.eps);
  HLM_CUDA_CHECK_LAUNCH();
  if (dweight != nullptr)
    cuda::column_sum_accumulate(dweight, DweightTerm<T>{d_out, x, ws.inv, p.dim}, p.rows, p.dim, ws.plan, ws.partial,
                                stream);
  if (dx != nullptr) {
    const unsigned blocks = cuda::grid_blocks(p.rows * p.dim);
    if (p.rows * p.dim <= INT32_MAX)
      rmsnorm_dx_kernel<T, uint32_t><<<blocks, cuda::kElementwiseThreads, 0, stream>>>(
          dx, d_out, x, w, ws.inv, ws.mean_gn, p.rows, p.dim, accumulate_dx);
    else
      rmsnorm_dx_kernel<T, int64_t><<<blocks, cuda::kElementwiseThreads, 0, stream>>>(
          dx, d_out, x, w, ws.inv, ws.mean_gn, p.rows, p.dim, accumulate_dx);
    HLM_CUDA_CHECK_LAUNCH();
    if constexpr (std::is_same_v<T, float>) {
      if (dx16 != nullptr) cast_f32_to_bf16_cuda(dx16, dx, p.rows * p.dim, stream);
    }
  }
}

}  // namespace

void rmsnorm_forward_cuda(float* out, const float* x, const float* weight, const RmsnormCudaParams& p,
                          cudaStream_t stream) {
  forward_impl(out, const_cast<float*>(x), weight, p, stream);  // x is read only (no delta)
}

void rmsnorm_forward_cuda(__nv_bfloat16* out, const __nv_bfloat16* x, const __nv_bfloat16* weight,
                          const RmsnormCudaParams& p, cudaStream_t stream) {
  forward_impl(out, const_cast<__nv_bfloat16*>(x), weight, p, stream);
}

void rmsnorm_residual_forward_cuda(float* out, float* x, const float* delta, float scale, const float* weight,
                                   const RmsnormCudaParams& p, cudaStream_t stream) {
  HLM_CHECK(out != x, "rmsnorm_residual_forward_cuda: out may not alias x (the residual stream)");
  forward_impl(out, x, weight, p, stream, delta, scale);
}

void rmsnorm_forward_rounded_cuda(float* out, __nv_bfloat16* out16, const float* x, const float* weight,
                                  const RmsnormCudaParams& p, cudaStream_t stream) {
  HLM_CHECK(out16 == nullptr || (static_cast<const void*>(out16) != static_cast<const void*>(x) &&
                                  static_cast<const void*>(out16) != static_cast<const void*>(out)),
            "rmsnorm_forward_rounded_cuda: out16 aliases x or out");
  forward_impl(out, const_cast<float*>(x), weight, p, stream, nullptr, 1.0f, out16);
}

void rmsnorm_residual_forward_rounded_cuda(float* out, __nv_bfloat16* out16, float* x, const float* delta,
                                           float scale, const float* weight, const RmsnormCudaParams& p,
                                           cudaStream_t stream) {
  HLM_CHECK(out != x, "rmsnorm_residual_forward_rounded_cuda: out may not alias x (the residual stream)");
  HLM_CHECK(out16 == nullptr || (static_cast<const void*>(out16) != static_cast<const void*>(x) &&
                                  static_cast<const void*>(out16) != static_cast<const void*>(out) &&
                                  static_cast<const void*>(out16) != static_cast<const void*>(delta)),
            "rmsnorm_residual_forward_rounded_cuda: out16 aliases x, out or delta");
  forward_impl(out, x, weight, p, stream, delta, scale, out16);
}

void rmsnorm_residual_into_forward_rounded_cuda(float* out, __nv_bfloat16* out16, float* x_out, const float* x,
                                                const float* delta, float scale, const float* weight,
                                                const RmsnormCudaParams& p, cudaStream_t stream) {
  HLM_CHECK(x_out != nullptr, "rmsnorm_residual_into_forward_rounded_cuda: no residual destination");
  HLM_CHECK(out != x && out != x_out, "rmsnorm_residual_into_forward_rounded_cuda: out aliases x or x_out");
  HLM_CHECK(x_out != delta || x_out == x, "rmsnorm_residual_into_forward_rounded_cuda: x_out aliases delta");
  HLM_CHECK(out16 == nullptr || (static_cast<const void*>(out16) != static_cast<const void*>(x) &&
                                  static_cast<const void*>(out16) != static_cast<const void*>(x_out) &&
                                  static_cast<const void*>(out16) != static_cast<const void*>(out) &&
                                  static_cast<const void*>(out16) != static_cast<const void*>(delta)),
            "rmsnorm_residual_into_forward_rounded_cuda: out16 aliases x, x_out, out or delta");
  forward_impl(out, const_cast<float*>(x), weight, p, stream, delta, scale, out16, nullptr, x_out);
}

void rmsnorm_post_residual_forward_cuda(float* out, float* residual, const float* x, float scale,
                                        const float* weight, const RmsnormCudaParams& p, cudaStream_t stream) {
  HLM_CHECK(residual != out && residual != x,
            "rmsnorm_post_residual_forward_cuda: the residual stream aliases out or x");
  forward_impl(out, const_cast<float*>(x), weight, p, stream, nullptr, scale, nullptr, residual);
}

bool rmsnorm_cuda_fused_backward() { return g_fused_backward.on(); }
void rmsnorm_cuda_set_fused_backward(int on) { g_fused_backward.set(on); }

size_t rmsnorm_backward_cuda_workspace_bytes(const RmsnormCudaParams& p) {
  check_params(p);
  return carve(nullptr, p).bytes;
}

void rmsnorm_backward_cuda(float* dx, float* dweight, const float* d_out, const float* x, const float* weight,
                           const RmsnormCudaParams& p, void* workspace, size_t workspace_bytes, cudaStream_t stream,
                           bool accumulate_dx) {
  rmsnorm_backward_rounded_cuda(dx, nullptr, dweight, d_out, x, weight, p, workspace, workspace_bytes, stream,
                                accumulate_dx);
}

void rmsnorm_backward_rounded_cuda(float* dx, __nv_bfloat16* dx16, float* dweight, const float* d_out, const float* x,
                                   const float* weight, const RmsnormCudaParams& p, void* workspace,
                                   size_t workspace_bytes, cudaStream_t stream, bool accumulate_dx) {
  HLM_CHECK(!accumulate_dx || dx != d_out, "rmsnorm_backward_cuda: an accumulated dx may not alias d_out");
  HLM_CHECK(dx16 == nullptr || (dx != nullptr && static_cast<const void*>(dx16) != static_cast<const void*>(dx) &&
                                static_cast<const void*>(dx16) != static_cast<const void*>(d_out) &&
                                static_cast<const void*>(dx16) != static_cast<const void*>(x)),
            "rmsnorm_backward_rounded_cuda: dx16 needs dx and may not alias dx, d_out or x");
  backward_impl(dx, dweight, d_out, x, weight, p, workspace, workspace_bytes, accumulate_dx, stream, dx16);
}

void rmsnorm_backward_cuda(__nv_bfloat16* dx, float* dweight, const __nv_bfloat16* d_out, const __nv_bfloat16* x,
                           const __nv_bfloat16* weight, const RmsnormCudaParams& p, void* workspace,
                           size_t workspace_bytes, cudaStream_t stream) {
  backward_impl(dx, dweight, d_out, x, weight, p, workspace, workspace_bytes, false, stream);
}

}  // namespace hlm
