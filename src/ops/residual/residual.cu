// Residual add CUDA kernel and launcher (contract: residual.h, residual_cuda.h).
#include "backend/cuda/cuda_common.cuh"
#include "core/error.h"
#include "ops/residual/residual_add.cuh"
#include "ops/residual/residual_cuda.h"

namespace hlm {

namespace {

__global__ void residual_add_kernel(float* x, const float* delta, float scale, int64_t n) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    x[i] = cuda::residual_add_value(x[i], scale, delta[i]);
}

}  // namespace

void residual_add_forward_cuda(float* x, const float* delta, float scale, int64_t n, cudaStream_t stream) {
  HLM_CHECK(n >= 0, "residual_add_forward_cuda: negative length ", n);
  if (n == 0) return;
  residual_add_kernel<<<cuda::grid_blocks(n), cuda::kElementwiseThreads, 0, stream>>>(x, delta, scale, n);
  HLM_CUDA_CHECK_LAUNCH();
}

}  // namespace hlm
