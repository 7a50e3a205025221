// Mamba-2 SSD scan on CUDA: launchers for the forward of the contract in mamba2_ssd.h (the same math, per sequence of
// a packed batch, state in and out), plus the two elementwise steps of the Mamba-2 mixer around it
// (layers/cuda/mamba2_layer_cuda.h). fp32 storage and compute, fp32 state. Raw device pointers (cu_seqlens too),
// queued on `stream`, no synchronization; nothing reads the device back, so a CUDA graph can capture every launcher.
// cu_seqlens must satisfy the contract (cu[0] = 0, non-decreasing, cu[N] = T); the kernels do not check it.
//
// Shapes (T tokens, nh heads, P head dim, G groups, N state dim; head h reads group h / (nh/G)):
//   x       [T, ·] rows of x_stride floats; token t's heads at x + t·x_stride, [nh, P] contiguous
//   B, C    [T, ·] rows of bc_stride floats; token t's groups at B + t·bc_stride, [G, N] contiguous
//           (the mixer passes pointers into its conv output xBC [T, Im + 2GN]: x_stride = bc_stride = Im + 2GN)
//   dt_raw  [T, nh] contiguous (before dt_bias and softplus); dt_bias, A_log, D [nh]
//   y       [T, nh, P] contiguous, OVERWRITTEN; must not alias an input
//   state_in, state_out [N_seq, nh, P, N] (state_in nullable = zeros; state_out nullable = not wanted; they may alias)
// dt = softplus(dt_raw + dt_bias) (v > 20: v), clamped to [dt_lo, dt_hi] when dt_clamp; A = −exp(A_log).
//
// Two forms, the CPU reference's two:
//   mamba2_ssd_chunked_forward_cuda: the chunked SSD form (chunk Q = params.chunk), four launches over a workspace:
//     prep   one thread per (chunk, head): dt and the in-chunk cumulative log-decay c (a serial fp32 sum, in order);
//     states one block per (chunk, head, tile of 2048 state elements): the chunk-local end state
//            Ŝ = Σ_u e^{c_last − c_u}·dt_u·x_u ⊗ B_u (u in tiles of 32 tokens through shared memory);
//     scan   one block per (sequence, head): S_k = e^{c_last,k}·S_{k−1} + Ŝ_k over the sequence's chunks in order,
//            leaving S_{k−1} (the state entering chunk k) in chunk k's slot and the final state in state_out;
//     output one block per (chunk, head, 32 rows): y_t = e^{c_t}·S_{k−1}·C_t + Σ_{u≤t} (C_t·B_u)·e^{c_t − c_u}·dt_u·x_u
//            + D·x_t (C_t·B_u as fp32 dot products over N; the sum over u in token order, 32 at a time).
//     Every factor e^{…} has a non-positive exponent (A < 0, dt ≥ 0), as in the reference. Chunks are numbered
//     sequence by sequence; the grids cover ceil(T/Q) + N_seq chunk slots (an upper bound on Σ ceil(len/Q)) and the
//     spare blocks exit, so the launch shapes depend on T and N_seq only.
//   mamba2_ssd_recurrent_forward_cuda: the token recurrence, one block per (sequence, head), one warp per row p of the
//     state (rows p, p + 4, ...), lanes over n; S = e^{dt·A}·S + (dt·x_p)·B, y_p = Σ_n S·C + D·x_p (a warp xor-tree).
//     The state lives in state_out (copied from state_in first unless they alias). For a decode step (one token per
//     sequence) this is the whole update: one launch.
// Numerics: fp32 throughout (the CPU reference sums in double): expf / log1pf (≤ 2 ulp), fp32 dot products and sums in a
// fixed order (deterministic: no atomics, results independent of the launch). The tests derive their tolerance from
// the longest chain of roundings (tests/cuda/cases_mamba2_ssd.cpp).
// Limits: P ≤ mamba2_ssd_cuda_max_dim(), N ≤ mamba2_ssd_cuda_max_dim(), chunk ≤ mamba2_ssd_cuda_max_chunk()
// (the launchers throw an input error past them; Granite-4.0-H: P 64, N 128, chunk 256).
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace hlm {

struct Mamba2CudaParams {
  int64_t total_tokens = 0;  // T
  int64_t heads = 0;         // nh
  int64_t head_dim = 0;      // P
  int64_t groups = 1;        // G
  int64_t state_dim = 0;     // N
  int64_t n_seqs = 0;        // N_seq
  int64_t chunk = 256;       // Q (chunked form)
  int64_t x_stride = 0;      // floats between token rows of x (≥ nh·P)
  int64_t bc_stride = 0;     // floats between token rows of B and of C (≥ G·N)
  float dt_lo = 0.0f, dt_hi = 0.0f;
  bool dt_clamp = false;     // Mamba2DtLimits::apply
};

struct Mamba2CudaInputs {
  const float* x = nullptr;
  const float* dt_raw = nullptr;
  const float* dt_bias = nullptr;
  const float* A_log = nullptr;
  const float* B = nullptr;
  const float* C = nullptr;
  const float* D = nullptr;
  const float* state_in = nullptr;  // nullable
  const int64_t* cu_seqlens = nullptr;
};

constexpr int64_t mamba2_ssd_cuda_max_dim() { return 256; }
constexpr int64_t mamba2_ssd_cuda_max_chunk() { return 1024; }

// Bytes of device scratch the chunked form needs: per chunk slot and head, the chunk's dt and cumulative decay (2·Q
// floats) and its state (P·N floats).
size_t mamba2_ssd_chunked_cuda_workspace_bytes(const Mamba2CudaParams& p);

void mamba2_ssd_chunked_forward_cuda(float* y, float* state_out, const Mamba2CudaInputs& in,
                                     const Mamba2CudaParams& p, void* workspace, size_t workspace_bytes,
                                     cudaStream_t stream);

void mamba2_ssd_recurrent_forward_cuda(float* y, float* state_out, const Mamba2CudaInputs& in,
                                       const Mamba2CudaParams& p, cudaStream_t stream);

// The mixer's elementwise steps (as layers/mamba2_layer.cpp computes them in float, silu(v) = v / (1 + e^{−v})):
//   xbc [T, C] ← silu(xbc + bias)   in place; bias [C] nullable (mamba_conv_bias false)
//   y [n] ← y · silu(z)             in place (the gate before the mixer's RMSNorm)
void mamba2_conv_bias_silu_cuda(float* xbc, const float* bias, int64_t tokens, int64_t channels, cudaStream_t stream);
void mamba2_gate_silu_cuda(float* y, const float* z, int64_t n, cudaStream_t stream);

}  // namespace hlm
