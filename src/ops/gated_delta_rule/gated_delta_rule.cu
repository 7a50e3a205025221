// Gated delta rule CUDA kernels and launchers: the token recurrence (contract: gated_delta_rule.h; design and
// numerics: gated_delta_rule_cuda.h).
// Thread layout (both directions): one block of kThreads per (sequence, v-head); warp w owns the state rows
// a = w, w + kWarps, ...; lane l owns the columns d = l + 32·i (i < kLaneCols, so dk ≤ 128). A thread touches only its
// own (a, d) elements of M and D, so those need no barriers; k and q sit in registers (each lane's columns), and the
// per-row dot products are warp sums (all lanes get the same bits).
#include <algorithm>

#include "backend/cuda/cuda_common.cuh"
#include "core/error.h"
#include "ops/gated_delta_rule/gated_delta_rule_cuda.h"

namespace hlm {

namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kLaneCols = static_cast<int>(gated_delta_rule_cuda_max_dim() / 32);  // columns per lane
constexpr int64_t kSegment = gated_delta_rule_cuda_segment();

// Sum over the warp by a fixed xor tree; every lane returns the same value.
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

struct Dims {
  int64_t T, Hk, Hv, dk, dv, N;
  __device__ int64_t group() const { return Hv / Hk; }
  __device__ int64_t qk(int64_t t, int64_t h) const { return (t * Hk + h / group()) * dk; }  // h = v-head
  __device__ int64_t vo(int64_t t, int64_t h) const { return (t * Hv + h) * dv; }
  __device__ int64_t gb(int64_t t, int64_t h) const { return t * Hv + h; }
  __device__ int64_t state(int64_t seq, int64_t h) const { return (seq * Hv + h) * dv * dk; }
};

// Loads row `src` (dk floats) into the lane's column registers (0 beyond dk).
__device__ __forceinline__ void load_cols(float (&dst)[kLaneCols], const float* src, int64_t dk, int lane) {
#pragma unroll
  for (int i = 0; i < kLaneCols; ++i) {
    const int64_t d = lane + 32 * i;
    dst[i] = d < dk ? src[d] : 0.0f;
  }
}

// One token on the warp's rows of M (in place): M ← α M, p = M k, u = β (v − p), M ← M + u kᵀ.
// With q != nullptr also writes o = scale · M q (lane 0).
__device__ void token_step(float* M, const float (&kr)[kLaneCols], const float (&qr)[kLaneCols], const float* v,
                           float alpha, float beta, float scale, float* o, const Dims& s, int warp, int lane) {
  for (int64_t a = warp; a < s.dv; a += kWarps) {
    float* row = M + a * s.dk;
    float p = 0.0f;
#pragma unroll
    for (int i = 0; i < kLaneCols; ++i) {
      const int64_t d = lane + 32 * i;
      if (d < s.dk) {
        const float m = alpha * row[d];
        row[d] = m;
        p = fmaf(m, kr[i], p);
      }
    }
    p = warp_sum(p);
    const float u = beta * (v[a] - p);
    float oa = 0.0f;
#pragma unroll
    for (int i = 0; i < kLaneCols; ++i) {
      const int64_t d = lane + 32 * i;
      if (d < s.dk) {
        const float m = fmaf(u, kr[i], row[d]);
        row[d] = m;
        oa = fmaf(m, qr[i], oa);
      }
    }
    if (o != nullptr) {
      oa = warp_sum(oa);
      if (lane == 0) o[a] = scale * oa;
    }
  }
}

// Copies the thread's own elements of a [dv, dk] state (src nullptr = zeros).
__device__ __forceinline__ void copy_own(float* dst, const float* src, const Dims& s, int warp, int lane) {
  for (int64_t a = warp; a < s.dv; a += kWarps)
    for (int64_t d = lane; d < s.dk; d += 32) dst[a * s.dk + d] = src != nullptr ? src[a * s.dk + d] : 0.0f;
}

struct FwdArgs {
  float* o;
  float* hT;
  const float *q, *k, *v, *g, *beta, *h0;
  const int64_t* cu;
  Dims s;
  float scale;
};

__global__ void __launch_bounds__(kThreads) gdn_forward_kernel(FwdArgs args) {
  extern __shared__ float smem[];  // M [dv, dk]
  const Dims& s = args.s;
  const int64_t seq = blockIdx.x / s.Hv, h = blockIdx.x % s.Hv;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  float* M = smem;
  copy_own(M, args.h0 != nullptr ? args.h0 + s.state(seq, h) : nullptr, s, warp, lane);
  const int64_t begin = args.cu[seq], end = args.cu[seq + 1];
  for (int64_t t = begin; t < end; ++t) {
    float kr[kLaneCols], qr[kLaneCols];
    load_cols(kr, args.k + s.qk(t, h), s.dk, lane);
    load_cols(qr, args.q + s.qk(t, h), s.dk, lane);
    token_step(M, kr, qr, args.v + s.vo(t, h), expf(args.g[s.gb(t, h)]), args.beta[s.gb(t, h)], args.scale,
               args.o + s.vo(t, h), s, warp, lane);
  }
  if (args.hT != nullptr) copy_own(args.hT + s.state(seq, h), M, s, warp, lane);
}

struct BwdArgs {
  float *dq_v, *dk_v, *dv, *dg, *dbeta, *dh0;  // dq_v, dk_v: per-v-head scratch [T, Hv, dk]
  float *checkpoints, *segments;              // [slots, Hv, dv·dk], [N·Hv, S, dv·dk]
  const float *q, *k, *v, *g, *beta, *h0, *d_o, *d_hT;
  const int64_t* cu;
  Dims s;
  float scale;
};

// Checkpoint slot of the segment starting at token t0 of sequence seq: t0 / S + seq is distinct for distinct
// segments (a sequence's segments start S apart, the next sequence starts after its last one) and < T/S + N + 1.
__device__ __forceinline__ int64_t checkpoint_slot(int64_t t0, int64_t seq) { return t0 / kSegment + seq; }

__global__ void __launch_bounds__(kThreads) gdn_backward_kernel(BwdArgs args) {
  extern __shared__ float smem[];
  const Dims& s = args.s;
  const int64_t n = s.dv * s.dk;
  float* M = smem;                  // [dv, dk] running state (forward sweeps)
  float* D = M + n;                 // [dv, dk] dL/dM after the current token
  float* red_q = D + n;             // [kWarps, dk] per-warp row sums of dq
  float* red_k = red_q + kWarps * s.dk;  // [kWarps, dk] per-warp row sums of dk
  float* red_s = red_k + kWarps * s.dk;  // [kWarps, 2] per-warp dg, dβ
  const int64_t seq = blockIdx.x / s.Hv, h = blockIdx.x % s.Hv;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t begin = args.cu[seq], len = args.cu[seq + 1] - begin;
  const int64_t n_seg = (len + kSegment - 1) / kSegment;
  float* seg_states = args.segments + static_cast<int64_t>(blockIdx.x) * kSegment * n;
  const float no_q[kLaneCols] = {};

  // Sweep 1 (forward): the state at every segment start.
  copy_own(M, args.h0 != nullptr ? args.h0 + s.state(seq, h) : nullptr, s, warp, lane);
  for (int64_t i = 0; i < len; ++i) {
    const int64_t t = begin + i;
    if (i % kSegment == 0)
      copy_own(args.checkpoints + (checkpoint_slot(t, seq) * s.Hv + h) * n, M, s, warp, lane);
    float kr[kLaneCols];
    load_cols(kr, args.k + s.qk(t, h), s.dk, lane);
    token_step(M, kr, no_q, args.v + s.vo(t, h), expf(args.g[s.gb(t, h)]), args.beta[s.gb(t, h)], 0.0f, nullptr, s,
               warp, lane);
  }

  // Sweep 2 (reverse), per segment: recompute the per-token states, then walk them backwards.
  copy_own(D, args.d_hT != nullptr ? args.d_hT + s.state(seq, h) : nullptr, s, warp, lane);
  for (int64_t seg = n_seg - 1; seg >= 0; --seg) {
    const int64_t i0 = seg * kSegment, seg_len = len - i0 < kSegment ? len - i0 : kSegment;
    copy_own(M, args.checkpoints + (checkpoint_slot(begin + i0, seq) * s.Hv + h) * n, s, warp, lane);
    for (int64_t j = 0; j < seg_len; ++j) {  // seg_states[j] = state before token i0 + j
      copy_own(seg_states + j * n, M, s, warp, lane);
      if (j + 1 == seg_len) break;
      const int64_t t = begin + i0 + j;
      float kr[kLaneCols];
      load_cols(kr, args.k + s.qk(t, h), s.dk, lane);
      token_step(M, kr, no_q, args.v + s.vo(t, h), expf(args.g[s.gb(t, h)]), args.beta[s.gb(t, h)], 0.0f, nullptr,
                 s, warp, lane);
    }
    for (int64_t j = seg_len - 1; j >= 0; --j) {
      const int64_t t = begin + i0 + j;
      float kr[kLaneCols], qr[kLaneCols];
      load_cols(kr, args.k + s.qk(t, h), s.dk, lane);
      load_cols(qr, args.q + s.qk(t, h), s.dk, lane);
      const float alpha = expf(args.g[s.gb(t, h)]), beta = args.beta[s.gb(t, h)];
      const float* v = args.v + s.vo(t, h);
      const float* dO = args.d_o + s.vo(t, h);
      const float* Mprev = seg_states + j * n;
      float dq_acc[kLaneCols] = {}, dk_acc[kLaneCols] = {};
      float dg_acc = 0.0f, dbeta_acc = 0.0f;
      for (int64_t a = warp; a < s.dv; a += kWarps) {
        float Ma[kLaneCols], Dr[kLaneCols];
        float p = 0.0f;
#pragma unroll
        for (int i = 0; i < kLaneCols; ++i) {  // Ma = α M_prev, p = Ma k
          const int64_t d = lane + 32 * i;
          Ma[i] = 0.0f;
          if (d < s.dk) {
            Ma[i] = alpha * Mprev[a * s.dk + d];
            p = fmaf(Ma[i], kr[i], p);
          }
        }
        p = warp_sum(p);
        const float vp = v[a] - p, u = beta * vp, dOa = dO[a], sdOa = args.scale * dOa;
        float du = 0.0f;
#pragma unroll
        for (int i = 0; i < kLaneCols; ++i) {  // dq += dO_a M'_a (scale later); D_a += scale dO_a q; du = D_a k
          const int64_t d = lane + 32 * i;
          Dr[i] = 0.0f;
          if (d < s.dk) {
            dq_acc[i] = fmaf(dOa, fmaf(u, kr[i], Ma[i]), dq_acc[i]);
            Dr[i] = fmaf(sdOa, qr[i], D[a * s.dk + d]);
            du = fmaf(Dr[i], kr[i], du);
          }
        }
        du = warp_sum(du);
        dbeta_acc = fmaf(du, vp, dbeta_acc);
        if (lane == 0) args.dv[s.vo(t, h) + a] = beta * du;
        const float dp = -beta * du;
#pragma unroll
        for (int i = 0; i < kLaneCols; ++i) {  // dk += D_a u + Ma dp; dMa = D_a + dp k; dg += Ma·dMa; D_a = α dMa
          const int64_t d = lane + 32 * i;
          if (d < s.dk) {
            dk_acc[i] = fmaf(Ma[i], dp, fmaf(Dr[i], u, dk_acc[i]));
            const float dMa = fmaf(dp, kr[i], Dr[i]);
            dg_acc = fmaf(Ma[i], dMa, dg_acc);
            D[a * s.dk + d] = alpha * dMa;
          }
        }
      }
      dg_acc = warp_sum(dg_acc);
#pragma unroll
      for (int i = 0; i < kLaneCols; ++i) {
        const int64_t d = lane + 32 * i;
        if (d < s.dk) {
          red_q[warp * s.dk + d] = dq_acc[i];
          red_k[warp * s.dk + d] = dk_acc[i];
        }
      }
      if (lane == 0) {
        red_s[2 * warp] = dg_acc;
        red_s[2 * warp + 1] = dbeta_acc;
      }
      __syncthreads();
      if (threadIdx.x < s.dk) {  // fixed warp order: deterministic
        float sq = 0.0f, sk = 0.0f;
        for (int w = 0; w < kWarps; ++w) {
          sq += red_q[w * s.dk + threadIdx.x];
          sk += red_k[w * s.dk + threadIdx.x];
        }
        args.dq_v[(t * s.Hv + h) * s.dk + threadIdx.x] = args.scale * sq;
        args.dk_v[(t * s.Hv + h) * s.dk + threadIdx.x] = sk;
      } else if (threadIdx.x == kThreads - 1) {
        float sg = 0.0f, sb = 0.0f;
        for (int w = 0; w < kWarps; ++w) {
          sg += red_s[2 * w];
          sb += red_s[2 * w + 1];
        }
        args.dg[s.gb(t, h)] = sg;
        args.dbeta[s.gb(t, h)] = sb;
      }
      __syncthreads();  // the reduction buffers are rewritten by the next token
    }
  }
  if (args.dh0 != nullptr) copy_own(args.dh0 + s.state(seq, h), D, s, warp, lane);
}

// dst [T, Hk, dk] = Σ_{j<G} src [T, Hv, dk] over the v-heads hk·G + j, in j order.
__global__ void gva_sum_kernel(float* dst, const float* src, int64_t T, int64_t Hk, int64_t G, int64_t dk) {
  const int64_t n = T * Hk * dk;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t d = i % dk, th = i / dk;  // th = t·Hk + hk
    const float* row = src + (th * G) * dk + d;  // (t·Hv + hk·G)·dk + d
    float acc = row[0];
    for (int64_t j = 1; j < G; ++j) acc += row[j * dk];
    dst[i] = acc;
  }
}

