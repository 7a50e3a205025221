// Simple GLA (Lightning Attention-2) CUDA kernels and launchers (contract: simple_gla.h, simple_gla_cuda.h): the
// chunked form (chunk states, state scan, outputs), the token recurrence (decode), and the Lightning mixer's group
// RMSNorm + sigmoid gate. Plain fp32 SIMT code with shared-memory tiles, the structure of ops/mamba2_ssd/mamba2_ssd.cu
// (the same scan with dt = 1, a constant per-head decay, k for B, q for C and no D skip); tensor cores and bf16
// operands are not used yet.
#include <algorithm>
#include <cmath>

#include "backend/cuda/cuda_error.h"
#include "backend/cuda/varlen_chunks.cuh"
#include "core/error.h"
#include "ops/simple_gla/simple_gla_cuda.h"

namespace hlm {

namespace {

constexpr int kThreads = 256;
constexpr int kStateElemsPerThread = 8;                      // chunk-state kernel: registers per thread
constexpr int kStateTile = kThreads * kStateElemsPerThread;  // state elements per chunk-state block
constexpr int kTokTile = 32;                                 // tokens per shared-memory tile
constexpr int kRows = 32;                                    // output rows per output block
constexpr int kRecurrentThreads = 128;                       // recurrence: state columns in flight per block

int64_t chunk_slots(const SimpleGlaCudaParams& p) { return varlen_chunk_slots(p.total_tokens, p.chunk, p.n_seqs); }

float scale_of(const SimpleGlaCudaParams& p) {
  // As the reference for T = float: 1 / sqrt(dk) in double, rounded once.
  return p.scale != 0.0f ? p.scale : static_cast<float>(1.0 / std::sqrt(static_cast<double>(p.key_dim)));
}

// ---- Chunked form

// grid (slots, H, ceil(dk·dv / kStateTile)): Ŝ[a][b] = Σ_u (λ^{len−1−u}·k_u[a])·v_u[b], u in token order.
__global__ void __launch_bounds__(kThreads) simple_gla_chunk_state_kernel(float* ws, SimpleGlaCudaInputs in,
                                                                          SimpleGlaCudaParams p) {
  extern __shared__ float smem[];
  const int64_t slot = blockIdx.x, h = blockIdx.y;
  int64_t seq, start, len;
  if (!varlen_locate_chunk(slot, in.cu_seqlens, p.n_seqs, p.chunk, seq, start, len)) return;
  const int64_t K = p.key_dim, V = p.value_dim, H = p.heads;
  const float g = in.g[h];
  float* ks = smem;               // [kTokTile][K]: weighted k
  float* vs = smem + kTokTile * K;  // [kTokTile][V]
  float acc[kStateElemsPerThread];
#pragma unroll
  for (int i = 0; i < kStateElemsPerThread; ++i) acc[i] = 0.0f;
  const int64_t base = static_cast<int64_t>(blockIdx.z) * kStateTile + threadIdx.x;
  for (int64_t u0 = 0; u0 < len; u0 += kTokTile) {
    const int64_t nu = min(static_cast<int64_t>(kTokTile), len - u0);
    __syncthreads();
    for (int64_t j = threadIdx.x; j < nu * K; j += blockDim.x) {
      const int64_t u = j / K, a = j % K, t = start + u0 + u;
      const float wu = expf(g * static_cast<float>(len - 1 - (u0 + u)));
      ks[j] = wu * in.k[(t * H + h) * K + a];
    }
    for (int64_t j = threadIdx.x; j < nu * V; j += blockDim.x) {
      const int64_t u = j / V, b = j % V, t = start + u0 + u;
      vs[j] = in.v[(t * H + h) * V + b];
    }
    __syncthreads();
#pragma unroll
    for (int i = 0; i < kStateElemsPerThread; ++i) {
      const int64_t e = base + i * kThreads;
      if (e >= K * V) break;
      const int64_t a = e / V, b = e % V;
      float s = acc[i];
      for (int64_t u = 0; u < nu; ++u) s = fmaf(ks[u * K + a], vs[u * V + b], s);
      acc[i] = s;
    }
  }
  float* out = ws + (slot * H + h) * K * V;
#pragma unroll
  for (int i = 0; i < kStateElemsPerThread; ++i) {
    const int64_t e = base + i * kThreads;
    if (e < K * V) out[e] = acc[i];
  }
}

// grid (N, H): S_k = λ^{n_k}·S_{k−1} + Ŝ_k in chunk order; chunk k's slot gets S_{k−1}; the final S to state_out.
// Each thread reads its elements of state_in before writing the same elements of state_out (they may alias).
__global__ void __launch_bounds__(kThreads) simple_gla_state_scan_kernel(float* state_out, float* ws,
                                                                         SimpleGlaCudaInputs in,
                                                                         SimpleGlaCudaParams p) {
  const int64_t seq = blockIdx.x, h = blockIdx.y, Q = p.chunk, KV = p.key_dim * p.value_dim;
  int64_t first = 0;
  for (int64_t s = 0; s < seq; ++s) first += (in.cu_seqlens[s + 1] - in.cu_seqlens[s] + Q - 1) / Q;
  const int64_t len = in.cu_seqlens[seq + 1] - in.cu_seqlens[seq], chunks = (len + Q - 1) / Q;
  const int64_t row = (seq * p.heads + h) * KV;
  const float g = in.g[h];
  for (int64_t e = threadIdx.x; e < KV; e += blockDim.x) {
    float S = in.state_in != nullptr ? in.state_in[row + e] : 0.0f;
    for (int64_t k = 0; k < chunks; ++k) {
      const int64_t L = min(Q, len - k * Q);
      float* slot_state = ws + ((first + k) * p.heads + h) * KV + e;
      const float local = *slot_state;
      *slot_state = S;
      S = fmaf(expf(g * static_cast<float>(L)), S, local);
    }
    if (state_out != nullptr) state_out[row + e] = S;
  }
}

// grid (slots, H, ceil(Q / kRows)): rows i of the chunk, every b:
//   o_i[b] = scale·(λ^{i+1}·Σ_a q_i[a]·S_prev[a][b] + Σ_{j ≤ i} ((q_i·k_j)·λ^{i−j})·v_j[b])
__global__ void __launch_bounds__(kThreads) simple_gla_chunk_output_kernel(float* o, const float* ws,
                                                                           SimpleGlaCudaInputs in,
                                                                           SimpleGlaCudaParams p, float scale) {
  extern __shared__ float smem[];
  const int64_t slot = blockIdx.x, h = blockIdx.y, t0 = static_cast<int64_t>(blockIdx.z) * kRows;
  int64_t seq, start, len;
  if (!varlen_locate_chunk(slot, in.cu_seqlens, p.n_seqs, p.chunk, seq, start, len)) return;
  if (t0 >= len) return;
  const int64_t K = p.key_dim, V = p.value_dim, H = p.heads, KB = K + 1;
  const int64_t rows = min(static_cast<int64_t>(kRows), len - t0);
  const float g = in.g[h];
  const float* S = ws + (slot * H + h) * K * V;  // the state entering this chunk
  float* qs = smem;                   // [kRows][K]
  float* ks = qs + kRows * K;         // [kTokTile][K + 1]
  float* vs = ks + kTokTile * KB;     // [kTokTile][V]
  float* wt = vs + kTokTile * V;      // [kRows][kTokTile]
  float* ys = wt + kRows * kTokTile;  // [kRows][V]
  for (int64_t j = threadIdx.x; j < rows * K; j += blockDim.x) {
    const int64_t r = j / K, a = j % K;
    qs[j] = in.q[((start + t0 + r) * H + h) * K + a];
  }
  __syncthreads();
  for (int64_t j = threadIdx.x; j < rows * V; j += blockDim.x) {
    const int64_t r = j / V, b = j % V;
    const float* q = qs + r * K;
    float inter = 0.0f;
    for (int64_t a = 0; a < K; ++a) inter = fmaf(q[a], S[a * V + b], inter);
    ys[j] = expf(g * static_cast<float>(t0 + r + 1)) * inter;
  }
  const int64_t u_end = t0 + rows;  // tokens u < u_end reach these rows
  for (int64_t u0 = 0; u0 < u_end; u0 += kTokTile) {
    const int64_t nu = min(static_cast<int64_t>(kTokTile), u_end - u0);
    __syncthreads();
    for (int64_t j = threadIdx.x; j < nu * K; j += blockDim.x) {
      const int64_t u = j / K, a = j % K;
      ks[u * KB + a] = in.k[((start + u0 + u) * H + h) * K + a];
    }
    for (int64_t j = threadIdx.x; j < nu * V; j += blockDim.x) {
      const int64_t u = j / V, b = j % V;
      vs[j] = in.v[((start + u0 + u) * H + h) * V + b];
    }
    __syncthreads();
    for (int64_t j = threadIdx.x; j < rows * kTokTile; j += blockDim.x) {
      const int64_t r = j / kTokTile, u = j % kTokTile, t = t0 + r, uu = u0 + u;
      float w = 0.0f;
      if (u < nu && uu <= t) {  // masked terms are skipped, not multiplied by 0 (an Inf there would give NaN)
        const float* q = qs + r * K;
        const float* k = ks + u * KB;
        float d = 0.0f;
        for (int64_t a = 0; a < K; ++a) d = fmaf(q[a], k[a], d);
        w = d * expf(g * static_cast<float>(t - uu));
      }
      wt[j] = w;
    }
    __syncthreads();
    for (int64_t j = threadIdx.x; j < rows * V; j += blockDim.x) {
      const int64_t r = j / V, b = j % V, t = t0 + r;
      const int64_t last = min(nu, t - u0 + 1);  // u0 + u ≤ t
      float acc = ys[j];
      for (int64_t u = 0; u < last; ++u) acc = fmaf(wt[r * kTokTile + u], vs[u * V + b], acc);
      ys[j] = acc;
    }
  }
  __syncthreads();
  for (int64_t j = threadIdx.x; j < rows * V; j += blockDim.x) {
    const int64_t r = j / V, b = j % V, t = start + t0 + r;
    o[(t * H + h) * V + b] = scale * ys[j];
  }
}

// ---- Token recurrence: grid (N, H), kRecurrentThreads threads; thread l owns the state columns b ≡ l.
__global__ void __launch_bounds__(kRecurrentThreads) simple_gla_recurrent_kernel(float* o, float* state,
                                                                                 SimpleGlaCudaInputs in,
                                                                                 SimpleGlaCudaParams p, float scale) {
  const int64_t seq = blockIdx.x, h = blockIdx.y, K = p.key_dim, V = p.value_dim, H = p.heads;
  float* S = state + (seq * H + h) * K * V;
  const float* S0 = in.state_in != nullptr ? in.state_in + (seq * H + h) * K * V : nullptr;
  const float lambda = expf(in.g[h]);
  for (int64_t b = threadIdx.x; b < V; b += blockDim.x) {
    if (in.state_in != state)
      for (int64_t a = 0; a < K; ++a) S[a * V + b] = S0 != nullptr ? S0[a * V + b] : 0.0f;
    for (int64_t t = in.cu_seqlens[seq]; t < in.cu_seqlens[seq + 1]; ++t) {
      const float* q = in.q + (t * H + h) * K;
      const float* k = in.k + (t * H + h) * K;
      const float vb = in.v[(t * H + h) * V + b];
      float acc = 0.0f;
      for (int64_t a = 0; a < K; ++a) {
        const float s = fmaf(lambda, S[a * V + b], k[a] * vb);
        S[a * V + b] = s;
        acc = fmaf(q[a], s, acc);
      }
      o[(t * H + h) * V + b] = scale * acc;
    }
  }
}

// ---- Group RMSNorm + sigmoid gate: grid T·G blocks, one per (token, group) row of `width` channels.
__global__ void __launch_bounds__(kThreads) lightning_group_norm_gate_kernel(float* y, const float* o,
                                                                             const float* gate, const float* weight,
                                                                             int64_t channels, int64_t groups,
                                                                             float eps) {
  __shared__ float partial[kThreads / 32];
  const int64_t row = blockIdx.x, t = row / groups, grp = row % groups, width = channels / groups;
  const int64_t base = t * channels + grp * width;
  float sq = 0.0f;
  for (int64_t j = threadIdx.x; j < width; j += blockDim.x) sq = fmaf(o[base + j], o[base + j], sq);
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) sq += __shfl_xor_sync(0xffffffffu, sq, off);
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = sq;
  __syncthreads();
  float total = 0.0f;
  for (int w = 0; w < kThreads / 32; ++w) total += partial[w];
  const float inv = 1.0f / sqrtf(total / static_cast<float>(width) + eps);
  for (int64_t j = threadIdx.x; j < width; j += blockDim.x) {
    const float s = 1.0f / (1.0f + expf(-gate[base + j]));
    y[base + j] = weight[grp * width + j] * (o[base + j] * inv) * s;
  }
}

void check_params(const SimpleGlaCudaParams& p) {
  HLM_CHECK(p.heads > 0 && p.key_dim > 0 && p.value_dim > 0 && p.total_tokens >= 0 && p.n_seqs >= 0,
            "simple_gla (CUDA): bad shape");
  HLM_CHECK_INPUT(p.key_dim <= simple_gla_cuda_max_dim() && p.value_dim <= simple_gla_cuda_max_dim(),
                  "simple GLA key dim ", p.key_dim, " / value dim ", p.value_dim, " exceed the CUDA limit of ",
                  simple_gla_cuda_max_dim());
}

size_t state_smem_bytes(const SimpleGlaCudaParams& p) {
  return sizeof(float) * static_cast<size_t>(kTokTile * (p.key_dim + p.value_dim));
}
size_t output_smem_bytes(const SimpleGlaCudaParams& p) {
  const int64_t K = p.key_dim, V = p.value_dim;
  return sizeof(float) *
         static_cast<size_t>(kRows * K + kTokTile * (K + 1) + kTokTile * V + kRows * kTokTile + kRows * V);
}

}  // namespace

