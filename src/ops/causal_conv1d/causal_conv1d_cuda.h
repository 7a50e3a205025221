// Depthwise causal conv (+ SiLU) on CUDA: launchers for the contract in causal_conv1d.h (packed sequences with
// cu_seqlens, optional conv state in and out; same formulas, aliasing rules and overwrite semantics), f32, raw device
// pointers (cu_seqlens too), queued on `stream`, no synchronization.
// cu_seqlens must satisfy the contract (cu[0] = 0, non-decreasing, cu[N] = T); the kernels do not check it (the CPU
// reference throws on a bad one; check on the host before uploading).
// Numerics (the CPU reference accumulates in double): each pre-activation is a K-term fp32 FMA chain in tap order;
// silu(p) = p / (1 + e^-p) with expf (≤ 2 ulp); silu'(p) = σ(p)·(1 + p·σ(−p)) (no 1 − σ cancellation). dw is the
// deterministic two-pass column sum over tokens (backend/cuda/column_sum.h); state copies are exact.
// Limits: kernel ≤ causal_conv1d_cuda_max_kernel() (GDN uses 4).
// Shapes: x, y, dy, dx [T, C]; w, dw [C, K]; state_in, state_out, d_state_in [N, C, K-1]; cu_seqlens int64 [N+1].
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace hlm {

struct CausalConv1dCudaParams {
  int64_t total_tokens = 0;  // T
  int64_t channels = 0;      // C
  int64_t kernel = 0;        // K ≥ 1
  int64_t n_seqs = 0;        // N
  bool silu = true;
};

constexpr int64_t causal_conv1d_cuda_max_kernel() { return 64; }

// y = [silu](conv(x)); y may not alias x. state_out (nullable) receives each sequence's last K-1 raw inputs and may
// alias state_in (nullable = zeros).
void causal_conv1d_forward_cuda(float* y, float* state_out, const float* x, const float* w, const float* state_in,
                                const int64_t* cu_seqlens, const CausalConv1dCudaParams& p, cudaStream_t stream);

// Bytes of device scratch causal_conv1d_backward_cuda needs (dpre [T, C] and the dw partials).
size_t causal_conv1d_backward_cuda_workspace_bytes(const CausalConv1dCudaParams& p);

// dx OVERWRITTEN; dw [C, K] OVERWRITTEN (nullptr = not wanted); d_state_in OVERWRITTEN when both it and state_in are
// given. No output may alias an input. `workspace` holds causal_conv1d_backward_cuda_workspace_bytes(p) bytes, used
// only by work on `stream`.
void causal_conv1d_backward_cuda(float* dx, float* dw, float* d_state_in, const float* dy, const float* x,
                                 const float* w, const float* state_in, const int64_t* cu_seqlens,
                                 const CausalConv1dCudaParams& p, void* workspace, size_t workspace_bytes,
                                 cudaStream_t stream);

}  // namespace hlm
