// Per-sequence state rows gather/scatter (contract: state_rows_cuda.h): grid-stride over rows × elements, float4
// when every row starts 16-byte aligned.
#include "backend/cuda/cuda_common.cuh"
#include "core/error.h"
#include "ops/state_rows/state_rows_cuda.h"

namespace hlm {

namespace {

template <typename V>
__global__ void state_rows_copy_kernel(V* dst, const int32_t* dst_rows, const V* src, const int32_t* src_rows,
                                       int64_t n_rows, int64_t row) {
  const int64_t n = n_rows * row;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / row, e = i % row;
    const int64_t d = dst_rows != nullptr ? dst_rows[r] : r, s = src_rows != nullptr ? src_rows[r] : r;
    dst[d * row + e] = src[s * row + e];
  }
}

}  // namespace

void state_rows_copy_cuda(float* dst, const int32_t* dst_rows, const float* src, const int32_t* src_rows,
                          int64_t n_rows, int64_t row_elements, cudaStream_t stream) {
  HLM_CHECK(n_rows >= 0 && row_elements >= 0, "state_rows_copy_cuda: negative shape");
  if (n_rows == 0 || row_elements == 0) return;
  const bool vec = row_elements % 4 == 0 && reinterpret_cast<uintptr_t>(dst) % 16 == 0 &&
                   reinterpret_cast<uintptr_t>(src) % 16 == 0;
  if (vec) {
    const int64_t row = row_elements / 4;
    state_rows_copy_kernel<<<cuda::grid_blocks(n_rows * row), cuda::kElementwiseThreads, 0, stream>>>(
        reinterpret_cast<float4*>(dst), dst_rows, reinterpret_cast<const float4*>(src), src_rows, n_rows, row);
  } else {
    state_rows_copy_kernel<<<cuda::grid_blocks(n_rows * row_elements), cuda::kElementwiseThreads, 0, stream>>>(
        dst, dst_rows, src, src_rows, n_rows, row_elements);
  }
  HLM_CUDA_CHECK_LAUNCH();
}

}  // namespace hlm
