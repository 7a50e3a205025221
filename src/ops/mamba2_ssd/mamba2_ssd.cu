// Mamba-2 SSD scan CUDA kernels and launchers (contract: mamba2_ssd.h, mamba2_ssd_cuda.h): the chunked form (prep,
// chunk states, state scan, outputs) and the token recurrence (decode), plus the mixer's two elementwise steps.
// A first version in plain fp32 SIMT code with shared-memory tiles: correct for any P, N ≤ 256 and chunk ≤ 1024, and
// parallel over (chunk, head) in prefill; tensor cores and bf16 operands are not used yet.
#include <algorithm>

#include "backend/cuda/cuda_error.h"
#include "backend/cuda/varlen_chunks.cuh"
#include "core/error.h"
#include "ops/mamba2_ssd/mamba2_ssd_cuda.h"

namespace hlm {

namespace {

constexpr int kThreads = 256;
constexpr int kStateElemsPerThread = 8;                             // chunk-state kernel: registers per thread
constexpr int kStateTile = kThreads * kStateElemsPerThread;         // state elements per chunk-state block
constexpr int kTokTile = 32;                                        // tokens per shared-memory tile
constexpr int kRows = 32;                                           // output rows per output block
constexpr int kRecurrentWarps = 4;                                  // recurrence: warps (state rows in flight) per block

__device__ __forceinline__ float softplus_f(float v) { return v > 20.0f ? v : log1pf(expf(v)); }
__device__ __forceinline__ float silu_f(float v) { return v / (1.0f + expf(-v)); }

__device__ __forceinline__ float dt_of(float raw, float bias, const Mamba2CudaParams& p) {
  float dt = softplus_f(raw + bias);
  // As std::clamp in the reference: a NaN stays NaN (both comparisons false).
  if (p.dt_clamp) dt = dt < p.dt_lo ? p.dt_lo : (dt > p.dt_hi ? p.dt_hi : dt);
  return dt;
}

// The workspace: per (slot, head) dt [Q] and cumulative decay [Q]; then per (slot, head) a state [P, N].
struct Workspace {
  float* dt;     // [slots, nh, Q]
  float* cum;    // [slots, nh, Q]
  float* state;  // [slots, nh, P, N]
};

int64_t chunk_slots(const Mamba2CudaParams& p) { return varlen_chunk_slots(p.total_tokens, p.chunk, p.n_seqs); }

Workspace carve(void* ws, const Mamba2CudaParams& p) {
  const int64_t slots = chunk_slots(p), per = slots * p.heads * p.chunk;
  float* f = static_cast<float*>(ws);
  return {f, f + per, f + 2 * per};
}

// ---- Chunked form

// One thread per (slot, head): dt and c_l = Σ_{s ≤ l} dt_s·A (serial, in token order).
__global__ void mamba2_prep_kernel(Workspace w, Mamba2CudaInputs in, Mamba2CudaParams p, int64_t slots) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= slots * p.heads) return;
  const int64_t slot = i / p.heads, h = i % p.heads;
  int64_t seq, start, len;
  if (!varlen_locate_chunk(slot, in.cu_seqlens, p.n_seqs, p.chunk, seq, start, len)) return;
  const float A = -expf(in.A_log[h]), bias = in.dt_bias[h];
  float* dt = w.dt + i * p.chunk;
  float* cum = w.cum + i * p.chunk;
  float c = 0.0f;
  for (int64_t l = 0; l < len; ++l) {
    const float d = dt_of(in.dt_raw[(start + l) * p.heads + h], bias, p);
    dt[l] = d;
    c += d * A;
    cum[l] = c;
  }
}

