// Deterministic whole-block reductions for row kernels (one block per row): an fp64 sum and an fp32 max. Used by the
// log-softmax kernels (log_softmax.cu), the chunked LM-head losses (ops/lm_head_loss) and the gradient norm
// (ops/adamw). Deterministic: a fixed xor-shuffle tree inside each warp, then every thread adds the warp results in
// warp order (the sum is cuda::block_sum of backend/cuda/cuda_common.cuh in fp64).
// NaN: block_max_f32 uses fmaxf, which drops NaN; callers detect NaN separately (__syncthreads_or).
// C++17, device code only; included by .cu files.
#pragma once
#include <cuda_runtime.h>

#include "backend/cuda/cuda_common.cuh"

namespace hlm::cuda {

// Σ v over the block in fp64 (kThreads threads, whole warps), returned to every thread: cuda::block_sum's tree.
// `smem` holds kThreads/32 doubles. Error: log2(32) + kThreads/32 fp64 roundings after each thread's own partial.
template <int kThreads>
__device__ double block_sum_f64(double v, double* smem) {
  return block_sum<kThreads, double>(v, smem);
}

// max v over the block (NaN-dropping, see above), returned to every thread. `smem` holds kThreads/32 floats.
template <int kThreads>
__device__ float block_max_f32(float v, float* smem) {
  static_assert(kThreads % 32 == 0 && kThreads <= 1024, "block_max_f32: whole warps only");
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  if (threadIdx.x % 32 == 0) smem[threadIdx.x / 32] = v;
  __syncthreads();
  float total = smem[0];
#pragma unroll
  for (int w = 1; w < kThreads / 32; ++w) total = fmaxf(total, smem[w]);
  __syncthreads();
  return total;
}

}  // namespace hlm::cuda
