// Fused AdamW step on CUDA (contract: adamw_cuda.h). A grid-stride elementwise kernel for one tensor, a chunked kernel
// for a list of tensors (one launch), both over one per-element device function; the host helper computes the step's
// scalars in double like AdamW::step (src/train/adamw.cpp).
#include <climits>
#include <cmath>
#include <cstring>

#include "backend/cuda/cuda_common.cuh"
#include "core/error.h"
#include "ops/adamw/adamw_cuda.h"
#include "ops/adamw/multi_tensor.cuh"
#include "ops/cast/bf16_round.cuh"

namespace hlm {

namespace {

// The update of one element: the single definition of the arithmetic (both kernels call it, so a multi-tensor launch
// gives the bits of per-tensor launches). scaled: a grad_scale was given (the product g · scale is skipped without).
struct AdamWElement {
  float param, exp_avg, exp_avg_sq;
};

__device__ __forceinline__ AdamWElement adamw_element(float param, float exp_avg, float exp_avg_sq, float grad,
                                                      bool scaled, float scale, const AdamWCudaStep& s) {
  // Every operation an explicit round-to-nearest intrinsic: nvcc contracts a·b + c into an FMA where it sees fit,
  // and it did so differently in the two kernels (H200, 2026-11-30: a few param bits differed), so the bits of the
  // update must not be left to the contraction choice. One rounding per operation, as the bound in cases_adamw.cpp.
  const float g = scaled ? __fmul_rn(grad, scale) : grad;
  const float m = __fadd_rn(__fmul_rn(s.beta1, exp_avg), __fmul_rn(s.one_minus_beta1, g));
  const float v = __fadd_rn(__fmul_rn(s.beta2, exp_avg_sq), __fmul_rn(s.one_minus_beta2, __fmul_rn(g, g)));
  const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(v), s.bias_correction2_sqrt), s.eps);
  const float p = __fsub_rn(__fmul_rn(param, s.decay), __fdiv_rn(__fmul_rn(s.step_size, m), denom));
  return {p, m, v};
}

__device__ __forceinline__ void adamw_scalar(float* param, float* exp_avg, float* exp_avg_sq,
                                             __nv_bfloat16* param_bf16, const float* grad, bool scaled, float scale,
                                             const AdamWCudaStep& s, int64_t i) {
  const AdamWElement e = adamw_element(param[i], exp_avg[i], exp_avg_sq[i], grad[i], scaled, scale, s);
  exp_avg[i] = e.exp_avg;
  exp_avg_sq[i] = e.exp_avg_sq;
  param[i] = e.param;
  if (param_bf16 != nullptr) reinterpret_cast<uint16_t*>(param_bf16)[i] = cuda::f32_to_bf16_bits(e.param);
}

__global__ void adamw_step_kernel(float* param, float* exp_avg, float* exp_avg_sq, __nv_bfloat16* param_bf16,
                                  const float* grad, const float* grad_scale, int64_t n, AdamWCudaStep s) {
  const float scale = grad_scale != nullptr ? *grad_scale : 1.0f;
  if (!isfinite(scale)) return;  // non-finite global norm: the step is skipped
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    adamw_scalar(param, exp_avg, exp_avg_sq, param_bf16, grad, grad_scale != nullptr, scale, s, i);
}

// ---- Multi-tensor kernel (adamw_multi_step_cuda)
constexpr int kMultiThreads = 256;
// float4 groups in flight per thread, and at least 4 blocks per SM (≤ 64 registers): the first version (unroll 4,
// 8192-element chunks, 102 registers, 2 blocks per SM) moved only ~1.8 TB/s in the H200 step (6.36 ms per step).
constexpr int kMultiUnroll = 2;
constexpr int kMultiMinBlocks = 4;
static_assert(kAdamWMultiChunk % 4 == 0, "chunks must keep float4 alignment");

// The table in the workspace: first_block [count + 1] int64, then the list (16-byte aligned).
size_t multi_list_offset(size_t count) { return ((count + 1) * sizeof(int64_t) + 15) / 16 * 16; }

__device__ __forceinline__ bool aligned(const void* p, uintptr_t bytes) {
  return (reinterpret_cast<uintptr_t>(p) & (bytes - 1)) == 0;
}