// grid (slots, nh, ceil(P·N / kStateTile)): Ŝ[p][n] = Σ_u (e^{c_last − c_u}·dt_u·x_u[p])·B_u[n], u in token order.
__global__ void __launch_bounds__(kThreads) mamba2_chunk_state_kernel(Workspace w, Mamba2CudaInputs in,
                                                                      Mamba2CudaParams p) {
  extern __shared__ float smem[];
  const int64_t slot = blockIdx.x, h = blockIdx.y;
  int64_t seq, start, len;
  if (!varlen_locate_chunk(slot, in.cu_seqlens, p.n_seqs, p.chunk, seq, start, len)) return;
  const int64_t P = p.head_dim, N = p.state_dim, g = h / (p.heads / p.groups);
  const int64_t item = slot * p.heads + h;
  const float* dt = w.dt + item * p.chunk;
  const float* cum = w.cum + item * p.chunk;
  const float c_last = cum[len - 1];
  float* xs = smem;               // [kTokTile][P]: weighted x
  float* bs = smem + kTokTile * P;  // [kTokTile][N]
  float acc[kStateElemsPerThread];
#pragma unroll
  for (int i = 0; i < kStateElemsPerThread; ++i) acc[i] = 0.0f;
  const int64_t base = static_cast<int64_t>(blockIdx.z) * kStateTile + threadIdx.x;
  for (int64_t u0 = 0; u0 < len; u0 += kTokTile) {
    const int64_t nu = min(static_cast<int64_t>(kTokTile), len - u0);
    __syncthreads();
    for (int64_t j = threadIdx.x; j < nu * P; j += blockDim.x) {
      const int64_t u = j / P, q = j % P, t = start + u0 + u;
      const float wu = expf(c_last - cum[u0 + u]) * dt[u0 + u];
      xs[j] = wu * in.x[t * p.x_stride + h * P + q];
    }
    for (int64_t j = threadIdx.x; j < nu * N; j += blockDim.x) {
      const int64_t u = j / N, n = j % N, t = start + u0 + u;
      bs[j] = in.B[t * p.bc_stride + g * N + n];
    }
    __syncthreads();
#pragma unroll
    for (int i = 0; i < kStateElemsPerThread; ++i) {
      const int64_t e = base + i * kThreads;
      if (e >= P * N) break;
      const int64_t q = e / N, n = e % N;
      float a = acc[i];
      for (int64_t u = 0; u < nu; ++u) a = fmaf(xs[u * P + q], bs[u * N + n], a);
      acc[i] = a;
    }
  }
  float* out = w.state + item * P * N;
#pragma unroll
  for (int i = 0; i < kStateElemsPerThread; ++i) {
    const int64_t e = base + i * kThreads;
    if (e < P * N) out[e] = acc[i];
  }
}

// grid (n_seqs, nh): S_k = e^{c_last,k}·S_{k−1} + Ŝ_k in chunk order; chunk k's slot gets S_{k−1}.
__global__ void __launch_bounds__(kThreads) mamba2_state_scan_kernel(float* state_out, Workspace w,
                                                                     Mamba2CudaInputs in, Mamba2CudaParams p) {
  const int64_t seq = blockIdx.x, h = blockIdx.y, Q = p.chunk, PN = p.head_dim * p.state_dim;
  int64_t first = 0;
  for (int64_t s = 0; s < seq; ++s) first += (in.cu_seqlens[s + 1] - in.cu_seqlens[s] + Q - 1) / Q;
  const int64_t len = in.cu_seqlens[seq + 1] - in.cu_seqlens[seq], chunks = (len + Q - 1) / Q;
  const int64_t row = (seq * p.heads + h) * PN;
  for (int64_t e = threadIdx.x; e < PN; e += blockDim.x) {
    float S = in.state_in != nullptr ? in.state_in[row + e] : 0.0f;
    for (int64_t k = 0; k < chunks; ++k) {
      const int64_t item = (first + k) * p.heads + h;
      const int64_t L = min(Q, len - k * Q);
      float* slot_state = w.state + item * PN + e;
      const float local = *slot_state;
      *slot_state = S;
      S = fmaf(expf(w.cum[item * Q + L - 1]), S, local);
    }
    if (state_out != nullptr) state_out[row + e] = S;
  }
}

