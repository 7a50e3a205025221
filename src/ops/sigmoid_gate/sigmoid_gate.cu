// Sigmoid gate CUDA kernel and launcher (contract: sigmoid_gate_cuda.h): one grid-stride loop, each element read
// before it is written by the same thread (aliasing legal).
#include "backend/cuda/cuda_common.cuh"
#include "core/error.h"
#include "ops/sigmoid_gate/sigmoid_gate_cuda.h"

namespace hlm {

namespace {

__global__ void sigmoid_gate_kernel(float* out, const float* x, const float* g, int64_t n) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[i] = x[i] / (1.0f + expf(-g[i]));
}

}  // namespace

void sigmoid_gate_forward_cuda(float* out, const float* x, const float* g, int64_t n, cudaStream_t stream) {
  HLM_CHECK(n >= 0, "sigmoid_gate_cuda: negative n ", n);
  if (n == 0) return;
  sigmoid_gate_kernel<<<cuda::grid_blocks(n), cuda::kElementwiseThreads, 0, stream>>>(out, x, g, n);
  HLM_CUDA_CHECK_LAUNCH();
}

}  // namespace hlm
