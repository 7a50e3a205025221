// Causal GQA softmax attention over packed sequences on CUDA: launchers for the contract in attention.h (layout,
// cu_seqlens, head mapping h -> h / (Hq / Hkv), scale, causal mask), raw device pointers, queued on `stream`, no
// synchronization. Flash-style: the forward keeps a running max and sum per query row and stores the row's
// logsumexp; the backward recomputes P from q, k and that logsumexp. No T×T buffer exists anywhere: extra memory is
// O(T · Hq) (lse, and the backward's workspace).
//
// Shapes (contiguous, token-major): q, out, d_out, dq [T, Hq, D]; k, v, dk, dv [T, Hkv, D]; lse, workspace rows
// [T, Hq] fp32; cu_seqlens [n_seqs + 1] int64 ON THE DEVICE (sequence s spans tokens [cu_seqlens[s], cu_seqlens[s+1])).
// Head dims 1..128 (kernels are instantiated for D <= 64 and D <= 128, the tail of a tile padded with zeros); larger
// D is refused with an error. Outputs must not alias inputs (as on the CPU).
//
// Storage: f32, or bf16 q/k/v/out/d_out/dq/dk/dv; compute, the logsumexp and the workspace are always fp32.
//
// Numerics and semantics against the CPU reference (attention_ref.cpp):
//   - Scores s = (q · k) · scale as fp32 FMA dots in order d = 0..D-1; exp is expf (not __expf).
//   - Forward: online softmax over key tiles (running max m, running sum l, O rescaled by exp(m_old - m_new)), then
//     out = O · (1/l), lse = m + log(l). The CPU normalizes after the full max; the results agree to rounding.
//   - Masked (future or other-sequence) keys are skipped, never multiplied by 0, so an Inf in a masked k/v/d_out row
//     cannot leak in as 0·Inf = NaN; visible keys with p = 0 are multiplied like on the CPU (0·Inf = NaN there too).
//   - A row whose visible scores are all -Inf or NaN gets NaN out and NaN lse, as the CPU's exp(-Inf - -Inf) does;
//     any NaN score or a +Inf score makes the row NaN, as on the CPU.
//   - Backward: P = exp(s - lse), dP = dO · v, Dᵢ = rowsum(dO ∘ O) (the CPU uses Σⱼ P dP, the same value in exact
//     arithmetic), dS = P ⊙ (dP - D); dV = Pᵀ dO, dK = scale · dSᵀ Q, dQ = scale · dS K. dq, dk, dv are OVERWRITTEN
//     (every row of every sequence). dk/dv sum the query heads of their kv group in a fixed order. One difference
//     from the CPU: with ±Inf in d_out, Dᵢ = dO·O can be ±Inf where the CPU's Σⱼ P dP is NaN (Infs of both signs), so
//     dk may hold ±Inf where the CPU has NaN; NaN inputs propagate exactly as on the CPU.
//   - bf16 storage with D = 64 or 128 (and 16-byte aligned tensors) runs tensor-core kernels (attention_tc.cu,
//     mma.sync bf16 -> fp32): there the dots are the tensor cores' fp32 accumulations of exact products (not an
//     FMA chain in order d = 0..D-1), and P and dS are rounded to bf16 before they multiply v, dO, q or k, as in
//     FlashAttention (attention_tc.cu, kSplitP, says why and how to keep ~16 bits instead). The masking semantics
//     above are kept: masked pairs are skipped, not multiplied by 0.
//   - Deterministic: no float atomics. The forward and dq kernels own their query rows; the dk/dv kernel owns its key
//     rows and walks the group's query heads and query tiles in order.
//
// Sliding window (params.window > 0): the keys before pos − W + 1 are masked like future keys (skipped, never
// multiplied by 0), forward and backward; such calls run on the scalar kernels in both storages (the tensor-core
// path takes window 0 only).
//
// Bad cu_seqlens cannot throw from a kernel: when a sequence has negative length, leaves [0, T], is longer than
// params.max_seqlen, or cu_seqlens[0] != 0 or cu_seqlens[n_seqs] != T, `*error_flag` (nullable) is set to 1 and that
// sequence's rows are left unwritten.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace hlm {

struct AttentionCudaParams {
  int64_t total_tokens = 0;  // T
  int64_t q_heads = 0;       // Hq
  int64_t kv_heads = 0;      // Hkv, divides Hq
  int64_t head_dim = 0;      // D, 1..attention_cuda_max_head_dim()
  int64_t n_seqs = 0;
  int64_t max_seqlen = 0;    // >= the longest sequence (sizes the grid; the host knows it when it packs the batch)
  float scale = 1.0f;        // the CPU reference's float scale (HF: head_dim^-1/2)
  int64_t window = 0;        // sliding window W (attention.h): keys pos−W+1 .. pos; 0 = full causal attention
};

constexpr int64_t attention_cuda_max_head_dim() { return 128; }
// Tile sizes (queries per block, keys per step); the tests derive their tolerances from them.
constexpr int attention_cuda_query_tile() { return 64; }
constexpr int attention_cuda_key_tile() { return 64; }

// out = softmax(scale · q kᵀ + causal mask) v, OVERWRITTEN; lse [T, Hq] fp32 = log Σⱼ exp(sⱼ) per query row,
// OVERWRITTEN (the backward's input).
void attention_forward_cuda(float* out, float* lse, const float* q, const float* k, const float* v,
                            const int64_t* cu_seqlens, const AttentionCudaParams& p, int* error_flag,
                            cudaStream_t stream);
void attention_forward_cuda(__nv_bfloat16* out, float* lse, const __nv_bfloat16* q, const __nv_bfloat16* k,
                            const __nv_bfloat16* v, const int64_t* cu_seqlens, const AttentionCudaParams& p,
                            int* error_flag, cudaStream_t stream);

// Bytes of device scratch attention_backward_cuda needs (Dᵢ = rowsum(dO ∘ O), fp32 [T, Hq]).
size_t attention_backward_cuda_workspace_bytes(const AttentionCudaParams& p);

// dq, dk, dv OVERWRITTEN from d_out and the forward's q, k, v, out and lse. `workspace` holds
// attention_backward_cuda_workspace_bytes(p) bytes, used only by work on `stream`.
void attention_backward_cuda(float* dq, float* dk, float* dv, const float* d_out, const float* q, const float* k,
                             const float* v, const float* out, const float* lse, const int64_t* cu_seqlens,
                             const AttentionCudaParams& p, void* workspace, size_t workspace_bytes, int* error_flag,
                             cudaStream_t stream);
void attention_backward_cuda(__nv_bfloat16* dq, __nv_bfloat16* dk, __nv_bfloat16* dv, const __nv_bfloat16* d_out,
                             const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* v,
                             const __nv_bfloat16* out, const float* lse, const int64_t* cu_seqlens,
                             const AttentionCudaParams& p, void* workspace, size_t workspace_bytes, int* error_flag,
                             cudaStream_t stream);

}  // namespace hlm