// grid (slots, nh, ceil(Q / kRows)): rows t of the chunk, every p:
//   y_t = D·x_t + e^{c_t}·Σ_n S_prev[p][n]·C_t[n] + Σ_{u ≤ t} ((C_t·B_u)·e^{c_t − c_u}·dt_u)·x_u[p]
__global__ void __launch_bounds__(kThreads) mamba2_chunk_output_kernel(float* y, Workspace w, Mamba2CudaInputs in,
                                                                       Mamba2CudaParams p) {
  extern __shared__ float smem[];
  const int64_t slot = blockIdx.x, h = blockIdx.y, t0 = static_cast<int64_t>(blockIdx.z) * kRows;
  int64_t seq, start, len;
  if (!varlen_locate_chunk(slot, in.cu_seqlens, p.n_seqs, p.chunk, seq, start, len)) return;
  if (t0 >= len) return;
  const int64_t P = p.head_dim, N = p.state_dim, g = h / (p.heads / p.groups), NB = N + 1;
  const int64_t item = slot * p.heads + h, rows = min(static_cast<int64_t>(kRows), len - t0);
  const float* dt = w.dt + item * p.chunk;
  const float* cum = w.cum + item * p.chunk;
  const float* S = w.state + item * P * N;  // the state entering this chunk
  float* cs = smem;                 // [kRows][N]
  float* bs = cs + kRows * N;       // [kTokTile][N + 1]
  float* xs = bs + kTokTile * NB;   // [kTokTile][P]
  float* wt = xs + kTokTile * P;    // [kRows][kTokTile]
  float* ys = wt + kRows * kTokTile;  // [kRows][P]
  for (int64_t j = threadIdx.x; j < rows * N; j += blockDim.x) {
    const int64_t r = j / N, n = j % N;
    cs[j] = in.C[(start + t0 + r) * p.bc_stride + g * N + n];
  }
  __syncthreads();
  const float Dh = in.D[h];
  for (int64_t j = threadIdx.x; j < rows * P; j += blockDim.x) {
    const int64_t r = j / P, q = j % P;
    const float* Sq = S + q * N;
    const float* c = cs + r * N;
    float inter = 0.0f;
    for (int64_t n = 0; n < N; ++n) inter = fmaf(Sq[n], c[n], inter);
    ys[j] = expf(cum[t0 + r]) * inter;
  }
  const int64_t u_end = t0 + rows;  // tokens u < u_end reach these rows
  for (int64_t u0 = 0; u0 < u_end; u0 += kTokTile) {
    const int64_t nu = min(static_cast<int64_t>(kTokTile), u_end - u0);
    __syncthreads();
    for (int64_t j = threadIdx.x; j < nu * N; j += blockDim.x) {
      const int64_t u = j / N, n = j % N;
      bs[u * NB + n] = in.B[(start + u0 + u) * p.bc_stride + g * N + n];
    }
    for (int64_t j = threadIdx.x; j < nu * P; j += blockDim.x) {
      const int64_t u = j / P, q = j % P;
      xs[j] = in.x[(start + u0 + u) * p.x_stride + h * P + q];
    }
    __syncthreads();
    for (int64_t j = threadIdx.x; j < rows * kTokTile; j += blockDim.x) {
      const int64_t r = j / kTokTile, u = j % kTokTile, t = t0 + r, uu = u0 + u;
      float v = 0.0f;
      if (u < nu && uu <= t) {  // masked terms are skipped, not multiplied by 0 (an Inf there would give NaN)
        const float* c = cs + r * N;
        const float* b = bs + u * NB;
        float d = 0.0f;
        for (int64_t n = 0; n < N; ++n) d = fmaf(c[n], b[n], d);
        v = d * expf(cum[t] - cum[uu]) * dt[uu];
      }
      wt[j] = v;
    }
    __syncthreads();
    for (int64_t j = threadIdx.x; j < rows * P; j += blockDim.x) {
      const int64_t r = j / P, q = j % P, t = t0 + r;
      const int64_t last = min(nu, t - u0 + 1);  // u0 + u ≤ t
      float a = ys[j];
      for (int64_t u = 0; u < last; ++u) a = fmaf(wt[r * kTokTile + u], xs[u * P + q], a);
      ys[j] = a;
    }
  }
  __syncthreads();
  for (int64_t j = threadIdx.x; j < rows * P; j += blockDim.x) {
    const int64_t r = j / P, q = j % P, t = start + t0 + r;
    y[(t * p.heads + h) * P + q] = fmaf(Dh, in.x[t * p.x_stride + h * P + q], ys[j]);
  }
}