size_t simple_gla_chunked_cuda_workspace_bytes(const SimpleGlaCudaParams& p) {
  return sizeof(float) * static_cast<size_t>(chunk_slots(p) * p.heads * p.key_dim * p.value_dim);
}

void simple_gla_chunked_forward_cuda(float* o, float* state_out, const SimpleGlaCudaInputs& in,
                                     const SimpleGlaCudaParams& p, void* workspace, size_t workspace_bytes,
                                     cudaStream_t stream) {
  check_params(p);
  HLM_CHECK_INPUT(p.chunk >= 1 && p.chunk <= simple_gla_cuda_max_chunk(), "simple GLA chunk size ", p.chunk,
                  " outside the CUDA range [1, ", simple_gla_cuda_max_chunk(), "]");
  if (p.n_seqs == 0) return;
  HLM_CHECK(workspace_bytes >= simple_gla_chunked_cuda_workspace_bytes(p), "simple_gla (CUDA): workspace too small");
  float* ws = static_cast<float*>(workspace);
  const int64_t slots = chunk_slots(p);
  const size_t smem_s = state_smem_bytes(p), smem_o = output_smem_bytes(p);
  if (p.total_tokens > 0) {
    // > 48 KiB of dynamic shared memory needs the opt-in (set once per size seen; not a stream operation).
    static size_t state_optin = 0, output_optin = 0;
    if (smem_s > 48 * 1024 && smem_s > state_optin) {
      HLM_CUDA_CHECK(cudaFuncSetAttribute(simple_gla_chunk_state_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          static_cast<int>(smem_s)));
      state_optin = smem_s;
    }
    if (smem_o > 48 * 1024 && smem_o > output_optin) {
      HLM_CUDA_CHECK(cudaFuncSetAttribute(simple_gla_chunk_output_kernel,
                                          cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem_o)));
      output_optin = smem_o;
    }
    const dim3 gs(static_cast<unsigned>(slots), static_cast<unsigned>(p.heads),
                  static_cast<unsigned>((p.key_dim * p.value_dim + kStateTile - 1) / kStateTile));
    simple_gla_chunk_state_kernel<<<gs, kThreads, smem_s, stream>>>(ws, in, p);
    HLM_CUDA_CHECK_LAUNCH();
  }
  simple_gla_state_scan_kernel<<<dim3(static_cast<unsigned>(p.n_seqs), static_cast<unsigned>(p.heads)), kThreads, 0,
                                 stream>>>(state_out, ws, in, p);
  HLM_CUDA_CHECK_LAUNCH();
  if (p.total_tokens > 0) {
    const dim3 go(static_cast<unsigned>(slots), static_cast<unsigned>(p.heads),
                  static_cast<unsigned>((p.chunk + kRows - 1) / kRows));
    simple_gla_chunk_output_kernel<<<go, kThreads, smem_o, stream>>>(o, ws, in, p, scale_of(p));
    HLM_CUDA_CHECK_LAUNCH();
  }
}

