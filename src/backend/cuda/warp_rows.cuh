// Device and launch helpers shared by the warp-per-row kernels of the row norms (src/ops/rmsnorm, l2norm,
// gated_rmsnorm): one warp per row, a block of kWarpRows warps, each lane holding its slice of the row in registers.
//   - warp_sum: a fixed 5-level xor-shuffle tree; every lane performs the same additions in the same order
//     (a + b = b + a in IEEE), so every lane holds the same bits of the row sum.
//   - Pack, chunk_start, load_slice, store_slice(_as), for_slice, slice_sum_squares: a lane's slice is P elements in P/V
//     chunks of V consecutive elements; chunk j starts at element (32·j + lane)·V. Loads convert storage (f32, bf16)
//     to fp32, stores round once (store_slice_as through a given conversion, optionally element by element). Vector accesses (V > 1) are valid only when the launcher guarantees that every pointer is
//     16-byte aligned and D % V == 0 (dispatch_warp checks the latter; the caller passes the alignment as `vec`),
//     so a chunk is wholly in the row or wholly past it; chunks past the row load as 0 and are not stored.
//   - dispatch_warp: picks V (16 / sizeof(storage) or 1) and P (the smallest of 4, 8, 16, 32 that is ≥ V and holds
//     the lane's V·ceil(D/(32V)) elements), so D ≤ 1024.
//   - store_partial_row, partial_rows_finish_kernel: the fused parameter-gradient sum of row_partials.h (the block's
//     warp accumulators added in warp order into one partial row; then S slices per column, in order, and a fixed
//     halving tree), deterministic, no atomics.
// C++17, included only by .cu files.
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "backend/cuda/cuda_common.cuh"