// ---- Token recurrence: grid (n_seqs, nh), kRecurrentWarps warps; warp k owns rows p ≡ k, lane l owns n ≡ l (mod 32).
__global__ void __launch_bounds__(32 * kRecurrentWarps) mamba2_recurrent_kernel(float* y, float* state,
                                                                                Mamba2CudaInputs in,
                                                                                Mamba2CudaParams p) {
  const int64_t seq = blockIdx.x, h = blockIdx.y, P = p.head_dim, N = p.state_dim;
  const int64_t g = h / (p.heads / p.groups);
  const int lane = static_cast<int>(threadIdx.x % 32), warp = static_cast<int>(threadIdx.x / 32);
  float* S = state + (seq * p.heads + h) * P * N;
  if (in.state_in != state)
    for (int64_t q = warp; q < P; q += kRecurrentWarps)
      for (int64_t n = lane; n < N; n += 32)
        S[q * N + n] = in.state_in != nullptr ? in.state_in[(seq * p.heads + h) * P * N + q * N + n] : 0.0f;
  const float A = -expf(in.A_log[h]), bias = in.dt_bias[h], Dh = in.D[h];
  for (int64_t t = in.cu_seqlens[seq]; t < in.cu_seqlens[seq + 1]; ++t) {
    const float dt = dt_of(in.dt_raw[t * p.heads + h], bias, p), a = expf(dt * A);
    const float* x = in.x + t * p.x_stride + h * P;
    const float* B = in.B + t * p.bc_stride + g * N;
    const float* C = in.C + t * p.bc_stride + g * N;
    for (int64_t q = warp; q < P; q += kRecurrentWarps) {
      const float xq = x[q], xdt = dt * xq;
      float acc = 0.0f;
      for (int64_t n = lane; n < N; n += 32) {
        const float s = fmaf(a, S[q * N + n], xdt * B[n]);
        S[q * N + n] = s;
        acc = fmaf(s, C[n], acc);
      }
#pragma unroll
      for (int off = 16; off > 0; off >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, off);
      if (lane == 0) y[(t * p.heads + h) * P + q] = fmaf(Dh, xq, acc);
    }
  }
}

// ---- Elementwise steps of the mixer

__global__ void mamba2_conv_bias_silu_kernel(float* xbc, const float* bias, int64_t tokens, int64_t channels) {
  const int64_t n = tokens * channels;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float v = bias != nullptr ? xbc[i] + bias[i % channels] : xbc[i];
    xbc[i] = silu_f(v);
  }
}

__global__ void mamba2_gate_silu_kernel(float* y, const float* z, int64_t n) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    y[i] *= silu_f(z[i]);
}

unsigned elementwise_blocks(int64_t n) {
  return static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>((n + kThreads - 1) / kThreads, 4096)));
}

void check_params(const Mamba2CudaParams& p) {
  HLM_CHECK(p.heads > 0 && p.head_dim > 0 && p.state_dim > 0 && p.groups > 0 && p.heads % p.groups == 0,
            "mamba2_ssd (CUDA): bad shape");
  HLM_CHECK(p.x_stride >= p.heads * p.head_dim && p.bc_stride >= p.groups * p.state_dim,
            "mamba2_ssd (CUDA): row strides shorter than the rows");
  HLM_CHECK_INPUT(p.head_dim <= mamba2_ssd_cuda_max_dim() && p.state_dim <= mamba2_ssd_cuda_max_dim(),
                  "Mamba-2 head dim ", p.head_dim, " / state dim ", p.state_dim, " exceed the CUDA limit of ",
                  mamba2_ssd_cuda_max_dim());
}

size_t state_smem_bytes(const Mamba2CudaParams& p) {
  return sizeof(float) * static_cast<size_t>(kTokTile * (p.head_dim + p.state_dim));
}
size_t output_smem_bytes(const Mamba2CudaParams& p) {
  const int64_t P = p.head_dim, N = p.state_dim;
  return sizeof(float) * static_cast<size_t>(kRows * N + kTokTile * (N + 1) + kTokTile * P + kRows * kTokTile +
                                             kRows * P);
}

}  // namespace

size_t mamba2_ssd_chunked_cuda_workspace_bytes(const Mamba2CudaParams& p) {
  const int64_t slots = chunk_slots(p);
  return sizeof(float) * static_cast<size_t>(slots * p.heads * (2 * p.chunk + p.head_dim * p.state_dim));
}