void simple_gla_recurrent_forward_cuda(float* o, float* state_out, const SimpleGlaCudaInputs& in,
                                       const SimpleGlaCudaParams& p, cudaStream_t stream) {
  check_params(p);
  if (p.n_seqs == 0) return;
  HLM_CHECK(state_out != nullptr, "simple_gla (CUDA): the recurrence runs in state_out, which is required");
  simple_gla_recurrent_kernel<<<dim3(static_cast<unsigned>(p.n_seqs), static_cast<unsigned>(p.heads)),
                                kRecurrentThreads, 0, stream>>>(o, state_out, in, p, scale_of(p));
  HLM_CUDA_CHECK_LAUNCH();
}

void lightning_group_norm_gate_cuda(float* y, const float* o, const float* gate, const float* weight, int64_t tokens,
                                    int64_t channels, int64_t groups, float eps, cudaStream_t stream) {
  HLM_CHECK(groups > 0 && channels % groups == 0, "lightning group norm: ", channels, " channels in ", groups,
            " groups");
  if (tokens == 0) return;
  lightning_group_norm_gate_kernel<<<static_cast<unsigned>(tokens * groups), kThreads, 0, stream>>>(
      y, o, gate, weight, channels, groups, eps);
  HLM_CUDA_CHECK_LAUNCH();
}

}  // namespace hlm
