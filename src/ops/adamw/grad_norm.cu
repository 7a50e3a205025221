// Global gradient norm and clip scale on CUDA (contract: grad_norm_cuda.h). Pass 1: one launch per tensor, each block
// writes the fp64 Σ x² of its grid-stride share into its slot; pass 2: one block sums the slots in order.
#include <cmath>
#include <vector>

#include "backend/cuda/cuda_common.cuh"
#include "core/error.h"
#include "ops/adamw/grad_norm_cuda.h"
#include "ops/log_softmax/block_reduce.cuh"

namespace hlm {

namespace {

constexpr int kThreads = 256;
constexpr int64_t kElementsPerBlock = 16 * kThreads;  // a block sums at least this many elements (when there are)
constexpr int64_t kMaxBlocksPerTensor = 1024;         // bounds the slots and pass 2's length

// Blocks of one tensor: a pure function of its size (determinism does not depend on the GPU).
int64_t tensor_blocks(int64_t numel) {
  if (numel <= 0) return 0;
  return std::min((numel + kElementsPerBlock - 1) / kElementsPerBlock, kMaxBlocksPerTensor);
}

__global__ void __launch_bounds__(kThreads) sum_squares_kernel(double* partial, const float* x, int64_t n) {
  __shared__ double smem[kThreads / 32];
  double acc = 0.0;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * kThreads) {
    const double v = x[i];
    acc += v * v;  // exact square (24-bit mantissa)
  }
  acc = cuda::block_sum_f64<kThreads>(acc, smem);
  if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

__global__ void __launch_bounds__(kThreads) norm_finish_kernel(double* norm_out, float* clip_scale_out,
                                                               const double* partial, int64_t slots,
                                                               double max_norm) {
  __shared__ double smem[kThreads / 32];
  double acc = 0.0;
  for (int64_t s = threadIdx.x; s < slots; s += kThreads) acc += partial[s];
  acc = cuda::block_sum_f64<kThreads>(acc, smem);
  if (threadIdx.x != 0) return;
  const double norm = sqrt(acc);  // NaN if any NaN, +inf if any ±inf
  *norm_out = norm;
  if (clip_scale_out != nullptr) {
    float scale = cuda::quiet_nan();  // non-finite norm: skip the step
    if (isfinite(norm)) scale = norm > max_norm ? static_cast<float>(max_norm / norm) : 1.0f;
    *clip_scale_out = scale;
  }
}

int64_t total_slots(const GradNormCudaTensor* tensors, size_t count) {
  int64_t slots = 0;
  for (size_t i = 0; i < count; ++i) slots += tensor_blocks(tensors[i].numel);
  return slots;
}

}  // namespace

size_t grad_norm_cuda_workspace_bytes(const GradNormCudaTensor* tensors, size_t count) {
  return static_cast<size_t>(std::max<int64_t>(total_slots(tensors, count), 1)) * sizeof(double);
}

void grad_global_norm_cuda(double* norm_out, float* clip_scale_out, const GradNormCudaTensor* tensors, size_t count,
                           double max_norm, void* workspace, size_t workspace_bytes, cudaStream_t stream) {
  HLM_CHECK(norm_out != nullptr, "grad_global_norm_cuda: no output pointer");
  if (clip_scale_out != nullptr)
    HLM_CHECK_INPUT(max_norm > 0.0, "max gradient norm must be positive, got ", max_norm);
  for (size_t i = 0; i < count; ++i)
    HLM_CHECK(tensors[i].numel >= 0 && (tensors[i].numel == 0 || tensors[i].grad != nullptr),
              "grad_global_norm_cuda: tensor ", i, " has no data or a negative size");
  const size_t needed = grad_norm_cuda_workspace_bytes(tensors, count);
  HLM_CHECK(workspace != nullptr && workspace_bytes >= needed, "grad_global_norm_cuda: workspace of ",
            workspace_bytes, " bytes, needs ", needed);
  auto* partial = static_cast<double*>(workspace);
  int64_t slot = 0;
  for (size_t i = 0; i < count; ++i) {
    const int64_t blocks = tensor_blocks(tensors[i].numel);
    if (blocks == 0) continue;
    sum_squares_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(partial + slot, tensors[i].grad,
                                                                               tensors[i].numel);
    HLM_CUDA_CHECK_LAUNCH();
    slot += blocks;
  }
  norm_finish_kernel<<<1, kThreads, 0, stream>>>(norm_out, clip_scale_out, partial, slot, max_norm);
  HLM_CUDA_CHECK_LAUNCH();
}

}  // namespace hlm
