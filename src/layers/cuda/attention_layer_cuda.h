// The full-attention token mixer on CUDA: the forward of layers/attention_layer.h (same dataflow, same optional
// q/k RMSNorm per head or over the whole projection, optional RoPE, causal GQA softmax attention, o_proj), fp32.
//   q̃ = x Wqᵀ, k̃ = x Wkᵀ, v = x Wvᵀ (+ biases);  q = rope(rmsnorm(q̃)·q_norm), k = rope(rmsnorm(k̃)·k_norm)
//   o = attention(q, k, v) [T, Hq·D];  out = o Woᵀ
// x, out [T, hidden] are device pointers (out may not alias x). Scratch comes from ctx's caching allocator and is
// released on return (safe: all work is on ctx's one stream). Queued, no synchronization.
// Differences from the CPU: the ops' own (docs/cuda.md): fp32 norm sums, flash online softmax, cuBLASLt GEMMs.
// bf16 compute mode (bf16_compute below and the linears' weight_bf16, layers/cuda/cuda_linear.h): x is rounded to
// bf16 once per call and shared by q_proj, k_proj and v_proj (forward and backward); o_proj reads the kernel's bf16
// out directly. Every result is BIT-IDENTICAL to rounding inside each projection (the rounding is deterministic).
#pragma once
#include "backend/cuda/cuda_context.h"
#include "layers/attention_layer.h"
#include "layers/cuda/cuda_linear.h"
#include "layers/cuda/cuda_token_batch.h"
#include "ops/rmsnorm/rmsnorm_cuda.h"
#include "ops/rope/rope_cuda.h"

