// Depthwise causal conv CUDA kernels and launchers (contract: causal_conv1d.h, causal_conv1d_cuda.h).
//   forward:  one thread per (token, channel): binary search of the token's sequence in cu_seqlens, the K-tap sum in
//             tap order, optional SiLU; one thread per (sequence, channel) builds state_out in registers before
//             writing it (so it may alias state_in).
//   backward: (1) dpre [T, C] = dy · silu'(pre) (pre recomputed) into the workspace;
//             (2) dx = transposed stencil of dpre inside each sequence;
//             (3) dw [C, K] = Σ_t dpre · in by the two-pass column sum (columns = C·K) into a zeroed dw;
//             (4) d_state_in per (sequence, channel, slot).
// Non-goals for now: shared-memory tiling of the taps, fusing the conv with the projection or the SiLU consumer.
#include "backend/cuda/cuda_common.cuh"
#include "core/error.h"
#include "ops/causal_conv1d/causal_conv1d_cuda.h"

namespace hlm {

namespace {

constexpr int64_t kMaxKernel = causal_conv1d_cuda_max_kernel();

struct Geometry {
  int64_t T, C, K, N;
};

// Index of the sequence holding token t: the last s with cu[s] ≤ t (empty sequences are skipped).
__device__ int64_t sequence_of(const int64_t* cu, int64_t n_seqs, int64_t t) {
  int64_t lo = 0, hi = n_seqs + 1;  // first index with cu[i] > t lies in [lo, hi]
  while (lo < hi) {
    const int64_t mid = (lo + hi) / 2;
    if (cu[mid] > t)
      hi = mid;
    else
      lo = mid + 1;
  }
  return lo - 1;
}

// Raw input at absolute position p ≥ start − (K−1) for a token of sequence s.
__device__ __forceinline__ float input_at(const float* x, const float* state_in, int64_t p, int64_t start, int64_t s,
                                          int64_t c, const Geometry& g) {
  if (p >= start) return x[p * g.C + c];
  if (state_in == nullptr) return 0.0f;
  const int64_t Km1 = g.K - 1;
  return state_in[(s * g.C + c) * Km1 + (Km1 + p - start)];
}

__device__ float pre_activation(const float* x, const float* w, const float* state_in, int64_t t, int64_t start,
                                int64_t s, int64_t c, const Geometry& g) {
  float acc = 0.0f;
  for (int64_t j = 0; j < g.K; ++j)
    acc = fmaf(w[c * g.K + j], input_at(x, state_in, t - (g.K - 1) + j, start, s, c, g), acc);
  return acc;
}

__device__ __forceinline__ float sigmoid(float v) { return 1.0f / (1.0f + expf(-v)); }

__global__ void conv_forward_kernel(float* y, const float* x, const float* w, const float* state_in,
                                    const int64_t* cu, Geometry g, bool silu) {
  const int64_t n = g.T * g.C;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = i / g.C, c = i - t * g.C, s = sequence_of(cu, g.N, t);
    const float pre = pre_activation(x, w, state_in, t, cu[s], s, c, g);
    y[i] = silu ? pre / (1.0f + expf(-pre)) : pre;
  }
}

__global__ void conv_state_out_kernel(float* state_out, const float* x, const float* state_in, const int64_t* cu,
                                      Geometry g) {
  const int64_t Km1 = g.K - 1, n = g.N * g.C;
  for (int64_t item = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; item < n;
       item += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t s = item / g.C, c = item - s * g.C, start = cu[s], end = cu[s + 1];
    float row[kMaxKernel - 1];  // the new state row, read completely before writing (state_out may alias state_in)
    for (int64_t i = 0; i < Km1; ++i) row[i] = input_at(x, state_in, end - Km1 + i, start, s, c, g);
    for (int64_t i = 0; i < Km1; ++i) state_out[item * Km1 + i] = row[i];
  }
}

__global__ void conv_dpre_kernel(float* dpre, const float* dy, const float* x, const float* w, const float* state_in,
                                 const int64_t* cu, Geometry g, bool silu) {
  const int64_t n = g.T * g.C;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float d = dy[i];
    if (silu) {
      const int64_t t = i / g.C, c = i - t * g.C, s = sequence_of(cu, g.N, t);
      const float pre = pre_activation(x, w, state_in, t, cu[s], s, c, g);
      d *= sigmoid(pre) * (1.0f + pre * sigmoid(-pre));
    }
    dpre[i] = d;
  }
}

__global__ void conv_dx_kernel(float* dx, const float* dpre, const float* w, const int64_t* cu, Geometry g) {
  const int64_t n = g.T * g.C;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = i / g.C, c = i - t * g.C, end = cu[sequence_of(cu, g.N, t) + 1];
    float acc = 0.0f;
    for (int64_t j = 0; j < g.K; ++j) {
      const int64_t tp = t + (g.K - 1) - j;  // the output token that reads x[t] through tap j
      if (tp < end) acc = fmaf(w[c * g.K + j], dpre[tp * g.C + c], acc);
    }
    dx[i] = acc;
  }
}

__global__ void conv_dstate_kernel(float* d_state, const float* dpre, const float* w, const int64_t* cu, Geometry g) {
  const int64_t Km1 = g.K - 1, n = g.N * g.C * Km1;
  for (int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; idx < n;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t item = idx / Km1, i = idx - item * Km1, s = item / g.C, c = item - s * g.C;
    const int64_t start = cu[s], len = cu[s + 1] - start;
    float acc = 0.0f;
    for (int64_t m = 0; m <= i && m < len; ++m) acc = fmaf(w[c * g.K + i - m], dpre[(start + m) * g.C + c], acc);
    d_state[idx] = acc;
  }
}