Dims check_shape(const GdnShape& s, int64_t n_seqs) {
  HLM_CHECK(s.total_tokens >= 0 && s.key_dim > 0 && s.value_dim > 0 && n_seqs >= 0, "gated_delta_rule_cuda: bad shape");
  HLM_CHECK(s.k_heads > 0 && s.v_heads > 0 && s.v_heads % s.k_heads == 0, "gated_delta_rule_cuda: v heads ",
            s.v_heads, " not a multiple of k heads ", s.k_heads);
  HLM_CHECK(s.key_dim <= gated_delta_rule_cuda_max_dim() && s.value_dim <= gated_delta_rule_cuda_max_dim(),
            "gated_delta_rule_cuda: key_dim ", s.key_dim, " / value_dim ", s.value_dim, " above the CUDA limit ",
            gated_delta_rule_cuda_max_dim());
  return {s.total_tokens, s.k_heads, s.v_heads, s.key_dim, s.value_dim, n_seqs};
}

size_t forward_smem_bytes(const Dims& d) { return static_cast<size_t>(d.dv * d.dk) * sizeof(float); }
size_t backward_smem_bytes(const Dims& d) {
  return static_cast<size_t>(2 * d.dv * d.dk + 2 * kWarps * d.dk + 2 * kWarps) * sizeof(float);
}

