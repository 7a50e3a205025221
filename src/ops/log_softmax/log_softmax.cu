// Log-softmax CUDA kernels and launchers (contract: log_softmax.h, log_softmax_cuda.h). One block per row, rows past
// the grid cap loop inside the grid. Per row: (1) max and NaN test, (2) fp64 Σ exp(x − m) with a fixed reduction
// tree, (3) the elementwise output. Non-goals for now: vectorized loads, several rows per block for small vocabularies.
#include <cmath>

#include "backend/cuda/cuda_common.cuh"
#include "core/error.h"
#include "ops/log_softmax/block_reduce.cuh"
#include "ops/log_softmax/log_softmax_cuda.h"

namespace hlm {

namespace {

constexpr int kThreads = log_softmax_cuda_threads();
constexpr int64_t kMaxRowBlocks = 1 << 20;

struct RowLse {
  float max_value;
  float log_sum;
};

// The CPU's row_logsumexp (log_softmax_ref.cpp) for the row at `x`, returned to every thread of the block.
__device__ RowLse row_logsumexp(const float* x, int64_t V, float* smem_f, double* smem_d) {
  float local_max = -INFINITY;
  bool has_nan = false;
  for (int64_t v = threadIdx.x; v < V; v += kThreads) {
    const float xv = x[v];
    has_nan |= isnan(xv);
    local_max = fmaxf(local_max, xv);
  }
  if (__syncthreads_or(has_nan)) return {cuda::quiet_nan(), 0.0f};
  const float max_value = cuda::block_max_f32<kThreads>(local_max, smem_f);
  if (isinf(max_value)) return {max_value, 0.0f};  // all -inf -> -inf; any +inf -> +inf (as the CPU)
  double sum = 0.0;
  for (int64_t v = threadIdx.x; v < V; v += kThreads) sum += exp(static_cast<double>(x[v] - max_value));
  sum = cuda::block_sum_f64<kThreads>(sum, smem_d);
  return {max_value, static_cast<float>(log(sum))};
}

__global__ void __launch_bounds__(kThreads) log_softmax_forward_kernel(float* out, const float* x, int64_t R,
                                                                       int64_t V) {
  __shared__ float smem_f[kThreads / 32];
  __shared__ double smem_d[kThreads / 32];
  for (int64_t r = blockIdx.x; r < R; r += gridDim.x) {
    const float* xr = x + r * V;
    const RowLse l = row_logsumexp(xr, V, smem_f, smem_d);  // ends with a barrier: out may alias x
    float* o = out + r * V;
    for (int64_t v = threadIdx.x; v < V; v += kThreads) o[v] = __fsub_rn(__fsub_rn(xr[v], l.max_value), l.log_sum);
  }
}

__global__ void __launch_bounds__(kThreads) logsumexp_forward_kernel(float* lse, const float* x, int64_t R,
                                                                     int64_t V) {
  __shared__ float smem_f[kThreads / 32];
  __shared__ double smem_d[kThreads / 32];
  for (int64_t r = blockIdx.x; r < R; r += gridDim.x) {
    const RowLse l = row_logsumexp(x + r * V, V, smem_f, smem_d);
    if (threadIdx.x == 0) lse[r] = __fadd_rn(l.max_value, l.log_sum);
  }
}

__global__ void __launch_bounds__(kThreads) log_softmax_backward_kernel(float* dx, const float* d_out,
                                                                        const float* out, int64_t R, int64_t V) {
  __shared__ double smem_d[kThreads / 32];
  for (int64_t r = blockIdx.x; r < R; r += gridDim.x) {
    const float* g = d_out + r * V;
    double sum = 0.0;
    for (int64_t v = threadIdx.x; v < V; v += kThreads) sum += static_cast<double>(g[v]);
    sum = cuda::block_sum_f64<kThreads>(sum, smem_d);  // every read of the row's sum happens before this barrier
    const float* o = out + r * V;
    float* d = dx + r * V;
    // Each element is read and written by the same thread: dx may alias d_out.
    for (int64_t v = threadIdx.x; v < V; v += kThreads)
      d[v] = static_cast<float>(static_cast<double>(g[v]) - exp(static_cast<double>(o[v])) * sum);
  }
}

void check_params(const LogSoftmaxCudaParams& p) {
  HLM_CHECK(p.rows >= 0 && p.vocab >= 0, "log_softmax_cuda: negative shape [", p.rows, ", ", p.vocab, "]");
}

unsigned row_blocks(int64_t R) { return static_cast<unsigned>(std::min<int64_t>(R, kMaxRowBlocks)); }

}  // namespace

void log_softmax_forward_cuda(float* out, const float* x, const LogSoftmaxCudaParams& p, cudaStream_t stream) {
  check_params(p);
  if (p.rows == 0 || p.vocab == 0) return;
  log_softmax_forward_kernel<<<row_blocks(p.rows), kThreads, 0, stream>>>(out, x, p.rows, p.vocab);
  HLM_CUDA_CHECK_LAUNCH();
}

void logsumexp_forward_cuda(float* lse, const float* x, const LogSoftmaxCudaParams& p, cudaStream_t stream) {
  check_params(p);
  if (p.rows == 0) return;  // V = 0 gives -inf per row, as the CPU (max over nothing, log_sum 0)
  logsumexp_forward_kernel<<<row_blocks(p.rows), kThreads, 0, stream>>>(lse, x, p.rows, p.vocab);
  HLM_CUDA_CHECK_LAUNCH();
}

void log_softmax_backward_cuda(float* dx, const float* d_out, const float* out, const LogSoftmaxCudaParams& p,
                               cudaStream_t stream) {
  check_params(p);
  if (p.rows == 0 || p.vocab == 0) return;
  log_softmax_backward_kernel<<<row_blocks(p.rows), kThreads, 0, stream>>>(dx, d_out, out, p.rows, p.vocab);
  HLM_CUDA_CHECK_LAUNCH();
}

}  // namespace hlm
