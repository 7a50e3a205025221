// Simple GLA (Lightning Attention-2) on CUDA: launchers for the forward of the contract in simple_gla.h (the same
// math per sequence of a packed batch, state in and out), plus the Lightning mixer's group RMSNorm + sigmoid gate
// (layers/cuda/lightning_layer_cuda.h). fp32 storage, compute and state. Raw device pointers (cu_seqlens and g too),
// queued on `stream`, no synchronization; nothing reads the device back, so a CUDA graph can capture every launcher.
// cu_seqlens must satisfy the contract (cu[0] = 0, non-decreasing, cu[N] = T); the kernels do not check it.
//
// Shapes (T tokens, H heads, dk key dim, dv value dim, N sequences), contiguous, token-major as in simple_gla.h:
//   q, k [T, H, dk]; v [T, H, dv]; g [H] (log-decay per head, λ = e^g); o [T, H, dv] OVERWRITTEN (no aliasing)
//   state_in, state_out [N, H, dk, dv] (state_in nullable = zeros; state_out nullable = not wanted; they may alias)
//   S_t = λ·S_{t−1} + k_tᵀ v_t,  o_t = scale · q_t S_t
//
// Two forms, the CPU reference's two:
//   simple_gla_chunked_forward_cuda (chunk Q = params.chunk), three launches over a workspace:
//     states one block per (chunk, head, tile of 2048 state elements): the chunk-local end state
//            Ŝ[a][b] = Σ_u λ^{n−1−u}·k_u[a]·v_u[b] (u in tiles of 32 tokens through shared memory, in token order);
//     scan   one block per (sequence, head): S_k = λ^{n_k}·S_{k−1} + Ŝ_k over the sequence's chunks in order,
//            leaving S_{k−1} (the state entering chunk k) in chunk k's slot and the final state in state_out;
//     output one block per (chunk, head, 32 rows): o_i = scale·(λ^{i+1}·q_i S_{k−1} + Σ_{j≤i} λ^{i−j}(q_i·k_j) v_j)
//            (q·k as fp32 dot products over dk; the sum over j in token order, 32 at a time; masked terms skipped).
//     λ^m is computed as expf(g·m) (one fp32 product and one expf; the reference: exp in double). Chunks are
//     numbered sequence by sequence; the grids cover ceil(T/Q) + N chunk slots (an upper bound on Σ ceil(len/Q)) and
//     the spare blocks exit, so the launch shapes depend on T and N only.
//   simple_gla_recurrent_forward_cuda: the token recurrence, one block per (sequence, head), one thread per state
//     column b (columns b, b + 128, ...), a serial loop over a: S[a][b] = λ·S[a][b] + k[a]·v[b], o[b] += q[a]·S[a][b].
//     The state lives in state_out (copied from state_in first unless they alias). For a decode step (one token per
//     sequence) this is the whole update: one launch.
// Numerics: fp32 throughout (the CPU reference sums in double), fixed summation orders, no atomics: deterministic.
// The tests derive their tolerance from the longest chain of roundings (tests/cuda/cases_simple_gla.cpp).
// Limits: dk, dv ≤ simple_gla_cuda_max_dim(), chunk ≤ simple_gla_cuda_max_chunk() (input errors past them;
// Ring-mini-linear-2.0: dk = dv = 128, chunk 64).
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace hlm {

struct SimpleGlaCudaParams {
  int64_t total_tokens = 0;  // T
  int64_t heads = 0;         // H
  int64_t key_dim = 0;       // dk
  int64_t value_dim = 0;     // dv
  int64_t n_seqs = 0;        // N
  int64_t chunk = 64;        // Q (chunked form; the CPU reference's kSimpleGlaChunk)
  float scale = 0.0f;        // 0 = dk^−1/2
};

struct SimpleGlaCudaInputs {
  const float* q = nullptr;
  const float* k = nullptr;
  const float* v = nullptr;
  const float* g = nullptr;         // [H]
  const float* state_in = nullptr;  // nullable
  const int64_t* cu_seqlens = nullptr;
};

constexpr int64_t simple_gla_cuda_max_dim() { return 256; }
constexpr int64_t simple_gla_cuda_max_chunk() { return 1024; }

// Bytes of device scratch the chunked form needs: one dk×dv state per chunk slot and head.
size_t simple_gla_chunked_cuda_workspace_bytes(const SimpleGlaCudaParams& p);

void simple_gla_chunked_forward_cuda(float* o, float* state_out, const SimpleGlaCudaInputs& in,
                                     const SimpleGlaCudaParams& p, void* workspace, size_t workspace_bytes,
                                     cudaStream_t stream);

// state_out is required (the recurrence runs in it); it may alias in.state_in (a decode step in place).
void simple_gla_recurrent_forward_cuda(float* o, float* state_out, const SimpleGlaCudaInputs& in,
                                       const SimpleGlaCudaParams& p, cudaStream_t stream);

// The Lightning mixer's output step (layers/lightning_layer.cpp, in float): per token and each of `groups` groups of
// width = channels / groups, y = weight · (o / sqrt(mean(o²) + eps)) · sigmoid(gate), sigmoid(v) = 1 / (1 + e^−v).
// o, gate, y [T, channels]; weight [channels]; y may alias o. The mean of squares is an fp32 block sum (the CPU's is
// in double).
void lightning_group_norm_gate_cuda(float* y, const float* o, const float* gate, const float* weight, int64_t tokens,
                                    int64_t channels, int64_t groups, float eps, cudaStream_t stream);

}  // namespace hlm
