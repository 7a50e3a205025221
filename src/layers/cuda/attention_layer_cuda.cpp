// Full-attention layer forward on CUDA, step for step as attention_layer.cpp's forward_activations + o_proj (plain,
// or handing the intermediates back for kept activations).
#include "layers/cuda/attention_layer_cuda.h"

#include <utility>

#include "core/error.h"
#include "ops/attention/attention_cuda.h"
#include "ops/cast/cast_cuda.h"
#include "ops/rmsnorm/rmsnorm_cuda.h"
#include "ops/sigmoid_gate/sigmoid_gate_cuda.h"

namespace hlm {

CudaAttentionWeights cuda_upload_attention(CudaContext& ctx, const AttentionWeights& w, const AttentionDims& dims) {
  attention_check_weights(w, dims);
  CudaAttentionWeights d;
  d.q_proj = cuda_upload_linear(ctx, w.q_proj, "q_proj");
  d.k_proj = cuda_upload_linear(ctx, w.k_proj, "k_proj");
  d.v_proj = cuda_upload_linear(ctx, w.v_proj, "v_proj");
  d.o_proj = cuda_upload_linear(ctx, w.o_proj, "o_proj");
  if (w.gate_proj.weight.defined()) d.gate_proj = cuda_upload_linear(ctx, w.gate_proj, "gate_proj");
  if (w.q_norm.defined()) {
    d.q_norm = cuda_upload_f32(ctx, w.q_norm, "q_norm.weight");
    d.q_norm_size = w.q_norm.numel();
  }
  if (w.k_norm.defined()) {
    d.k_norm = cuda_upload_f32(ctx, w.k_norm, "k_norm.weight");
    d.k_norm_size = w.k_norm.numel();
  }
  return d;
}

RmsnormCudaParams attention_qk_norm_params(int64_t norm_size, int64_t tokens, int64_t heads, int64_t D, float eps) {
  HLM_CHECK(norm_size == D || norm_size == heads * D, "q/k norm of ", norm_size, " entries for ", heads,
            " heads of ", D);
  return {tokens * heads * D / norm_size, norm_size, eps};
}

AttentionCudaActivations attention_forward_activations_cuda(CudaContext& ctx, const CudaLinearInput& x,
                                                            const CudaAttentionWeights& w, const AttentionDims& d,
                                                            const RopeCudaTable* rope, const CudaBatchView& b) {
  const cudaStream_t stream = ctx.stream();
  const int64_t n = b.tokens, D = d.head_dim, Cq = d.q_heads * D, Ckv = d.kv_heads * D;
  AttentionCudaActivations a;
  a.q_lin = CudaTensor::empty(ctx, {n, Cq});
  a.k_lin = CudaTensor::empty(ctx, {n, Ckv});
  a.lse = CudaTensor::empty(ctx, {n, d.q_heads});
  // q, k, v in fp32: kept for the fp32 backward; in the bf16 mode only their roundings are kept (below).
  CudaTensor q = CudaTensor::empty(ctx, {n, Cq}), k = CudaTensor::empty(ctx, {n, Ckv});
  CudaTensor v = CudaTensor::empty(ctx, {n, Ckv});
  {
    CudaTensor x16;  // bf16 mode: x rounded once for q_proj, k_proj and v_proj (unless the caller has it)
    const CudaLinearInput in = cuda_linear_round_input(ctx, x16, x, w.q_proj, n);
    cuda_linear_forward(ctx, a.q_lin.data<float>(), in, w.q_proj, n);
    cuda_linear_forward(ctx, a.k_lin.data<float>(), in, w.k_proj, n);
    cuda_linear_forward(ctx, v.data<float>(), in, w.v_proj, n);
  }
  // q = rmsnorm(q̃)·q_norm (or q̃ itself), likewise k.
  const struct {
    const CudaTensor& lin;
    CudaTensor& out;
    const CudaTensor& weight;
    int64_t norm_size, heads;
  } norms[] = {{a.q_lin, q, w.q_norm, w.q_norm_size, d.q_heads}, {a.k_lin, k, w.k_norm, w.k_norm_size, d.kv_heads}};
  for (const auto& nm : norms) {
    if (nm.norm_size > 0) {
      rmsnorm_forward_cuda(nm.out.data<float>(), nm.lin.data<float>(), nm.weight.data<float>(),
                           attention_qk_norm_params(nm.norm_size, n, nm.heads, D, d.norm_eps), stream);
    } else {
      cuda_copy_device(ctx, nm.out.raw(), nm.lin.raw(), nm.out.nbytes());
    }
  }
  if (rope != nullptr) {
    HLM_CHECK(rope->head_dim == D, "rope table head_dim ", rope->head_dim, " != attention head_dim ", D);
    HLM_CHECK(rope->num_positions >= b.max_seqlen, "rope table of ", rope->num_positions,
              " positions for sequences of ", b.max_seqlen);
    if (!w.bf16_compute) {  // the bf16 mode rotates into q16 / k16 below
      rope_forward_cuda(q.data<float>(), b.positions, n, d.q_heads, *rope, b.error_flag, stream);
      rope_forward_cuda(k.data<float>(), b.positions, n, d.kv_heads, *rope, b.error_flag, stream);
    }
  }
  const AttentionCudaParams ap{n, d.q_heads, d.kv_heads, D, b.n_seqs, b.max_seqlen, d.scale, d.window};
  if (w.bf16_compute) {
    // The bf16 backward reads q16, k16, v16, o16 and lse, never the fp32 q, k, v: those go back to the allocator.
    // With RoPE, q and k are rotated straight into their bf16 roundings (rope_forward_bf16_cuda: the bits of rotating
    // in place and casting), else cast.
    if (rope != nullptr) {
      a.q16 = CudaTensor::empty(ctx, {n > 0 ? n * Cq : 1}, DType::BF16);
      a.k16 = CudaTensor::empty(ctx, {n > 0 ? n * Ckv : 1}, DType::BF16);
      rope_forward_bf16_cuda(a.q16.data<__nv_bfloat16>(), q.data<float>(), b.positions, n, d.q_heads, *rope,
                             b.error_flag, stream);
      rope_forward_bf16_cuda(a.k16.data<__nv_bfloat16>(), k.data<float>(), b.positions, n, d.kv_heads, *rope,
                             b.error_flag, stream);
    } else {
      a.q16 = cuda_round_bf16(ctx, q.data<float>(), n * Cq);
      a.k16 = cuda_round_bf16(ctx, k.data<float>(), n * Ckv);
    }
    a.v16 = cuda_round_bf16(ctx, v.data<float>(), n * Ckv);
    a.o16 = CudaTensor::empty(ctx, {n > 0 ? n * Cq : 1}, DType::BF16);
    attention_forward_cuda(a.o16.data<__nv_bfloat16>(), a.lse.data<float>(), a.q16.data<__nv_bfloat16>(),
                           a.k16.data<__nv_bfloat16>(), a.v16.data<__nv_bfloat16>(), b.cu_seqlens, ap, b.error_flag,
                           stream);
    // o_proj in the bf16 mode reads o16 itself: the kernel's bf16 out widened to fp32 and rounded back gives the
    // same bits (exact widening; the kernel writes no signalling NaN, the one value the round trip would change).
    // An fp32-mode o_proj (not a mode CudaModel sets) reads the widened o.
    if (!cuda_linear_is_bf16(w.o_proj)) {
      a.o = CudaTensor::empty(ctx, {n, Cq});
      cast_bf16_to_f32_cuda(a.o.data<float>(), a.o16.data<__nv_bfloat16>(), n * Cq, stream);
    }
    return a;
  }
  a.q = std::move(q);
  a.k = std::move(k);
  a.v = std::move(v);
  a.o = CudaTensor::empty(ctx, {n, Cq});
  attention_forward_cuda(a.o.data<float>(), a.lse.data<float>(), a.q.data<float>(), a.k.data<float>(),
                         a.v.data<float>(), b.cu_seqlens, ap, b.error_flag, stream);
  return a;
}

CudaLinearInput attention_o_input(const AttentionCudaActivations& act) {
  // o16 (bf16 mode) holds the o_proj input's rounding; a.o (when kept) the fp32 one.
  return cuda_linear_input(act.o, act.o16);
}

AttentionCudaActivations attention_layer_forward_keep_cuda(CudaContext& ctx, float* out, const CudaLinearInput& x,
                                                           const CudaAttentionWeights& w, const AttentionDims& d,
                                                           const RopeCudaTable* rope, const CudaBatchView& b) {
  HLM_CHECK(out != x.f32 && static_cast<const void*>(out) != static_cast<const void*>(x.bf16),
            "attention forward: out may not alias x");
  AttentionCudaActivations a = attention_forward_activations_cuda(ctx, x, w, d, rope, b);
  if (w.gate_proj.out_features > 0) {  // og = o ⊙ sigmoid(x Wgᵀ) in fp32, then o_proj
    const int64_t n = b.tokens, Cq = d.q_heads * d.head_dim;
    CudaTensor og = CudaTensor::empty(ctx, {n, Cq}), gate = CudaTensor::empty(ctx, {n, Cq});
    if (a.o.numel() == n * Cq)
      cuda_copy_device(ctx, og.raw(), a.o.raw(), og.nbytes());
    else  // bf16 mode: the kernel's bf16 out, widened exactly
      cast_bf16_to_f32_cuda(og.data<float>(), a.o16.data<__nv_bfloat16>(), n * Cq, ctx.stream());
    CudaTensor x16;
    cuda_linear_forward(ctx, gate.data<float>(), cuda_linear_round_input(ctx, x16, x, w.gate_proj, n), w.gate_proj, n);
    sigmoid_gate_forward_cuda(og.data<float>(), og.data<float>(), gate.data<float>(), n * Cq, ctx.stream());
    cuda_linear_forward(ctx, out, og.data<float>(), w.o_proj, n);
    return a;
  }
  cuda_linear_forward(ctx, out, attention_o_input(a), w.o_proj, b.tokens);
  return a;
}

void attention_layer_forward_cuda(CudaContext& ctx, float* out, const CudaLinearInput& x,
                                  const CudaAttentionWeights& w, const AttentionDims& d, const RopeCudaTable* rope,
                                  const CudaBatchView& b) {
  attention_layer_forward_keep_cuda(ctx, out, x, w, d, rope, b);  // the intermediates go back
}

void attention_layer_forward_cuda(CudaContext& ctx, float* out, const float* x, const CudaAttentionWeights& w,
                                  const AttentionDims& d, const RopeCudaTable* rope, const CudaBatchView& b) {
  attention_layer_forward_cuda(ctx, out, CudaLinearInput{x, nullptr}, w, d, rope, b);
}

}  // namespace hlm