// dw column sum term: row = token t, column = c·K + j.
struct DwTerm {
  const float *dpre, *x, *state_in;
  const int64_t* cu;
  Geometry g;
  __device__ float operator()(int64_t t, int64_t col) const {
    const int64_t c = col / g.K, j = col - c * g.K, s = sequence_of(cu, g.N, t);
    return dpre[t * g.C + c] * input_at(x, state_in, t - (g.K - 1) + j, cu[s], s, c, g);
  }
};

Geometry check_params(const CausalConv1dCudaParams& p) {
  HLM_CHECK(p.total_tokens >= 0 && p.channels > 0 && p.kernel >= 1 && p.n_seqs >= 0,
            "causal_conv1d_cuda: bad shape T=", p.total_tokens, " C=", p.channels, " K=", p.kernel, " N=", p.n_seqs);
  HLM_CHECK(p.kernel <= kMaxKernel, "causal_conv1d_cuda: kernel ", p.kernel, " above the CUDA limit ", kMaxKernel);
  return {p.total_tokens, p.channels, p.kernel, p.n_seqs};
}

ColumnSumPlan plan_of(const CausalConv1dCudaParams& p) {
  return column_sum_plan(p.total_tokens, p.channels * p.kernel, ~size_t{0} / 2);
}

}  // namespace

void causal_conv1d_forward_cuda(float* y, float* state_out, const float* x, const float* w, const float* state_in,
                                const int64_t* cu_seqlens, const CausalConv1dCudaParams& p, cudaStream_t stream) {
  const Geometry g = check_params(p);
  HLM_CHECK(y != x || p.total_tokens == 0, "causal_conv1d_forward_cuda: y may not alias x");
  if (p.total_tokens > 0) {
    conv_forward_kernel<<<cuda::grid_blocks(g.T * g.C), cuda::kElementwiseThreads, 0, stream>>>(
        y, x, w, state_in, cu_seqlens, g, p.silu);
    HLM_CUDA_CHECK_LAUNCH();
  }
  if (state_out != nullptr && g.K > 1 && g.N > 0) {
    conv_state_out_kernel<<<cuda::grid_blocks(g.N * g.C), cuda::kElementwiseThreads, 0, stream>>>(
        state_out, x, state_in, cu_seqlens, g);
    HLM_CUDA_CHECK_LAUNCH();
  }
}

size_t causal_conv1d_backward_cuda_workspace_bytes(const CausalConv1dCudaParams& p) {
  const Geometry g = check_params(p);
  return cuda::align_up_256(static_cast<size_t>(g.T * g.C) * sizeof(float)) + plan_of(p).scratch_bytes;
}

void causal_conv1d_backward_cuda(float* dx, float* dw, float* d_state_in, const float* dy, const float* x,
                                 const float* w, const float* state_in, const int64_t* cu_seqlens,
                                 const CausalConv1dCudaParams& p, void* workspace, size_t workspace_bytes,
                                 cudaStream_t stream) {
  const Geometry g = check_params(p);
  const size_t dpre_bytes = cuda::align_up_256(static_cast<size_t>(g.T * g.C) * sizeof(float));
  const ColumnSumPlan plan = plan_of(p);
  HLM_CHECK(workspace_bytes >= dpre_bytes + plan.scratch_bytes && (workspace != nullptr || g.T == 0),
            "causal_conv1d_backward_cuda: workspace of ", workspace_bytes, " bytes, needs ",
            dpre_bytes + plan.scratch_bytes);
  if (dw != nullptr) HLM_CUDA_CHECK(cudaMemsetAsync(dw, 0, static_cast<size_t>(g.C * g.K) * sizeof(float), stream));
  const bool want_dstate = d_state_in != nullptr && state_in != nullptr && g.K > 1 && g.N > 0;
  if (g.T == 0) {  // no tokens: every state gradient is zero
    if (want_dstate) {
      const size_t bytes = static_cast<size_t>(g.N * g.C * (g.K - 1)) * sizeof(float);
      HLM_CUDA_CHECK(cudaMemsetAsync(d_state_in, 0, bytes, stream));
    }
    return;
  }
  auto* dpre = static_cast<float*>(workspace);
  const unsigned blocks = cuda::grid_blocks(g.T * g.C);
  conv_dpre_kernel<<<blocks, cuda::kElementwiseThreads, 0, stream>>>(dpre, dy, x, w, state_in, cu_seqlens, g, p.silu);
  HLM_CUDA_CHECK_LAUNCH();
  conv_dx_kernel<<<blocks, cuda::kElementwiseThreads, 0, stream>>>(dx, dpre, w, cu_seqlens, g);
  HLM_CUDA_CHECK_LAUNCH();
  if (dw != nullptr)
    cuda::column_sum_accumulate(dw, DwTerm{dpre, x, state_in, cu_seqlens, g}, g.T, g.C * g.K, plan,
                                reinterpret_cast<float*>(static_cast<char*>(workspace) + dpre_bytes), stream);
  if (want_dstate) {
    conv_dstate_kernel<<<cuda::grid_blocks(g.N * g.C * (g.K - 1)), cuda::kElementwiseThreads, 0, stream>>>(
        d_state_in, dpre, w, cu_seqlens, g);
    HLM_CUDA_CHECK_LAUNCH();
  }
}

}  // namespace hlm
