// Device helpers shared by the op kernels (src/ops/<op>/<op>.cu): storage conversions (f32, bf16), 1-D grid sizing,
// a deterministic block sum, and the two-pass column sum planned in column_sum.h. C++17, included only by .cu files.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "backend/cuda/column_sum.h"
#include "backend/cuda/cuda_error.h"

namespace hlm::cuda {

inline constexpr int kElementwiseThreads = 256;
// Grid cap for grid-stride loops: a fixed number (not read off the device) so launches do not depend on the GPU model.
inline constexpr int64_t kMaxGridBlocks = 32768;

inline unsigned grid_blocks(int64_t n, int threads = kElementwiseThreads) {
  const int64_t blocks = (n + threads - 1) / threads;
  return static_cast<unsigned>(std::clamp<int64_t>(blocks, 1, kMaxGridBlocks));
}

// Storage <-> compute (fp32) conversions; bf16 narrowing rounds to nearest even.
__device__ __forceinline__ float to_f32(float v) { return v; }
__device__ __forceinline__ float to_f32(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename T>
__device__ __forceinline__ T from_f32(float v);
template <>
__device__ __forceinline__ float from_f32<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

__device__ __forceinline__ float quiet_nan() { return __int_as_float(0x7fc00000); }

// Sum of `v` over the block (kThreads threads, a multiple of 32), returned to every thread; T = float or double.
// Deterministic: a fixed xor-shuffle tree inside each warp (lane 0's value is used), then every thread adds the warp
// sums in warp order. Error: log2(32) + kThreads/32 roundings of T after each thread's own partial. `smem` holds
// kThreads/32 values of T.
template <int kThreads, typename T>
__device__ T block_sum(T v, T* smem) {
  static_assert(kThreads % 32 == 0 && kThreads <= 1024, "block_sum: whole warps only");
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  if (threadIdx.x % 32 == 0) smem[threadIdx.x / 32] = v;
  __syncthreads();
  T total = T(0);
#pragma unroll
  for (int w = 0; w < kThreads / 32; ++w) total += smem[w];
  __syncthreads();  // smem may be reused by the caller
  return total;
}

// ---- Two-pass column sum (plan: column_sum.h). Term: a device functor float operator()(int64_t row, int64_t col).
inline constexpr int kColumnSumThreads = 256;

template <typename Term>
__global__ void column_sum_partial_kernel(float* partial, Term term, int64_t rows, int64_t cols,
                                          int64_t rows_per_chunk) {
  const int64_t col = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (col >= cols) return;
  const int64_t chunk = blockIdx.y;
  const int64_t r0 = chunk * rows_per_chunk, r1 = r0 + rows_per_chunk < rows ? r0 + rows_per_chunk : rows;
  float acc = 0.0f;
  for (int64_t r = r0; r < r1; ++r) acc += term(r, col);
  partial[chunk * cols + col] = acc;
}

template <typename Acc = float>
__global__ void column_sum_finish_kernel(float* out, const float* partial, int64_t chunks, int64_t cols) {
  const int64_t col = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (col >= cols) return;
  Acc acc = 0;
  for (int64_t c = 0; c < chunks; ++c) acc += partial[c * cols + col];
  out[col] += acc;
}

template <typename Term>
__global__ void column_sum_single_kernel(float* out, Term term, int64_t rows, int64_t cols) {
  const int64_t col = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (col >= cols) return;
  float acc = 0.0f;
  for (int64_t r = 0; r < rows; ++r) acc += term(r, col);
  out[col] += acc;
}

// out[c] += Σ_r term(r, c); `scratch` holds plan.scratch_bytes (may be nullptr when plan.chunks == 1).
template <typename Term>
void column_sum_accumulate(float* out, Term term, int64_t rows, int64_t cols, const ColumnSumPlan& plan,
                           float* scratch, cudaStream_t stream) {
  if (cols <= 0) return;
  const unsigned col_blocks = static_cast<unsigned>((cols + kColumnSumThreads - 1) / kColumnSumThreads);
  if (plan.chunks <= 1) {
    column_sum_single_kernel<<<col_blocks, kColumnSumThreads, 0, stream>>>(out, term, rows, cols);
    HLM_CUDA_CHECK_LAUNCH();
    return;
  }
  const dim3 grid(col_blocks, static_cast<unsigned>(plan.chunks));
  column_sum_partial_kernel<<<grid, kColumnSumThreads, 0, stream>>>(scratch, term, rows, cols, plan.rows_per_chunk);
  HLM_CUDA_CHECK_LAUNCH();
  column_sum_finish_kernel<float><<<col_blocks, kColumnSumThreads, 0, stream>>>(out, scratch, plan.chunks, cols);
  HLM_CUDA_CHECK_LAUNCH();
}

// Aligns a byte offset up to 256 (cudaMalloc's alignment) when carving a workspace into pieces.
constexpr size_t align_up_256(size_t bytes) { return (bytes + 255) / 256 * 256; }

}  // namespace hlm::cuda
