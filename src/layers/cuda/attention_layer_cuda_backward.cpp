// Full-attention layer backward on CUDA, step for step as attention_layer.cpp's forward_activations (keep_pre_norm)
// followed by its backward_from: the recomputing entry point, and the walk back from given activations.
#include "core/error.h"
#include "layers/cuda/attention_layer_cuda.h"
#include "ops/cast/cast_cuda.h"
#include "ops/attention/attention_cuda.h"
#include "ops/rmsnorm/rmsnorm_cuda.h"

namespace hlm {

namespace {

// In-place backward of one q/k norm: d (gradient at the normed output) becomes the gradient at the projection `lin`;
// dweight += (accumulated, as the CPU).
void qk_norm_backward(CudaContext& ctx, float* d, float* dweight, const float* lin, const float* weight,
                      const RmsnormCudaParams& p) {
  CudaTensor ws = cuda_scratch_bytes(ctx, rmsnorm_backward_cuda_workspace_bytes(p));
  rmsnorm_backward_cuda(d, dweight, d, lin, weight, p, ws.raw(), rmsnorm_backward_cuda_workspace_bytes(p),
                        ctx.stream());
}

}  // namespace

void attention_layer_backward_cuda(CudaContext& ctx, float* dx, CudaAttentionWeights& g, const float* d_out,
                                   const float* x, const CudaAttentionWeights& w, const AttentionDims& d,
                                   const RopeCudaTable* rope, const CudaBatchView& b) {
  attention_layer_backward_cuda(ctx, dx, g, d_out, CudaLinearInput{x, nullptr}, w, d, rope, b);
}

void attention_layer_backward_cuda(CudaContext& ctx, float* dx, CudaAttentionWeights& g, const float* d_out,
                                   const CudaLinearInput& x, const CudaAttentionWeights& w, const AttentionDims& d,
                                   const RopeCudaTable* rope, const CudaBatchView& b, const __nv_bfloat16* d_out16) {
  CudaTensor x16;  // bf16 mode: x rounded once for the recomputed forward and the backward (unless given rounded)
  const CudaLinearInput in = cuda_linear_round_input(ctx, x16, x, w.q_proj, b.tokens);
  const AttentionCudaActivations a = attention_forward_activations_cuda(ctx, in, w, d, rope, b);
  attention_layer_backward_from_cuda(ctx, dx, g, d_out, in, a, w, d, rope, b, d_out16);
}

void attention_layer_backward_from_cuda(CudaContext& ctx, float* dx, CudaAttentionWeights& g, const float* d_out,
                                        const CudaLinearInput& x, const AttentionCudaActivations& a,
                                        const CudaAttentionWeights& w, const AttentionDims& d,
                                        const RopeCudaTable* rope, const CudaBatchView& b,
                                        const __nv_bfloat16* d_out16) {
  HLM_CHECK(dx != x.f32 && static_cast<const void*>(dx) != static_cast<const void*>(x.bf16) && dx != d_out,
            "attention backward: dx may not alias x or d_out");
  HLM_CHECK(g.q_norm_size == w.q_norm_size && g.k_norm_size == w.k_norm_size,
            "attention backward: the gradient holder's q/k norms do not match the weights");
  const cudaStream_t stream = ctx.stream();
  const int64_t n = b.tokens, D = d.head_dim, Cq = d.q_heads * D, Ckv = d.kv_heads * D;
  // The tensors this mode's backward reads (attention_forward_activations_cuda keeps exactly these).
  const bool bf16_o_proj = cuda_linear_is_bf16(w.o_proj);
  HLM_CHECK(a.lse.numel() == n * d.q_heads && (bf16_o_proj || a.o.numel() == n * Cq) &&
                (w.bf16_compute ? a.q16.raw() != nullptr && a.k16.raw() != nullptr && a.v16.raw() != nullptr &&
                                      a.o16.raw() != nullptr
                                : a.q.numel() == n * Cq && a.k.numel() == n * Ckv && a.v.numel() == n * Ckv),
            "attention backward: the activations do not match the batch or the compute mode");

  const AttentionCudaParams ap{n, d.q_heads, d.kv_heads, D, b.n_seqs, b.max_seqlen, d.scale, d.window};

  CudaTensor d_o = CudaTensor::empty(ctx, {n, Cq});
  cuda_linear_backward_dy16(ctx, d_o.data<float>(), g.o_proj, d_out, d_out16, attention_o_input(a), w.o_proj, n,
                            false);
  CudaTensor dq = CudaTensor::empty(ctx, {n, Cq}), dk = CudaTensor::empty(ctx, {n, Ckv});
  // dv passes through no op before v_proj's backward: in the bf16 mode v_proj reads the kernel's bf16 dv itself (the
  // widening and re-rounding it replaces give the same bits: exact widening, and the kernel writes no signalling
  // NaN, the one value the round trip would change; as o16 for o_proj).
  const bool bf16_dv = w.bf16_compute && cuda_linear_is_bf16(w.v_proj);
  CudaTensor dv = bf16_dv ? CudaTensor() : CudaTensor::empty(ctx, {n, Ckv});
  CudaTensor dv16;
  {
    const size_t bytes = attention_backward_cuda_workspace_bytes(ap);
    CudaTensor ws = cuda_scratch_bytes(ctx, bytes);
    if (w.bf16_compute) {
      const CudaTensor d_o16 = cuda_round_bf16(ctx, d_o.data<float>(), n * Cq);
      const int64_t nq = n > 0 ? n * Cq : 1, nkv = n > 0 ? n * Ckv : 1;
      CudaTensor dq16 = CudaTensor::empty(ctx, {nq}, DType::BF16), dk16 = CudaTensor::empty(ctx, {nkv}, DType::BF16);
      dv16 = CudaTensor::empty(ctx, {nkv}, DType::BF16);
      attention_backward_cuda(dq16.data<__nv_bfloat16>(), dk16.data<__nv_bfloat16>(), dv16.data<__nv_bfloat16>(),
                              d_o16.data<__nv_bfloat16>(), a.q16.data<__nv_bfloat16>(), a.k16.data<__nv_bfloat16>(),
                              a.v16.data<__nv_bfloat16>(), a.o16.data<__nv_bfloat16>(), a.lse.data<float>(),
                              b.cu_seqlens, ap, ws.raw(), bytes, b.error_flag, stream);
      cast_bf16_to_f32_cuda(dq.data<float>(), dq16.data<__nv_bfloat16>(), n * Cq, stream);
      cast_bf16_to_f32_cuda(dk.data<float>(), dk16.data<__nv_bfloat16>(), n * Ckv, stream);
      if (!bf16_dv) cast_bf16_to_f32_cuda(dv.data<float>(), dv16.data<__nv_bfloat16>(), n * Ckv, stream);
    } else {
      attention_backward_cuda(dq.data<float>(), dk.data<float>(), dv.data<float>(), d_o.data<float>(),
                              a.q.data<float>(), a.k.data<float>(), a.v.data<float>(), a.o.data<float>(),
                              a.lse.data<float>(), b.cu_seqlens, ap, ws.raw(), bytes, b.error_flag, stream);
    }
  }
  if (rope != nullptr) {
    rope_backward_cuda(dq.data<float>(), b.positions, n, d.q_heads, *rope, b.error_flag, stream);
    rope_backward_cuda(dk.data<float>(), b.positions, n, d.kv_heads, *rope, b.error_flag, stream);
  }
  if (w.q_norm_size > 0)
    qk_norm_backward(ctx, dq.data<float>(), g.q_norm.data<float>(), a.q_lin.data<float>(), w.q_norm.data<float>(),
                     attention_qk_norm_params(w.q_norm_size, n, d.q_heads, D, d.norm_eps));
  if (w.k_norm_size > 0)
    qk_norm_backward(ctx, dk.data<float>(), g.k_norm.data<float>(), a.k_lin.data<float>(), w.k_norm.data<float>(),
                     attention_qk_norm_params(w.k_norm_size, n, d.kv_heads, D, d.norm_eps));
  CudaTensor x16;  // bf16 mode: x rounded once for q_proj, k_proj and v_proj (unless the caller has it)
  const CudaLinearInput xin = cuda_linear_round_input(ctx, x16, x, w.q_proj, n);
  cuda_linear_backward(ctx, dx, g.q_proj, dq.data<float>(), xin, w.q_proj, n, /*accumulate_dx=*/false);
  cuda_linear_backward(ctx, dx, g.k_proj, dk.data<float>(), xin, w.k_proj, n, /*accumulate_dx=*/true);
  if (bf16_dv)
    cuda_linear_backward_bf16_dy(ctx, dx, g.v_proj, dv16.data<__nv_bfloat16>(), xin, w.v_proj, n,
                                 /*accumulate_dx=*/true);
  else
    cuda_linear_backward(ctx, dx, g.v_proj, dv.data<float>(), xin, w.v_proj, n, /*accumulate_dx=*/true);
}

}  // namespace hlm