void mamba2_ssd_chunked_forward_cuda(float* y, float* state_out, const Mamba2CudaInputs& in,
                                     const Mamba2CudaParams& p, void* workspace, size_t workspace_bytes,
                                     cudaStream_t stream) {
  check_params(p);
  HLM_CHECK_INPUT(p.chunk >= 1 && p.chunk <= mamba2_ssd_cuda_max_chunk(), "Mamba-2 chunk size ", p.chunk,
                  " outside the CUDA range [1, ", mamba2_ssd_cuda_max_chunk(), "]");
  if (p.n_seqs == 0) return;
  HLM_CHECK(workspace_bytes >= mamba2_ssd_chunked_cuda_workspace_bytes(p), "mamba2_ssd (CUDA): workspace too small");
  const Workspace w = carve(workspace, p);
  const int64_t slots = chunk_slots(p);
  if (p.total_tokens > 0) {
    const int64_t items = slots * p.heads;
    mamba2_prep_kernel<<<static_cast<unsigned>((items + 127) / 128), 128, 0, stream>>>(w, in, p, slots);
    HLM_CUDA_CHECK_LAUNCH();
    const size_t smem_s = state_smem_bytes(p), smem_o = output_smem_bytes(p);
    // > 48 KiB of dynamic shared memory needs the opt-in (set once per size seen; not a stream operation).
    static size_t state_optin = 0, output_optin = 0;
    if (smem_s > 48 * 1024 && smem_s > state_optin) {
      HLM_CUDA_CHECK(cudaFuncSetAttribute(mamba2_chunk_state_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          static_cast<int>(smem_s)));
      state_optin = smem_s;
    }
    if (smem_o > 48 * 1024 && smem_o > output_optin) {
      HLM_CUDA_CHECK(cudaFuncSetAttribute(mamba2_chunk_output_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          static_cast<int>(smem_o)));
      output_optin = smem_o;
    }
    const dim3 gs(static_cast<unsigned>(slots), static_cast<unsigned>(p.heads),
                  static_cast<unsigned>((p.head_dim * p.state_dim + kStateTile - 1) / kStateTile));
    mamba2_chunk_state_kernel<<<gs, kThreads, smem_s, stream>>>(w, in, p);
    HLM_CUDA_CHECK_LAUNCH();
  }
  mamba2_state_scan_kernel<<<dim3(static_cast<unsigned>(p.n_seqs), static_cast<unsigned>(p.heads)), kThreads, 0,
                             stream>>>(state_out, w, in, p);
  HLM_CUDA_CHECK_LAUNCH();
  if (p.total_tokens > 0) {
    const dim3 go(static_cast<unsigned>(slots), static_cast<unsigned>(p.heads),
                  static_cast<unsigned>((p.chunk + kRows - 1) / kRows));
    mamba2_chunk_output_kernel<<<go, kThreads, output_smem_bytes(p), stream>>>(y, w, in, p);
    HLM_CUDA_CHECK_LAUNCH();
  }
}

void mamba2_ssd_recurrent_forward_cuda(float* y, float* state_out, const Mamba2CudaInputs& in,
                                       const Mamba2CudaParams& p, cudaStream_t stream) {
  check_params(p);
  if (p.n_seqs == 0) return;
  HLM_CHECK(state_out != nullptr, "mamba2_ssd (CUDA): the recurrence runs in state_out, which is required");
  mamba2_recurrent_kernel<<<dim3(static_cast<unsigned>(p.n_seqs), static_cast<unsigned>(p.heads)),
                            32 * kRecurrentWarps, 0, stream>>>(y, state_out, in, p);
  HLM_CUDA_CHECK_LAUNCH();
}

void mamba2_conv_bias_silu_cuda(float* xbc, const float* bias, int64_t tokens, int64_t channels, cudaStream_t stream) {
  const int64_t n = tokens * channels;
  if (n == 0) return;
  mamba2_conv_bias_silu_kernel<<<elementwise_blocks(n), kThreads, 0, stream>>>(xbc, bias, tokens, channels);
  HLM_CUDA_CHECK_LAUNCH();
}

void mamba2_gate_silu_cuda(float* y, const float* z, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  mamba2_gate_silu_kernel<<<elementwise_blocks(n), kThreads, 0, stream>>>(y, z, n);
  HLM_CUDA_CHECK_LAUNCH();
}

}  // namespace hlm