__global__ void __launch_bounds__(kMultiThreads, kMultiMinBlocks)
    adamw_multi_step_kernel(const int64_t* first_block, const AdamWCudaTensor* list, int count,
                            const float* grad_scale) {
  const float scale = grad_scale != nullptr ? *grad_scale : 1.0f;
  if (!isfinite(scale)) return;  // non-finite global norm: the step is skipped
  const bool scaled = grad_scale != nullptr;
  const int64_t b = blockIdx.x;
  const int t = block_tensor(first_block, count);
  const AdamWCudaTensor& e = list[t];
  const AdamWCudaStep s = e.step;
  const int64_t begin = (b - first_block[t]) * kAdamWMultiChunk;
  const int64_t end = min(begin + kAdamWMultiChunk, e.n);
  float* const param = e.param + begin;
  float* const exp_avg = e.exp_avg + begin;
  float* const exp_avg_sq = e.exp_avg_sq + begin;
  const float* const grad = e.grad + begin;
  __nv_bfloat16* const param_bf16 = e.param_bf16 != nullptr ? e.param_bf16 + begin : nullptr;
  const int64_t len = end - begin;
  // begin is a multiple of 4 elements, so the chunk is aligned when the tensor is.
  const bool vec = aligned(param, 16) && aligned(exp_avg, 16) && aligned(exp_avg_sq, 16) && aligned(grad, 16) &&
                   (param_bf16 == nullptr || aligned(param_bf16, 8));
  int64_t scalar_from = 0;
  if (vec) {
    const int64_t len4 = len / 4;
    auto* p4 = reinterpret_cast<float4*>(param);
    auto* m4 = reinterpret_cast<float4*>(exp_avg);
    auto* v4 = reinterpret_cast<float4*>(exp_avg_sq);
    const auto* g4 = reinterpret_cast<const float4*>(grad);
    auto* c4 = reinterpret_cast<uint2*>(param_bf16);
    for (int64_t base = threadIdx.x; base < len4; base += static_cast<int64_t>(kMultiThreads) * kMultiUnroll) {
      float4 P[kMultiUnroll], M[kMultiUnroll], V[kMultiUnroll], G[kMultiUnroll];
#pragma unroll
      for (int u = 0; u < kMultiUnroll; ++u) {
        const int64_t j = base + static_cast<int64_t>(u) * kMultiThreads;
        if (j < len4) {
          P[u] = p4[j];
          M[u] = m4[j];
          V[u] = v4[j];
          G[u] = g4[j];
        }
      }
#pragma unroll
      for (int u = 0; u < kMultiUnroll; ++u) {
        const int64_t j = base + static_cast<int64_t>(u) * kMultiThreads;
        if (j >= len4) continue;
        const AdamWElement x = adamw_element(P[u].x, M[u].x, V[u].x, G[u].x, scaled, scale, s);
        const AdamWElement y = adamw_element(P[u].y, M[u].y, V[u].y, G[u].y, scaled, scale, s);
        const AdamWElement z = adamw_element(P[u].z, M[u].z, V[u].z, G[u].z, scaled, scale, s);
        const AdamWElement w = adamw_element(P[u].w, M[u].w, V[u].w, G[u].w, scaled, scale, s);
        m4[j] = make_float4(x.exp_avg, y.exp_avg, z.exp_avg, w.exp_avg);
        v4[j] = make_float4(x.exp_avg_sq, y.exp_avg_sq, z.exp_avg_sq, w.exp_avg_sq);
        p4[j] = make_float4(x.param, y.param, z.param, w.param);
        if (c4 != nullptr) {
          uint2 packed;
          packed.x = cuda::f32_to_bf16_bits(x.param) | (static_cast<uint32_t>(cuda::f32_to_bf16_bits(y.param)) << 16);
          packed.y = cuda::f32_to_bf16_bits(z.param) | (static_cast<uint32_t>(cuda::f32_to_bf16_bits(w.param)) << 16);
          c4[j] = packed;
        }
      }
    }
    scalar_from = len4 * 4;
  }
  for (int64_t i = scalar_from + threadIdx.x; i < len; i += kMultiThreads)
    adamw_scalar(param, exp_avg, exp_avg_sq, param_bf16, grad, scaled, scale, s, i);
}

}  // namespace