namespace hlm::cuda {

inline constexpr int64_t kMaxRowBlocks = 1 << 20;  // rows beyond this loop inside the grid
inline constexpr int kFinishCols = 8;  // columns per finish block: 8 floats = one 32-byte sector per partial row

// Sum over the warp by a fixed xor-shuffle tree; every lane computes the same additions in the same order
// (a + b = b + a in IEEE), so all lanes hold the same bits.
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

template <typename T, int V>
struct alignas(sizeof(T) * V) Pack {
  T e[V];
};

// A lane's slice of a row: P elements in P/V chunks of V; chunk j starts at element (32·j + lane)·V. With V > 1
// the launcher guarantees D % V == 0, so a chunk is wholly in the row or wholly past it.
template <int V>
__device__ __forceinline__ int64_t chunk_start(int lane, int j) {
  return (static_cast<int64_t>(j) * 32 + lane) * V;
}

template <int V, int P, typename T>
__device__ __forceinline__ void load_slice(float (&dst)[P], const T* row, int64_t D, int lane) {
#pragma unroll
  for (int j = 0; j < P / V; ++j) {
    const int64_t s = chunk_start<V>(lane, j);
    if (s < D) {
      const Pack<T, V> p = *reinterpret_cast<const Pack<T, V>*>(row + s);
#pragma unroll
      for (int e = 0; e < V; ++e) dst[j * V + e] = to_f32(p.e[e]);
    } else {
#pragma unroll
      for (int e = 0; e < V; ++e) dst[j * V + e] = 0.0f;
    }
  }
}

// The slice stored through `convert` (float -> T): one V-element pack per chunk, or with `packed` false the chunk's
// elements one by one (a row that is not aligned to the pack; the same bits).
template <int V, int P, typename T, typename Convert>
__device__ __forceinline__ void store_slice_as(T* row, const float (&src)[P], int64_t D, int lane, Convert convert,
                                               bool packed = true) {
#pragma unroll
  for (int j = 0; j < P / V; ++j) {
    const int64_t s = chunk_start<V>(lane, j);
    if (s < D) {
      Pack<T, V> p;
#pragma unroll
      for (int e = 0; e < V; ++e) p.e[e] = convert(src[j * V + e]);
      if (packed) {
        *reinterpret_cast<Pack<T, V>*>(row + s) = p;
      } else {
#pragma unroll
        for (int e = 0; e < V; ++e) row[s + e] = p.e[e];
      }
    }
  }
}

template <int V, int P, typename T>
__device__ __forceinline__ void store_slice(T* row, const float (&src)[P], int64_t D, int lane) {
  store_slice_as<V, P>(row, src, D, lane, [](float v) { return from_f32<T>(v); });
}

// f(i) for the slice index i of every element of the lane's chunks inside the row, in increasing i (fully unrolled,
// so i is a compile-time constant and the slice arrays stay in registers): the skeleton of the per-row sums.
template <int V, int P, typename F>
__device__ __forceinline__ void for_slice(int64_t D, int lane, F&& f) {
#pragma unroll
  for (int j = 0; j < P / V; ++j)
    if (chunk_start<V>(lane, j) < D) {
#pragma unroll
      for (int e = 0; e < V; ++e) f(j * V + e);
    }
}

// The lane's Σ v² over the chunks inside the row, in order, one accumulator, with FMA.
template <int V, int P>
__device__ __forceinline__ float slice_sum_squares(const float (&v)[P], int64_t D, int lane) {
  float ss = 0.0f;
  for_slice<V, P>(D, lane, [&](int i) { ss = fmaf(v[i], v[i], ss); });
  return ss;
}

// End of a fused backward block: the warps' accumulators `acc` (this lane's columns) go to `red`, and the block writes
// its partial row partial[blockIdx.x, :] = Σ_warps (in warp order) red[warp, :]. Called by every thread of the block
// (a barrier inside).
// The rows of row-group g (row_partials.h): kWarpRows · rows_per_warp consecutive rows from g's first, clipped to R.
// Warp k of the block then takes first + k, first + k + kWarpRows, ... below end.
struct RowGroup {
  int64_t first, end;
};
template <int kWarpRows>
__device__ __forceinline__ RowGroup row_group(int64_t g, int64_t rows_per_warp, int64_t R) {
  const int64_t first = g * kWarpRows * rows_per_warp, end = first + kWarpRows * rows_per_warp;
  return {first, end < R ? end : R};
}

template <int kWarpRows, int V, int P>
__device__ __forceinline__ void store_partial_row(float* partial, float (&red)[kWarpRows][32 * P],
                                                  const float (&acc)[P], int64_t D, int lane, int warp) {
#pragma unroll
  for (int j = 0; j < P / V; ++j) {
    const int64_t s = chunk_start<V>(lane, j);
    if (s < D) {
#pragma unroll
      for (int e = 0; e < V; ++e) red[warp][s + e] = acc[j * V + e];
    }
  }
  __syncthreads();
  for (int64_t d = threadIdx.x; d < D; d += 32 * kWarpRows) {
    float sum = red[0][d];
#pragma unroll
    for (int k = 1; k < kWarpRows; ++k) sum += red[k][d];  // warp order; a warp without rows adds an exact 0
    partial[static_cast<int64_t>(blockIdx.x) * D + d] = sum;
  }
}

// out[d] (+)= Σ_g partial[g, d]: kFinishCols columns × kSlices slices per block; slice s adds the partial rows
// s, s + S, ... in order, then a halving tree over the slices (slice s += slice s + o for s < o, o = S/2, ..., 1);
// out += the total when kAccumulate, else out = the total.
template <int kSlices, bool kAccumulate>
__global__ void __launch_bounds__(kFinishCols* kSlices) partial_rows_finish_kernel(float* out, const float* partial,
                                                                                   int64_t groups, int64_t D) {
  __shared__ float sm[kSlices][kFinishCols];
  const int c = static_cast<int>(threadIdx.x % kFinishCols), s = static_cast<int>(threadIdx.x / kFinishCols);
  const int64_t col = static_cast<int64_t>(blockIdx.x) * kFinishCols + c;
  float acc = 0.0f;
  if (col < D)
    for (int64_t g = s; g < groups; g += kSlices) acc += partial[g * D + col];
  sm[s][c] = acc;
  __syncthreads();
#pragma unroll
  for (int o = kSlices / 2; o > 0; o >>= 1) {
    if (s < o) sm[s][c] += sm[s + o][c];
    __syncthreads();
  }
  if (s == 0 && col < D) {
    if constexpr (kAccumulate)
      out[col] += sm[0][c];
    else
      out[col] = sm[0][c];
  }
}

template <int kSlices, bool kAccumulate>
void partial_rows_finish(float* out, const float* partial, int64_t groups, int64_t D, cudaStream_t stream) {
  partial_rows_finish_kernel<kSlices, kAccumulate>
      <<<static_cast<unsigned>((D + kFinishCols - 1) / kFinishCols), kFinishCols * kSlices, 0, stream>>>(
          out, partial, groups, D);
  HLM_CUDA_CHECK_LAUNCH();
}

// ---- Launch helpers

// Blocks for the block path (one row per block) and the warp path (kWarpRows rows per block).
inline unsigned row_blocks(int64_t R) { return static_cast<unsigned>(std::min<int64_t>(R, kMaxRowBlocks)); }
template <int kWarpRows>
unsigned warp_row_blocks(int64_t R) {
  return static_cast<unsigned>(std::min<int64_t>((R + kWarpRows - 1) / kWarpRows, kMaxRowBlocks));
}

inline bool aligned16(const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; }

// Calls f(std::integral_constant<int, V>, std::integral_constant<int, P>) with V the vector width (16/sizeof(T) when
// `vec` and D is a multiple of it, else 1) and P the smallest of 4, 8, 16, 32 (and ≥ V) holding the lane's
// V·ceil(D/(32V)) elements.
template <typename T, typename F>
void dispatch_warp(int64_t D, bool vec, F&& f) {
  constexpr int kVec = 16 / static_cast<int>(sizeof(T));
  auto with_v = [&](auto v) {
    constexpr int V = decltype(v)::value;
    const int64_t need = V * ((D + 32 * V - 1) / (32 * V));
    if constexpr (V <= 4) {
      if (need <= 4) return f(v, std::integral_constant<int, 4>{});
    }
    if (need <= 8) return f(v, std::integral_constant<int, 8>{});
    if (need <= 16) return f(v, std::integral_constant<int, 16>{});
    return f(v, std::integral_constant<int, 32>{});
  };
  if (vec && D % kVec == 0)
    with_v(std::integral_constant<int, kVec>{});
  else
    with_v(std::integral_constant<int, 1>{});
}

}  // namespace hlm::cuda
