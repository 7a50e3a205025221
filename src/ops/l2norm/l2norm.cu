// L2 normalisation CUDA kernels and launchers (contract: l2norm.h, l2norm_cuda.h). Two paths, chosen by the row
// length D:
//   D ≤ l2norm_cuda_warp_max_dim() (the GDN key/query heads, dk = 64..256): one warp per row, kWarpRows rows per
//     block. Each lane loads its slice of the row into registers (float4 when every pointer is 16-byte aligned and
//     D % 4 == 0, else single floats), sums it in order, and a 5-level xor-shuffle tree gives every lane the row sums.
//   longer rows: one block of l2norm_cuda_threads() threads per row, scalar loads, block sums.
// Both then apply the elementwise formula. Every read of a row happens before the reduction that precedes its writes
// and each thread writes only the elements it read, so y may alias x and dx may alias dy. Deterministic: fixed
// summation order, no atomics. The warp path's shared helpers (slices, warp sum, V/P dispatch):
// backend/cuda/warp_rows.cuh.
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/warp_rows.cuh"
#include "core/error.h"
#include "ops/l2norm/l2norm_cuda.h"

namespace hlm {

namespace {

using cuda::aligned16;
using cuda::for_slice;
using cuda::load_slice;
using cuda::row_blocks;
using cuda::store_slice;
using cuda::warp_sum;
constexpr int kThreads = l2norm_cuda_threads();
constexpr int64_t kWarpMaxDim = l2norm_cuda_warp_max_dim();
constexpr int kWarpRows = 8;  // rows (warps) per block on the warp path
constexpr int kWarpThreads = 32 * kWarpRows;
static_assert(kWarpMaxDim <= 32 * 32, "warp path: at most 32 elements per lane are held in registers");

// ---- Warp path (helpers: backend/cuda/warp_rows.cuh)

template <int V, int P>
__global__ void __launch_bounds__(kWarpThreads) l2norm_forward_warp_kernel(float* y, const float* x, int64_t R,
                                                                       int64_t D, float eps) {
  const int lane = static_cast<int>(threadIdx.x % 32);
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * kWarpRows + threadIdx.x / 32; r < R;
       r += static_cast<int64_t>(gridDim.x) * kWarpRows) {
    float xv[P];
    load_slice<V, P>(xv, x + r * D, D, lane);
    float ss = cuda::slice_sum_squares<V, P>(xv, D, lane);
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
    for_slice<V, P>(D, lane, [&](int i) {
      ss = fmaf(xv[i], xv[i], ss);
      xg = fmaf(xv[i], gv[i], xg);
    });
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

unsigned warp_row_blocks(int64_t R) { return cuda::warp_row_blocks<kWarpRows>(R); }

}  // namespace

void l2norm_forward_cuda(float* y, const float* x, const L2normCudaParams& p, cudaStream_t stream) {
  check_params(p);
  if (p.rows == 0) return;
  if (p.dim <= kWarpMaxDim) {
    cuda::dispatch_warp<float>(p.dim, aligned16(y) && aligned16(x), [&](auto v, auto pl) {
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
    cuda::dispatch_warp<float>(p.dim, aligned16(dx) && aligned16(dy) && aligned16(x), [&](auto v, auto pl) {
      l2norm_backward_warp_kernel<decltype(v)::value, decltype(pl)::value>
          <<<warp_row_blocks(p.rows), kWarpThreads, 0, stream>>>(dx, dy, x, p.rows, p.dim, p.eps);
    });
  } else {
    l2norm_backward_kernel<<<row_blocks(p.rows), kThreads, 0, stream>>>(dx, dy, x, p.rows, p.dim, p.eps);
  }
  HLM_CUDA_CHECK_LAUNCH();
}

}  // namespace hlm
