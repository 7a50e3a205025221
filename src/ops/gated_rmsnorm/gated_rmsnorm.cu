// Gated RMSNorm CUDA kernels and launchers (contract: gated_rmsnorm.h, gated_rmsnorm_cuda.h).
//   forward:  one block per row: block sum of x², then y = ((x·r)·w)·silu(z), r = 1/sqrt(mean + eps).
//   backward: (1) one block per row: r, s = Σ_d gn·x (gn = dy·w·silu(z)), then dx = r·(gn − n·(s·r/D)) and
//             dz = dy·w·n·σ(z)·(1 + z·σ(−z)), n = x·r; r is stored for (2);
//             (2) dw = Σ_rows dy·x·r·silu(z) by the two-pass column sum into a zeroed dw (the contract overwrites).
// Non-goals for now: several rows per block for small dim, vectorized loads, a fused single-pass backward.
#include "backend/cuda/cuda_common.cuh"
#include "core/error.h"
#include "ops/gated_rmsnorm/gated_rmsnorm_cuda.h"

namespace hlm {

namespace {

constexpr int kThreads = gated_rmsnorm_cuda_threads();
constexpr int64_t kMaxRowBlocks = 1 << 20;  // rows beyond this loop inside the grid

__device__ __forceinline__ float sigmoid(float v) { return 1.0f / (1.0f + expf(-v)); }
__device__ __forceinline__ float silu(float v) { return v / (1.0f + expf(-v)); }

__global__ void __launch_bounds__(kThreads) gated_rmsnorm_forward_kernel(float* y, const float* x, const float* z,
                                                                         const float* w, int64_t R, int64_t D,
                                                                         float eps) {
  __shared__ float smem[kThreads / 32];
  for (int64_t r = blockIdx.x; r < R; r += gridDim.x) {
    const float* xr = x + r * D;
    float ss = 0.0f;
    for (int64_t d = threadIdx.x; d < D; d += kThreads) ss = fmaf(xr[d], xr[d], ss);
    ss = cuda::block_sum<kThreads>(ss, smem);  // every read of x happens before this barrier: y may alias x
    const float inv = 1.0f / sqrtf(ss / static_cast<float>(D) + eps);
    for (int64_t d = threadIdx.x; d < D; d += kThreads) {
      const int64_t i = r * D + d;
      y[i] = ((xr[d] * inv) * w[d]) * silu(z[i]);  // reads x[i], z[i] before writing y[i] (same thread)
    }
  }
}

__global__ void __launch_bounds__(kThreads) gated_rmsnorm_backward_kernel(float* dx, float* dz, float* inv_out,
                                                                          const float* dy, const float* x,
                                                                          const float* z, const float* w, int64_t R,
                                                                          int64_t D, float eps) {
  __shared__ float smem[kThreads / 32];
  for (int64_t r = blockIdx.x; r < R; r += gridDim.x) {
    const int64_t base = r * D;
    float ss = 0.0f, s = 0.0f;
    for (int64_t d = threadIdx.x; d < D; d += kThreads) {
      const float xv = x[base + d];
      ss = fmaf(xv, xv, ss);
      s = fmaf((dy[base + d] * w[d]) * silu(z[base + d]), xv, s);
    }
    ss = cuda::block_sum<kThreads>(ss, smem);
    s = cuda::block_sum<kThreads>(s, smem);
    const float inv = 1.0f / sqrtf(ss / static_cast<float>(D) + eps);
    const float mean = s * inv / static_cast<float>(D);  // mean_d(gn · n)
    if (threadIdx.x == 0 && inv_out != nullptr) inv_out[r] = inv;
    for (int64_t d = threadIdx.x; d < D; d += kThreads) {
      const int64_t i = base + d;
      const float zi = z[i], n = x[i] * inv, dyw = dy[i] * w[d];
      const float sg = sigmoid(zi);
      dx[i] = inv * (dyw * silu(zi) - n * mean);
      dz[i] = dyw * n * sg * (1.0f + zi * sigmoid(-zi));
    }
  }
}

struct DwTerm {
  const float *dy, *x, *z, *inv;
  int64_t D;
  __device__ float operator()(int64_t r, int64_t d) const {
    const int64_t i = r * D + d;
    return dy[i] * x[i] * inv[r] * silu(z[i]);
  }
};

void check_params(const GatedRmsnormCudaParams& p) {
  HLM_CHECK(p.rows >= 0 && p.dim > 0, "gated_rmsnorm_cuda: bad shape [", p.rows, ", ", p.dim, "]");
}

unsigned row_blocks(int64_t R) { return static_cast<unsigned>(std::min<int64_t>(R, kMaxRowBlocks)); }

struct Workspace {
  float* inv;
  float* partial;
  ColumnSumPlan plan;
  size_t bytes;
};

// Sizes the workspace and, when `base` is given, places the pieces in it: r [rows], dw partials.
Workspace carve(void* base, const GatedRmsnormCudaParams& p) {
  Workspace ws{};
  const size_t row_bytes = cuda::align_up_256(static_cast<size_t>(p.rows) * sizeof(float));
  ws.plan = column_sum_plan(p.rows, p.dim, ~size_t{0} / 2);
  ws.bytes = row_bytes + ws.plan.scratch_bytes;
  if (base == nullptr) return ws;
  ws.inv = static_cast<float*>(base);
  ws.partial = reinterpret_cast<float*>(static_cast<char*>(base) + row_bytes);
  return ws;
}

}  // namespace

void gated_rmsnorm_forward_cuda(float* y, const float* x, const float* z, const float* w,
                                const GatedRmsnormCudaParams& p, cudaStream_t stream) {
  check_params(p);
  if (p.rows == 0) return;
  gated_rmsnorm_forward_kernel<<<row_blocks(p.rows), kThreads, 0, stream>>>(y, x, z, w, p.rows, p.dim, p.eps);
  HLM_CUDA_CHECK_LAUNCH();
}

size_t gated_rmsnorm_backward_cuda_workspace_bytes(const GatedRmsnormCudaParams& p) {
  check_params(p);
  return carve(nullptr, p).bytes;
}

void gated_rmsnorm_backward_cuda(float* dx, float* dz, float* dw, const float* dy, const float* x, const float* z,
                                 const float* w, const GatedRmsnormCudaParams& p, void* workspace,
                                 size_t workspace_bytes, cudaStream_t stream) {
  check_params(p);
  if (dw != nullptr) HLM_CUDA_CHECK(cudaMemsetAsync(dw, 0, static_cast<size_t>(p.dim) * sizeof(float), stream));
  if (p.rows == 0) return;
  HLM_CHECK(workspace != nullptr, "gated_rmsnorm_backward_cuda: no workspace");
  const Workspace ws = carve(workspace, p);
  HLM_CHECK(workspace_bytes >= ws.bytes, "gated_rmsnorm_backward_cuda: workspace of ", workspace_bytes,
            " bytes, needs ", ws.bytes);
  gated_rmsnorm_backward_kernel<<<row_blocks(p.rows), kThreads, 0, stream>>>(dx, dz, ws.inv, dy, x, z, w, p.rows,
                                                                            p.dim, p.eps);
  HLM_CUDA_CHECK_LAUNCH();
  if (dw != nullptr)
    cuda::column_sum_accumulate(dw, DwTerm{dy, x, z, ws.inv, p.dim}, p.rows, p.dim, ws.plan, ws.partial, stream);
}

}  // namespace hlm