// Raises a kernel's dynamic shared memory limit when it needs more than the default 48 KiB.
template <typename Kernel>
void allow_smem(Kernel kernel, size_t bytes) {
  if (bytes > 48 * 1024)
    HLM_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
}

struct Workspace {
  float *dq_v, *dk_v, *checkpoints, *segments;
  size_t bytes;
};

// Sizes the workspace and, when `base` is given, places the pieces in it.
Workspace carve(void* base, const Dims& d) {
  const size_t per_v = cuda::align_up_256(static_cast<size_t>(d.T * d.Hv * d.dk) * sizeof(float));
  const size_t state = static_cast<size_t>(d.dv * d.dk) * sizeof(float);
  const size_t ckpt = cuda::align_up_256(static_cast<size_t>(d.T / kSegment + d.N + 1) * d.Hv * state);
  const size_t segs = cuda::align_up_256(static_cast<size_t>(d.N * d.Hv * kSegment) * state);
  Workspace ws{nullptr, nullptr, nullptr, nullptr, 2 * per_v + ckpt + segs};
  if (base == nullptr) return ws;
  auto* b = static_cast<char*>(base);
  ws.dq_v = reinterpret_cast<float*>(b);
  ws.dk_v = reinterpret_cast<float*>(b + per_v);
  ws.checkpoints = reinterpret_cast<float*>(b + 2 * per_v);
  ws.segments = reinterpret_cast<float*>(b + 2 * per_v + ckpt);
  return ws;
}

}  // namespace

