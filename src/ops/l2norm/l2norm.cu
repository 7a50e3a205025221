// L2 normalisation CUDA kernels and launchers (contract: l2norm.h, l2norm_cuda.h). Two paths, chosen by the row
// length D:
//   D ≤ l2norm_cuda_warp_max_dim() (the GDN key/query heads, dk = 64..256): one warp per row, kWarpRows rows per
//     block. Each lane loads its slice of the row into registers (float4 when every pointer is 16-byte aligned and
//     D % 4 == 0, else single floats), sums it in order, and a 5-level xor-shuffle tree gives every lane the row sums.
//   longer rows: one block of l2norm_cuda_threads() threads per row, scalar loads, block sums.
// Both then apply the elementwise formula. Every read of a row happens before the reduction that precedes its writes
// and each thread writes only the elements it read, so y may alias x and dx may alias dy. Deterministic: fixed
// summation order, no atomics.
#include <type_traits>

#include "backend/cuda/cuda_common.cuh"
#include "core/error.h"
#include "ops/l2norm/l2norm_cuda.h"

namespace hlm {

namespace {

constexpr int kThreads = l2norm_cuda_threads();
constexpr int64_t kWarpMaxDim = l2norm_cuda_warp_max_dim();
constexpr int kWarpRows = 8;  // rows (warps) per block on the warp path
constexpr int kWarpThreads = 32 * kWarpRows;
constexpr int64_t kMaxRowBlocks = 1 << 20;  // rows beyond this loop inside the grid
static_assert(kWarpMaxDim <= 32 * 32, "warp path: at most 32 elements per lane are held in registers");

// ---- Warp path helpers

// Sum over the warp by a fixed xor-shuffle tree; every lane computes the same additions in the same order
// (a + b = b + a in IEEE), so all lanes hold the same bits.
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

template <int V>
struct alignas(4 * V) Pack {
  float e[V];
};

// A lane's slice of a row: P floats in P/V chunks of V; chunk j starts at element (32·j + lane)·V. With V > 1 the
// launcher guarantees D % V == 0, so a chunk is wholly in the row or wholly past it.
template <int V>
__device__ __forceinline__ int64_t chunk_start(int lane, int j) {
  return (static_cast<int64_t>(j) * 32 + lane) * V;
}

template <int V, int P>
__device__ __forceinline__ void load_slice(float (&dst)[P], const float* row, int64_t D, int lane) {
#pragma unroll
  for (int j = 0; j < P / V; ++j) {
    const int64_t s = chunk_start<V>(lane, j);
    if (s < D) {
      const Pack<V> p = *reinterpret_cast<const Pack<V>*>(row + s);
#pragma unroll
      for (int e = 0; e < V; ++e) dst[j * V + e] = p.e[e];
    } else {
#pragma unroll
      for (int e = 0; e < V; ++e) dst[j * V + e] = 0.0f;
    }
  }
}

template <int V, int P>
__device__ __forceinline__ void store_slice(float* row, const float (&src)[P], int64_t D, int lane) {
#pragma unroll
  for (int j = 0; j < P / V; ++j) {
    const int64_t s = chunk_start<V>(lane, j);
    if (s < D) {
      Pack<V> p;
#pragma unroll
      for (int e = 0; e < V; ++e) p.e[e] = src[j * V + e];
      *reinterpret_cast<Pack<V>*>(row + s) = p;
    }
  }
}

template <int V, int P>
__global__ void __launch_bounds__(kWarpThreads) l2norm_forward_warp_kernel(float* y, const float* x, int64_t R,
                                                                       int64_t D, float eps) {
  const int lane = static_cast<int>(threadIdx.x % 32);
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * kWarpRows + threadIdx.x / 32; r < R;
       r += static_cast<int64_t>(gridDim.x) * kWarpRows) {
    float xv[P];
    load_slice<V, P>(xv, x + r * D, D, lane);
    float ss = 0.0f;
#pragma unroll
    for (int j = 0; j < P / V; ++j)
      if (chunk_start<V>(lane, j) < D) {
#pragma unroll
        for (int e = 0; e < V; ++e) ss = fmaf(xv[j * V + e], xv[j * V + e], ss);
      }
    ss = warp_sum(ss);  // every read of this lane's elements happened above: y may alias x
    const float inv = 1.0f / sqrtf(ss + eps);
#pragma unroll
    for (int i = 0; i < P; ++i) xv[i] = xv[i] * inv;
    store_slice<V, P>(y + r * D, xv, D, lane);
  }
}

// dx = r·(dy − (x·r)·(r·Σ x·dy)).
template <int V, int P>
__global__ void __launch_bounds__(kWarpThreads) l2norm_backward_warp_kernel(float* dx, const float* dy, const float* x,
                                                                        int64_t R, int64_t D, float eps) {
  const int lane = static_cast<int>(threadIdx.x % 32);
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * kWarpRows + threadIdx.x / 32; r < R;
       r += static_cast<int64_t>(gridDim.x) * kWarpRows) {
    float xv[P], gv[P];
    load_slice<V, P>(xv, x + r * D, D, lane);
    load_slice<V, P>(gv, dy + r * D, D, lane);
    float ss = 0.0f, xg = 0.0f;
#pragma unroll
    for (int j = 0; j < P / V; ++j)
      if (chunk_start<V>(lane, j) < D) {
#pragma unroll
        for (int e = 0; e < V; ++e) {
          const int i = j * V + e;
          ss = fmaf(xv[i], xv[i], ss);
          xg = fmaf(xv[i], gv[i], xg);
        }
      }
    ss = warp_sum(ss);  // every read of this lane's elements happened above: dx may alias dy
    xg = warp_sum(xg);
    const float inv = 1.0f / sqrtf(ss + eps);
    const float y_dot_dy = inv * xg;
#pragma unroll
    for (int i = 0; i < P; ++i) {
      const float yd = xv[i] * inv;
      gv[i] = inv * (gv[i] - yd * y_dot_dy);
    }
    store_slice<V, P>(dx + r * D, gv, D, lane);
  }
}

