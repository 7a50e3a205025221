// L2 normalisation CUDA kernels and launchers (contract: l2norm.h, l2norm_cuda.h). One block per row: block sums of
// x² (and x·dy), then the elementwise formula. Every read of a row happens before the block sum's barrier and each
// thread then writes only the elements it reads, so y may alias x and dx may alias dy.
// Non-goals for now: several rows per block for small dim (dk = 64..128 leaves threads idle), vectorized loads.
#include "backend/cuda/cuda_common.cuh"
#include "core/error.h"
#include "ops/l2norm/l2norm_cuda.h"

namespace hlm {

namespace {

constexpr int kThreads = l2norm_cuda_threads();
constexpr int64_t kMaxRowBlocks = 1 << 20;  // rows beyond this loop inside the grid

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

void check_params(const L2normCudaParams& p) {
  HLM_CHECK(p.rows >= 0 && p.dim > 0 && p.eps >= 0.0f, "l2norm_cuda: bad shape [", p.rows, ", ", p.dim, "] or eps");
}

unsigned row_blocks(int64_t R) { return static_cast<unsigned>(std::min<int64_t>(R, kMaxRowBlocks)); }

}  // namespace

void l2norm_forward_cuda(float* y, const float* x, const L2normCudaParams& p, cudaStream_t stream) {
  check_params(p);
  if (p.rows == 0) return;
  l2norm_forward_kernel<<<row_blocks(p.rows), kThreads, 0, stream>>>(y, x, p.rows, p.dim, p.eps);
  HLM_CUDA_CHECK_LAUNCH();
}

void l2norm_backward_cuda(float* dx, const float* dy, const float* x, const L2normCudaParams& p, cudaStream_t stream) {
  check_params(p);
  if (p.rows == 0) return;
  l2norm_backward_kernel<<<row_blocks(p.rows), kThreads, 0, stream>>>(dx, dy, x, p.rows, p.dim, p.eps);
  HLM_CUDA_CHECK_LAUNCH();
}

}  // namespace hlm
