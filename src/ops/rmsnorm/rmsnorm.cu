// RMSNorm CUDA kernels and launchers (contract: rmsnorm.h, rmsnorm_cuda.h).
//   forward:  one block per row: block sum of x², then out = w · (x · r), r = 1 / sqrt(mean + eps).
//   backward: (1) one block per row stores r and m = (Σ_d g·x) · r / D, g = d_out · w;
//             (2) dweight += Σ_rows d_out · x · r by the two-pass column sum (before (3): dx may alias d_out);
//             (3) elementwise dx = r · (g − x · r · m).
// Non-goals for now: vectorized (16-byte) loads, several rows per block for small D, a fused single-pass backward.
#include "backend/cuda/cuda_common.cuh"
#include "core/error.h"
#include "ops/rmsnorm/rmsnorm_cuda.h"

namespace hlm {

namespace {

using cuda::block_sum;
using cuda::from_f32;
using cuda::to_f32;
constexpr int kThreads = rmsnorm_cuda_threads();
constexpr int64_t kMaxRowBlocks = 1 << 20;  // rows beyond this loop inside the grid

template <typename T>
__global__ void __launch_bounds__(kThreads) rmsnorm_forward_kernel(T* out, const T* x, const T* w, int64_t R, int64_t D,
                                                                   float eps) {
  __shared__ float smem[kThreads / 32];
  for (int64_t r = blockIdx.x; r < R; r += gridDim.x) {
    const T* xr = x + r * D;
    float ss = 0.0f;
    for (int64_t d = threadIdx.x; d < D; d += kThreads) {
      const float v = to_f32(xr[d]);
      ss += v * v;
    }
    ss = block_sum<kThreads>(ss, smem);  // every read of the row happens before this barrier: out may alias x
    const float inv = 1.0f / sqrtf(ss / static_cast<float>(D) + eps);
    T* o = out + r * D;
    for (int64_t d = threadIdx.x; d < D; d += kThreads) o[d] = from_f32<T>(to_f32(w[d]) * (to_f32(xr[d]) * inv));
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
      ss += v * v;
      gx += (to_f32(gr[d]) * to_f32(w[d])) * v;
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

template <typename T>
__global__ void rmsnorm_dx_kernel(T* dx, const T* d_out, const T* x, const T* w, const float* inv,
                                  const float* mean_gn, int64_t R, int64_t D) {
  const int64_t n = R * D;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / D, d = i - r * D;
    const float ir = inv[r];
    const float g = to_f32(d_out[i]) * to_f32(w[d]);
    dx[i] = from_f32<T>(ir * (g - to_f32(x[i]) * ir * mean_gn[r]));
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

void check_params(const RmsnormCudaParams& p) {
  HLM_CHECK(p.rows >= 0 && p.dim >= 0, "rmsnorm_cuda: negative shape [", p.rows, ", ", p.dim, "]");
}

unsigned row_blocks(int64_t R) { return static_cast<unsigned>(std::min<int64_t>(R, kMaxRowBlocks)); }

template <typename T>
void forward_impl(T* out, const T* x, const T* w, const RmsnormCudaParams& p, cudaStream_t stream) {
  check_params(p);
  if (p.rows == 0 || p.dim == 0) return;
  rmsnorm_forward_kernel<T><<<row_blocks(p.rows), kThreads, 0, stream>>>(out, x, w, p.rows, p.dim, p.eps);
  HLM_CUDA_CHECK_LAUNCH();
}

struct Workspace {
  float* inv;
  float* mean_gn;
  float* partial;
  ColumnSumPlan plan;
  size_t bytes;
};

// Sizes the workspace and, when `base` is given, places the pieces in it: r [R], m [R], dweight partials.
Workspace carve(void* base, const RmsnormCudaParams& p) {
  Workspace ws{};
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
void backward_impl(T* dx, float* dweight, const T* d_out, const T* x, const T* w, const RmsnormCudaParams& p,
                   void* workspace, size_t workspace_bytes, cudaStream_t stream) {
  check_params(p);
  if (p.rows == 0 || p.dim == 0) return;
  HLM_CHECK(workspace != nullptr, "rmsnorm_backward_cuda: no workspace");
  const Workspace ws = carve(workspace, p);
  HLM_CHECK(workspace_bytes >= ws.bytes, "rmsnorm_backward_cuda: workspace of ",
            workspace_bytes, " bytes, needs ", ws.bytes);
  rmsnorm_row_stats_kernel<T><<<row_blocks(p.rows), kThreads, 0, stream>>>(ws.inv, ws.mean_gn, d_out, x, w, p.rows,
                                                                          p.dim, p.eps);
  HLM_CUDA_CHECK_LAUNCH();
  if (dweight != nullptr)
    cuda::column_sum_accumulate(dweight, DweightTerm<T>{d_out, x, ws.inv, p.dim}, p.rows, p.dim, ws.plan, ws.partial,
                                stream);
  if (dx != nullptr) {
    rmsnorm_dx_kernel<T><<<cuda::grid_blocks(p.rows * p.dim), cuda::kElementwiseThreads, 0, stream>>>(
        dx, d_out, x, w, ws.inv, ws.mean_gn, p.rows, p.dim);
    HLM_CUDA_CHECK_LAUNCH();
  }
}

}  // namespace

void rmsnorm_forward_cuda(float* out, const float* x, const float* weight, const RmsnormCudaParams& p,
                          cudaStream_t stream) {
  forward_impl(out, x, weight, p, stream);
}

void rmsnorm_forward_cuda(__nv_bfloat16* out, const __nv_bfloat16* x, const __nv_bfloat16* weight,
                          const RmsnormCudaParams& p, cudaStream_t stream) {
  forward_impl(out, x, weight, p, stream);
}

size_t rmsnorm_backward_cuda_workspace_bytes(const RmsnormCudaParams& p) {
  check_params(p);
  return carve(nullptr, p).bytes;
}

void rmsnorm_backward_cuda(float* dx, float* dweight, const float* d_out, const float* x, const float* weight,
                           const RmsnormCudaParams& p, void* workspace, size_t workspace_bytes, cudaStream_t stream) {
  backward_impl(dx, dweight, d_out, x, weight, p, workspace, workspace_bytes, stream);
}

void rmsnorm_backward_cuda(__nv_bfloat16* dx, float* dweight, const __nv_bfloat16* d_out, const __nv_bfloat16* x,
                           const __nv_bfloat16* weight, const RmsnormCudaParams& p, void* workspace,
                           size_t workspace_bytes, cudaStream_t stream) {
  backward_impl(dx, dweight, d_out, x, weight, p, workspace, workspace_bytes, stream);
}

}  // namespace hlm
