// Global gradient norm and clip scale on CUDA (contract: grad_norm_cuda.h). Pass 1: ONE launch over all tensors; the
// prefix table first_block maps each block to (tensor, block of that tensor), and each block writes the fp64 Σ x² of
// its grid-stride share of its tensor into its slot; pass 2: one block sums the slots in order.
// The per-tensor partition, per-thread order, block tree and slot layout are those of the earlier one-launch-per-tensor
// form (which took 458 launches and 1.8 ms per H200 training step for ~340 tensors); only the block → tensor mapping
// moved from the host loop into the table.
#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>

#include "backend/cuda/cuda_common.cuh"
#include "core/error.h"
#include "ops/adamw/grad_norm_cuda.h"
#include "ops/adamw/multi_tensor.cuh"
#include "ops/log_softmax/block_reduce.cuh"

namespace hlm {

namespace {

constexpr int kThreads = 256;
constexpr int64_t kElementsPerBlock = 16 * kThreads;  // a block sums at least this many elements (when there are)
constexpr int64_t kMaxBlocksPerTensor = 1024;         // bounds the slots and pass 2's length
// Loads in flight per thread: kUnroll grid-stride steps are loaded first, then added in the same increasing order as
// a plain grid-stride loop (the unrolling changes no sum, only the memory-level parallelism).
constexpr int kUnroll = 8;

// Blocks of one tensor: a pure function of its size (determinism does not depend on the GPU).
int64_t tensor_blocks(int64_t numel) {
  if (numel <= 0) return 0;
  return std::min((numel + kElementsPerBlock - 1) / kElementsPerBlock, kMaxBlocksPerTensor);
}

// The table at the start of the workspace (and the whole host staging buffer): first_block [count + 1] int64, then the
// list (16-byte aligned); the fp64 partials follow it.
size_t list_offset(size_t count) { return ((count + 1) * sizeof(int64_t) + 15) / 16 * 16; }

// Block b: tensor t = find_tensor(b), its block j = b − first_block[t] of B = first_block[t + 1] − first_block[t].
// Thread k sums x[i]² for i = j·256 + k, + B·256, ... (increasing i), then the block tree; partial[b] = the sum.
__global__ void __launch_bounds__(kThreads) sum_squares_kernel(double* partial, const int64_t* first_block,
                                                               const GradNormCudaTensor* list, int count) {
  __shared__ double smem[kThreads / 32];
  const int64_t b = blockIdx.x;
  const int t = block_tensor(first_block, count);
  const float* const x = list[t].grad;
  const uint16_t* const x16 = list[t].grad_bf16;  // when x is nullptr
  const int64_t n = list[t].numel;
  const int64_t first = first_block[t];
  const int64_t stride = (first_block[t + 1] - first) * kThreads;
  double acc = 0.0;
  for (int64_t i = (b - first) * kThreads + threadIdx.x; i < n; i += stride * kUnroll) {
    float v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t k = i + u * stride;
      v[u] = k >= n ? 0.0f : x != nullptr ? x[k] : __uint_as_float(static_cast<uint32_t>(x16[k]) << 16);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      if (i + u * stride >= n) break;
      const double d = v[u];
      acc += d * d;  // exact square (24-bit mantissa): an FMA contraction gives the same bits
    }
  }
  acc = cuda::block_sum_f64<kThreads>(acc, smem);
  if (threadIdx.x == 0) partial[b] = acc;
}

__global__ void __launch_bounds__(kThreads) norm_finish_kernel(double* norm_out, float* clip_scale_out,
                                                               const double* partial, int64_t slots,
                                                               double max_norm) {
  __shared__ double smem[kThreads / 32];
  double acc = 0.0;
  for (int64_t s = threadIdx.x; s < slots; s += static_cast<int64_t>(kThreads) * kUnroll) {
    double p[kUnroll];  // loaded first, added in slot order (as s += kThreads one at a time)
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t k = s + static_cast<int64_t>(u) * kThreads;
      p[u] = k < slots ? partial[k] : 0.0;
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      if (s + static_cast<int64_t>(u) * kThreads >= slots) break;
      acc += p[u];
    }
  }
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

size_t grad_norm_cuda_staging_bytes(size_t count) { return list_offset(count) + count * sizeof(GradNormCudaTensor); }

size_t grad_norm_cuda_workspace_bytes(const GradNormCudaTensor* tensors, size_t count) {
  return grad_norm_cuda_staging_bytes(count) +
         static_cast<size_t>(std::max<int64_t>(total_slots(tensors, count), 1)) * sizeof(double);
}

void grad_global_norm_cuda(double* norm_out, float* clip_scale_out, const GradNormCudaTensor* tensors, size_t count,
                           double max_norm, void* workspace, size_t workspace_bytes, void* host_staging,
                           cudaStream_t stream) {
  HLM_CHECK(norm_out != nullptr, "grad_global_norm_cuda: no output pointer");
  if (clip_scale_out != nullptr)
    HLM_CHECK_INPUT(max_norm > 0.0, "max gradient norm must be positive, got ", max_norm);
  HLM_CHECK(count <= static_cast<size_t>(INT_MAX), "grad_global_norm_cuda: ", count, " tensors");
  HLM_CHECK(count == 0 || tensors != nullptr, "grad_global_norm_cuda: no list");
  for (size_t i = 0; i < count; ++i)
    HLM_CHECK(tensors[i].numel >= 0 &&
                  (tensors[i].numel == 0 || (tensors[i].grad != nullptr) != (tensors[i].grad_bf16 != nullptr)),
              "grad_global_norm_cuda: tensor ", i, " has no data or a negative size");
  const size_t needed = grad_norm_cuda_workspace_bytes(tensors, count);
  HLM_CHECK(workspace != nullptr && workspace_bytes >= needed && host_staging != nullptr,
            "grad_global_norm_cuda: workspace of ", workspace_bytes, " bytes (needs ", needed, ") or no host staging");
  const size_t table_bytes = grad_norm_cuda_staging_bytes(count);
  auto* partial = reinterpret_cast<double*>(static_cast<char*>(workspace) + table_bytes);
  auto* first_block = static_cast<int64_t*>(host_staging);
  int64_t blocks = 0;
  for (size_t i = 0; i < count; ++i) {
    first_block[i] = blocks;
    blocks += tensor_blocks(tensors[i].numel);
  }
  first_block[count] = blocks;
  if (blocks > 0) {  // else only empty tensors (or none): the finish writes 0
    HLM_CHECK(blocks <= INT_MAX, "grad_global_norm_cuda: ", blocks, " blocks exceed one grid");
    std::memcpy(static_cast<char*>(host_staging) + list_offset(count), tensors, count * sizeof(GradNormCudaTensor));
    HLM_CUDA_CHECK(cudaMemcpyAsync(workspace, host_staging, table_bytes, cudaMemcpyHostToDevice, stream));
    const auto* table = static_cast<const char*>(workspace);
    sum_squares_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
        partial, reinterpret_cast<const int64_t*>(table),
        reinterpret_cast<const GradNormCudaTensor*>(table + list_offset(count)), static_cast<int>(count));
    HLM_CUDA_CHECK_LAUNCH();
  }
  norm_finish_kernel<<<1, kThreads, 0, stream>>>(norm_out, clip_scale_out, partial, blocks, max_norm);
  HLM_CUDA_CHECK_LAUNCH();
}

}  // namespace hlm