void gated_delta_rule_forward_cuda(const GdnOutputs<float>& out, const GdnInputs<float>& in, const GdnShape& shape,
                                   float scale, cudaStream_t stream) {
  const Dims d = check_shape(shape, in.n_seqs);
  HLM_CHECK(in.cu_seqlens != nullptr && (out.o != nullptr || d.T == 0),
            "gated_delta_rule_forward_cuda: missing buffer");
  if (d.N == 0) return;
  const size_t smem = forward_smem_bytes(d);
  allow_smem(gdn_forward_kernel, smem);
  const FwdArgs args{out.o, out.hT, in.q, in.k, in.v, in.g, in.beta, in.h0, in.cu_seqlens, d, scale};
  gdn_forward_kernel<<<static_cast<unsigned>(d.N * d.Hv), kThreads, smem, stream>>>(args);
  HLM_CUDA_CHECK_LAUNCH();
}

size_t gated_delta_rule_backward_cuda_workspace_bytes(const GdnShape& shape, int64_t n_seqs) {
  return carve(nullptr, check_shape(shape, n_seqs)).bytes;
}

void gated_delta_rule_backward_cuda(const GdnInputGrads<float>& grads, const GdnOutputGrads<float>& dout,
                                    const GdnInputs<float>& in, const GdnShape& shape, float scale, void* workspace,
                                    size_t workspace_bytes, cudaStream_t stream) {
  const Dims d = check_shape(shape, in.n_seqs);
  HLM_CHECK(in.cu_seqlens != nullptr, "gated_delta_rule_backward_cuda: cu_seqlens missing");
  HLM_CHECK(d.T == 0 || (grads.dq && grads.dk && grads.dv && grads.dg && grads.dbeta && dout.d_o),
            "gated_delta_rule_backward_cuda: missing gradient buffer");
  if (d.N == 0) return;
  const Workspace ws = carve(workspace, d);
  HLM_CHECK(workspace != nullptr && workspace_bytes >= ws.bytes, "gated_delta_rule_backward_cuda: workspace of ",
            workspace_bytes, " bytes, needs ", ws.bytes);
  const size_t smem = backward_smem_bytes(d);
  allow_smem(gdn_backward_kernel, smem);
  const BwdArgs args{ws.dq_v,  ws.dk_v, grads.dv, grads.dg, grads.dbeta, grads.dh0,    ws.checkpoints, ws.segments,
                     in.q,     in.k,    in.v,     in.g,     in.beta,     in.h0,        dout.d_o,       dout.d_hT,
                     in.cu_seqlens, d,  scale};
  gdn_backward_kernel<<<static_cast<unsigned>(d.N * d.Hv), kThreads, smem, stream>>>(args);
  HLM_CUDA_CHECK_LAUNCH();
  if (d.T == 0) return;
  const int64_t n = d.T * d.Hk * d.dk, G = d.Hv / d.Hk;
  gva_sum_kernel<<<cuda::grid_blocks(n), cuda::kElementwiseThreads, 0, stream>>>(grads.dq, ws.dq_v, d.T, d.Hk, G, d.dk);
  HLM_CUDA_CHECK_LAUNCH();
  gva_sum_kernel<<<cuda::grid_blocks(n), cuda::kElementwiseThreads, 0, stream>>>(grads.dk, ws.dk_v, d.T, d.Hk, G, d.dk);
  HLM_CUDA_CHECK_LAUNCH();
}

}  // namespace hlm