namespace hlm {

struct CudaAttentionWeights {
  CudaLinear q_proj, k_proj, v_proj, o_proj;
  // Output gate (Qwen3.5): out = o_proj(o ⊙ sigmoid(x·gate_projᵀ)); out_features 0 = none. Forward only (a gated
  // model's CUDA training is refused, CudaModel::forward_train), and fp32 even in the bf16 compute mode (it is not
  // in CudaModel's linear tables); o_proj then reads the gated o in fp32 (rounded inside the call in bf16 mode).
  CudaLinear gate_proj;
  CudaTensor q_norm, k_norm;  // [D] or [H·D]; numel 0 = no norm
  int64_t q_norm_size = 0, k_norm_size = 0;
  // bf16 compute mode (models/cuda/cuda_model.h): q, k, v are rounded to bf16 and the softmax attention runs on the
  // tensor-core bf16 kernels (fp32 softmax statistics and accumulation, bf16 out); out and the gradients are widened
  // back to fp32 exactly.
  bool bf16_compute = false;
};

// Checks the host weights against dims (attention_check_weights) and uploads them.
CudaAttentionWeights cuda_upload_attention(CudaContext& ctx, const AttentionWeights& w, const AttentionDims& dims);

// The rows of a q/k RMSNorm over a [T, heads·D] projection: per head (norm_size D) or the whole projection
// (heads·D), as the CPU's norm_rows (internal error otherwise).
RmsnormCudaParams attention_qk_norm_params(int64_t norm_size, int64_t tokens, int64_t heads, int64_t head_dim,
                                           float eps);

// The forward's intermediates (attention_layer.cpp's Activations with keep_pre_norm, plus the softmax's lse):
// what the forward computes before o_proj, and what the backward needs. Each mode keeps only what its backward reads:
//   fp32 mode: q_lin, k_lin, q, k, v, o, lse (q16 .. o16 empty);
//   bf16 compute mode: q_lin, k_lin (fp32: the q/k norms' backward reads them), lse, and the attention kernel's bf16
//     q16, k16, v16, o16 (its backward reads those; o_proj reads o16); q, k, v and o are empty.
struct AttentionCudaActivations {
  CudaTensor q_lin, k_lin;  // q̃ [T, Hq·D], k̃ [T, Hkv·D]: the projections before the q/k norms
  CudaTensor q, k, v;       // q, k after norm and rope; v (fp32 mode only)
  CudaTensor o;             // attention output [T, Hq·D] (o_proj's input; fp32 mode only)
  CudaTensor lse;           // [T, Hq] fp32 log-sum-exp of each softmax row
  CudaTensor q16, k16, v16, o16;  // bf16 compute mode: the kernel's bf16 operands and output (else empty)
};

// Runs the forward up to o, keeping the intermediates above. rope: nullptr = no rotary embedding (OLMo-Hybrid); the
// table must cover batch.max_seqlen positions. x: fp32, with its bf16 rounding if the caller has it (cuda_linear.h),
// else rounded once here for the three projections.
AttentionCudaActivations attention_forward_activations_cuda(CudaContext& ctx, const CudaLinearInput& x,
                                                            const CudaAttentionWeights& w, const AttentionDims& dims,
                                                            const RopeCudaTable* rope, const CudaBatchView& batch);
// o_proj's input held by `act`: o16 in the bf16 compute mode (the same bits as rounding the widened o), else o.
CudaLinearInput attention_o_input(const AttentionCudaActivations& act);

// out = o Woᵀ after attention_forward_activations_cuda.
void attention_layer_forward_cuda(CudaContext& ctx, float* out, const float* x, const CudaAttentionWeights& w,
                                  const AttentionDims& dims, const RopeCudaTable* rope, const CudaBatchView& batch);
// The same with x's bf16 rounding given beside it (cuda_linear.h: then not rounded again here).
void attention_layer_forward_cuda(CudaContext& ctx, float* out, const CudaLinearInput& x,
                                  const CudaAttentionWeights& w, const AttentionDims& dims, const RopeCudaTable* rope,
                                  const CudaBatchView& batch);
// The same forward, handing its intermediates back (kept activations, models/cuda/cuda_model_train.h): the very
// tensors the recomputing backward would rebuild from x, bf16 operands in the bf16 compute mode.
AttentionCudaActivations attention_layer_forward_keep_cuda(CudaContext& ctx, float* out, const CudaLinearInput& x,
                                                           const CudaAttentionWeights& w, const AttentionDims& dims,
                                                           const RopeCudaTable* rope, const CudaBatchView& batch);

// The backward of layers/attention_layer.h with per-layer recomputation (attention_layer_cuda_backward.cpp):
// attention_forward_activations_cuda (q̃, k̃ before the q/k norms, q, k, v, o and the softmax's lse) then
// attention_layer_backward_from_cuda. dx [T, hidden] OVERWRITTEN; grads (same layout as w, device) ACCUMULATED (+=).
// dx may not alias d_out or x. d_out16 (optional): d_out's bf16 rounding (cast_f32_to_bf16_cuda's bits), which
// o_proj's backward then reads in the bf16 compute mode instead of rounding d_out again (the same bits;
// cuda_linear_backward_dy16).
void attention_layer_backward_cuda(CudaContext& ctx, float* dx, CudaAttentionWeights& grads, const float* d_out,
                                   const float* x, const CudaAttentionWeights& w, const AttentionDims& dims,
                                   const RopeCudaTable* rope, const CudaBatchView& batch);
// The same with x's bf16 rounding given beside it (cuda_linear.h: then not rounded again here).
void attention_layer_backward_cuda(CudaContext& ctx, float* dx, CudaAttentionWeights& grads, const float* d_out,
                                   const CudaLinearInput& x, const CudaAttentionWeights& w, const AttentionDims& dims,
                                   const RopeCudaTable* rope, const CudaBatchView& batch,
                                   const __nv_bfloat16* d_out16 = nullptr);
// The walk back from given activations `act` (of this x, w and batch), in the CPU's order: o_proj, flash attention
// backward, rope, q/k norms, q/k/v projections. Same contract as attention_layer_backward_cuda; act is only read.
// x as in attention_forward_activations_cuda (in the bf16 mode its bf16 rounding alone is enough; it is rounded once
// here otherwise).
void attention_layer_backward_from_cuda(CudaContext& ctx, float* dx, CudaAttentionWeights& grads, const float* d_out,
                                        const CudaLinearInput& x, const AttentionCudaActivations& act,
                                        const CudaAttentionWeights& w, const AttentionDims& dims,
                                        const RopeCudaTable* rope, const CudaBatchView& batch,
                                        const __nv_bfloat16* d_out16 = nullptr);

}  // namespace hlm