AdamWCudaStep adamw_cuda_step(double lr, double weight_decay, double beta1, double beta2, double eps, int64_t step) {
  HLM_CHECK_INPUT(beta1 >= 0.0 && beta1 < 1.0 && beta2 >= 0.0 && beta2 < 1.0, "AdamW betas must lie in [0, 1), got (",
                  beta1, ", ", beta2, ")");
  HLM_CHECK_INPUT(eps >= 0.0, "AdamW eps must be non-negative, got ", eps);
  HLM_CHECK_INPUT(step >= 1, "AdamW step number must be at least 1, got ", step);
  const double bias_correction1 = 1.0 - std::pow(beta1, static_cast<double>(step));
  const double bias_correction2_sqrt = std::sqrt(1.0 - std::pow(beta2, static_cast<double>(step)));
  AdamWCudaStep s;
  s.beta1 = static_cast<float>(beta1);
  s.one_minus_beta1 = static_cast<float>(1.0 - beta1);
  s.beta2 = static_cast<float>(beta2);
  s.one_minus_beta2 = static_cast<float>(1.0 - beta2);
  s.eps = static_cast<float>(eps);
  s.decay = static_cast<float>(1.0 - lr * weight_decay);
  s.step_size = static_cast<float>(lr / bias_correction1);
  s.bias_correction2_sqrt = static_cast<float>(bias_correction2_sqrt);
  return s;
}

void adamw_step_cuda(float* param, float* exp_avg, float* exp_avg_sq, __nv_bfloat16* param_bf16, const float* grad,
                     const float* grad_scale, int64_t n, const AdamWCudaStep& step, cudaStream_t stream) {
  HLM_CHECK(n >= 0, "adamw_step_cuda: negative element count ", n);
  if (n == 0) return;
  adamw_step_kernel<<<cuda::grid_blocks(n), cuda::kElementwiseThreads, 0, stream>>>(param, exp_avg, exp_avg_sq,
                                                                                   param_bf16, grad, grad_scale, n,
                                                                                   step);
  HLM_CUDA_CHECK_LAUNCH();
}

size_t adamw_multi_step_cuda_workspace_bytes(size_t count) {
  return multi_list_offset(count) + count * sizeof(AdamWCudaTensor);
}

void adamw_multi_step_cuda(const AdamWCudaTensor* tensors, size_t count, const float* grad_scale, void* workspace,
                           size_t workspace_bytes, void* host_staging, cudaStream_t stream) {
  HLM_CHECK(count <= static_cast<size_t>(INT_MAX), "adamw_multi_step_cuda: ", count, " tensors");
  if (count == 0) return;
  HLM_CHECK(tensors != nullptr, "adamw_multi_step_cuda: no list");
  const size_t bytes = adamw_multi_step_cuda_workspace_bytes(count);
  HLM_CHECK(workspace != nullptr && workspace_bytes >= bytes && host_staging != nullptr,
            "adamw_multi_step_cuda: workspace of ", workspace_bytes, " bytes (needs ", bytes, ") or no host staging");
  auto* first_block = static_cast<int64_t*>(host_staging);
  int64_t blocks = 0;
  for (size_t i = 0; i < count; ++i) {
    const AdamWCudaTensor& t = tensors[i];
    HLM_CHECK(t.n >= 0 && (t.n == 0 || (t.param != nullptr && t.exp_avg != nullptr && t.exp_avg_sq != nullptr &&
                                        t.grad != nullptr)),
              "adamw_multi_step_cuda: tensor ", i, " has no data or a negative size ", t.n);
    first_block[i] = blocks;
    blocks += (t.n + kAdamWMultiChunk - 1) / kAdamWMultiChunk;
  }
  first_block[count] = blocks;
  if (blocks == 0) return;  // only empty tensors
  HLM_CHECK(blocks <= INT_MAX, "adamw_multi_step_cuda: ", blocks, " chunks exceed one grid");
  std::memcpy(static_cast<char*>(host_staging) + multi_list_offset(count), tensors, count * sizeof(AdamWCudaTensor));
  HLM_CUDA_CHECK(cudaMemcpyAsync(workspace, host_staging, bytes, cudaMemcpyHostToDevice, stream));
  const auto* table = static_cast<const char*>(workspace);
  adamw_multi_step_kernel<<<static_cast<unsigned>(blocks), kMultiThreads, 0, stream>>>(
      reinterpret_cast<const int64_t*>(table), reinterpret_cast<const AdamWCudaTensor*>(table + multi_list_offset(count)),
      static_cast<int>(count), grad_scale);
  HLM_CUDA_CHECK_LAUNCH();
}

}  // namespace hlm
