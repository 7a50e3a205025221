// Block → tensor lookup of the multi-tensor launches of ops/adamw (adamw_multi_step_cuda in adamw.cu,
// grad_global_norm_cuda in grad_norm.cu): the blocks of one grid are dealt to a list of tensors in list order, and
// first_block[t] (the prefix sums of the per-tensor block counts, built on the host and copied to device memory)
// gives each block its tensor.
// C++17, device code only; included by .cu files.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace hlm {

// Largest t in [0, count) with first_block[t] <= b (first_block[0] = 0 <= b, non-decreasing): the tensor of block b
// (an empty tensor shares its first block with the next one, so it is never picked). Warp-wide 32-ary search: each
// round narrows [lo, hi) 32-fold, so ~2 rounds for a model's few hundred tensors. Call with all 32 lanes of one warp
// (a full-mask ballot); every lane returns the answer.
__device__ __forceinline__ int find_tensor(const int64_t* first_block, int count, int64_t b) {
  const int lane = static_cast<int>(threadIdx.x) & 31;
  int lo = 0, hi = count;
  while (hi - lo > 1) {
    const int stride = (hi - lo + 31) / 32;
    const int idx = lo + lane * stride;
    const bool at_or_before = idx < hi && first_block[idx] <= b;
    const unsigned mask = __ballot_sync(0xffffffffu, at_or_before);  // lane 0 always set
    const int last = 31 - __clz(static_cast<int>(mask));
    lo += last * stride;
    hi = min(lo + stride, hi);
  }
  return lo;
}

// The tensor of this block (blockIdx.x), found by warp 0 and shared with the block through shared memory: call from
// every thread of the block (it contains a barrier).
__device__ __forceinline__ int block_tensor(const int64_t* first_block, int count) {
  __shared__ int tensor_of_block;
  if (threadIdx.x < 32) {
    const int t = find_tensor(first_block, count, blockIdx.x);
    if (threadIdx.x == 0) tensor_of_block = t;
  }
  __syncthreads();
  return tensor_of_block;
}

}  // namespace hlm
