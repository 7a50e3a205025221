// Full-attention layer forward on CUDA, step for step as attention_layer.cpp's forward_activations + o_proj.
#include "layers/cuda/attention_layer_cuda.h"

#include "core/error.h"
#include "ops/attention/attention_cuda.h"
#include "ops/rmsnorm/rmsnorm_cuda.h"

namespace hlm {

CudaAttentionWeights cuda_upload_attention(CudaContext& ctx, const AttentionWeights& w, const AttentionDims& dims) {
  attention_check_weights(w, dims);
  CudaAttentionWeights d;
  d.q_proj = cuda_upload_linear(ctx, w.q_proj, "q_proj");
  d.k_proj = cuda_upload_linear(ctx, w.k_proj, "k_proj");
  d.v_proj = cuda_upload_linear(ctx, w.v_proj, "v_proj");
  d.o_proj = cuda_upload_linear(ctx, w.o_proj, "o_proj");
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

namespace {

// In-place RMSNorm of a [T, heads·D] projection: per head (norm_size D) or over the whole projection (H·D), as the
// CPU's norm_rows.
void qk_norm(CudaContext& ctx, float* x, const CudaTensor& weight, int64_t norm_size, int64_t tokens, int64_t heads,
             int64_t D, float eps) {
  HLM_CHECK(norm_size == D || norm_size == heads * D, "q/k norm of ", norm_size, " entries for ", heads,
            " heads of ", D);
  const RmsnormCudaParams p{tokens * heads * D / norm_size, norm_size, eps};
  rmsnorm_forward_cuda(x, x, weight.data<float>(), p, ctx.stream());
}

}  // namespace

void attention_layer_forward_cuda(CudaContext& ctx, float* out, const float* x, const CudaAttentionWeights& w,
                                  const AttentionDims& d, const RopeCudaTable* rope, const CudaBatchView& b) {
  HLM_CHECK(out != x, "attention forward: out may not alias x");
  const int64_t n = b.tokens, D = d.head_dim, Cq = d.q_heads * D, Ckv = d.kv_heads * D;
  CudaTensor q = CudaTensor::empty(ctx, {n, Cq});
  CudaTensor k = CudaTensor::empty(ctx, {n, Ckv});
  CudaTensor v = CudaTensor::empty(ctx, {n, Ckv});
  CudaTensor o = CudaTensor::empty(ctx, {n, Cq});
  CudaTensor lse = CudaTensor::empty(ctx, {n, d.q_heads});  // kept by the flash kernel; unused in inference
  cuda_linear_forward(ctx, q.data<float>(), x, w.q_proj, n);
  cuda_linear_forward(ctx, k.data<float>(), x, w.k_proj, n);
  cuda_linear_forward(ctx, v.data<float>(), x, w.v_proj, n);
  if (w.q_norm_size > 0) qk_norm(ctx, q.data<float>(), w.q_norm, w.q_norm_size, n, d.q_heads, D, d.norm_eps);
  if (w.k_norm_size > 0) qk_norm(ctx, k.data<float>(), w.k_norm, w.k_norm_size, n, d.kv_heads, D, d.norm_eps);
  if (rope != nullptr) {
    HLM_CHECK(rope->head_dim == D, "rope table head_dim ", rope->head_dim, " != attention head_dim ", D);
    HLM_CHECK(rope->num_positions >= b.max_seqlen, "rope table of ", rope->num_positions,
              " positions for sequences of ", b.max_seqlen);
    rope_forward_cuda(q.data<float>(), b.positions, n, d.q_heads, *rope, b.error_flag, ctx.stream());
    rope_forward_cuda(k.data<float>(), b.positions, n, d.kv_heads, *rope, b.error_flag, ctx.stream());
  }
  const AttentionCudaParams ap{n, d.q_heads, d.kv_heads, D, b.n_seqs, b.max_seqlen, d.scale};
  attention_forward_cuda(o.data<float>(), lse.data<float>(), q.data<float>(), k.data<float>(), v.data<float>(),
                         b.cu_seqlens, ap, b.error_flag, ctx.stream());
  cuda_linear_forward(ctx, out, o.data<float>(), w.o_proj, n);
}

}  // namespace hlm