// ---- Block path (rows longer than kWarpMaxDim)

__global__ void __launch_bounds__(kThreads) l2norm_forward_kernel(float* y, const float* x, int64_t R, int64_t D,
                                                                  float eps) {
  __shared__ float smem[kThreads / 32];
  for (int64_t r = blockIdx.x; r < R; r += gridDim.x) {
    const float* xr = x + r * D;
    float ss = 0.0f;
    for (int64_t d = threadIdx.x; d < D; d += kThreads) ss = fmaf(xr[d], xr[d], ss);
    ss = cuda::block_sum<kThreads>(ss, smem);
    const float inv = 1.0f / sqrtf(ss + eps);
    for (int64_t d = threadIdx.x; d < D; d += kThreads) y[r * D + d] = xr[d] * inv;
  }
}

// dx = r·(dy − x·r·(r·Σ x·dy)).
__global__ void __launch_bounds__(kThreads) l2norm_backward_kernel(float* dx, const float* dy, const float* x,
                                                                   int64_t R, int64_t D, float eps) {
  __shared__ float smem[kThreads / 32];
  for (int64_t r = blockIdx.x; r < R; r += gridDim.x) {
    const float* xr = x + r * D;
    const float* gr = dy + r * D;
    float ss = 0.0f, xg = 0.0f;
    for (int64_t d = threadIdx.x; d < D; d += kThreads) {
      ss = fmaf(xr[d], xr[d], ss);
      xg = fmaf(xr[d], gr[d], xg);
    }
    ss = cuda::block_sum<kThreads>(ss, smem);
    xg = cuda::block_sum<kThreads>(xg, smem);
    const float inv = 1.0f / sqrtf(ss + eps);
    const float y_dot_dy = inv * xg;
    for (int64_t d = threadIdx.x; d < D; d += kThreads) {
      const float yd = xr[d] * inv;
      dx[r * D + d] = inv * (gr[d] - yd * y_dot_dy);
    }
  }
}

// ---- Launch helpers

void check_params(const L2normCudaParams& p) {
  HLM_CHECK(p.rows >= 0 && p.dim > 0 && p.eps >= 0.0f, "l2norm_cuda: bad shape [", p.rows, ", ", p.dim, "] or eps");
}

unsigned row_blocks(int64_t R) { return static_cast<unsigned>(std::min<int64_t>(R, kMaxRowBlocks)); }
unsigned warp_row_blocks(int64_t R) {
  return static_cast<unsigned>(std::min<int64_t>((R + kWarpRows - 1) / kWarpRows, kMaxRowBlocks));
}

bool aligned16(const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; }

// Calls f(std::integral_constant<int, V>, std::integral_constant<int, P>) with V the vector width (4 when `vec` and
// D % 4 == 0, else 1) and P the smallest of 4, 8, 16, 32 holding the lane's V·ceil(D/(32V)) elements.
template <typename F>
void dispatch_warp(int64_t D, bool vec, F&& f) {
  auto with_v = [&](auto v) {
    constexpr int V = decltype(v)::value;
    const int64_t need = V * ((D + 32 * V - 1) / (32 * V));
    if (need <= 4) return f(v, std::integral_constant<int, 4>{});
    if (need <= 8) return f(v, std::integral_constant<int, 8>{});
    if (need <= 16) return f(v, std::integral_constant<int, 16>{});
    return f(v, std::integral_constant<int, 32>{});
  };
  if (vec && D % 4 == 0)
    with_v(std::integral_constant<int, 4>{});
  else
    with_v(std::integral_constant<int, 1>{});
}

}  // namespace

void l2norm_forward_cuda(float* y, const float* x, const L2normCudaParams& p, cudaStream_t stream) {
  check_params(p);
  if (p.rows == 0) return;
  if (p.dim <= kWarpMaxDim) {
    dispatch_warp(p.dim, aligned16(y) && aligned16(x), [&](auto v, auto pl) {
      l2norm_forward_warp_kernel<decltype(v)::value, decltype(pl)::value>
          <<<warp_row_blocks(p.rows), kWarpThreads, 0, stream>>>(y, x, p.rows, p.dim, p.eps);
    });
  } else {
    l2norm_forward_kernel<<<row_blocks(p.rows), kThreads, 0, stream>>>(y, x, p.rows, p.dim, p.eps);
  }
  HLM_CUDA_CHECK_LAUNCH();
}

void l2norm_backward_cuda(float* dx, const float* dy, const float* x, const L2normCudaParams& p, cudaStream_t stream) {
  check_params(p);
  if (p.rows == 0) return;
  if (p.dim <= kWarpMaxDim) {
    dispatch_warp(p.dim, aligned16(dx) && aligned16(dy) && aligned16(x), [&](auto v, auto pl) {
      l2norm_backward_warp_kernel<decltype(v)::value, decltype(pl)::value>
          <<<warp_row_blocks(p.rows), kWarpThreads, 0, stream>>>(dx, dy, x, p.rows, p.dim, p.eps);
    });
  } else {
    l2norm_backward_kernel<<<row_blocks(p.rows), kThreads, 0, stream>>>(dx, dy, x, p.rows, p.dim, p.eps);
  }
  HLM_CUDA_CHECK_LAUNCH();
}

}  // namespace hlm
